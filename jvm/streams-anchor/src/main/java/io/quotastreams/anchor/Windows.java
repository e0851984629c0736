package io.quotastreams.anchor;

/**
 * The quotas the anchor enforces, as the benchmark configures the worker: every Produce's bytes
 * against {@code producer_byte_rate} per (user, client id), every Fetch's against
 * {@code consumer_byte_rate} per user, each on its broker, over {@code samples} windows of {@code windowMs};
 * a directive is published when none is active at the event's time or it moves the active one's
 * end later by more than {@code minExtensionMs} (the engine's rule).
 */
public record Windows(int samples, long windowMs, double producerLimit, double consumerLimit,
                      long minExtensionMs) {

    public Windows {
        if (samples < 1 || windowMs < 1 || producerLimit <= 0 || consumerLimit <= 0 || minExtensionMs < 0) {
            throw new IllegalArgumentException("samples, window and limits must be positive");
        }
    }

    /** The worker's defaults: 11 windows of 1 s, a tenth of a window as the minimum extension. */
    public static Windows of(double producerLimit, double consumerLimit) {
        return new Windows(11, 1000, producerLimit, consumerLimit, 100);
    }
}
