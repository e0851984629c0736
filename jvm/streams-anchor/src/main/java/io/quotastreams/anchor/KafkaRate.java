package io.quotastreams.anchor;

import java.nio.ByteBuffer;

/**
 * Kafka's sampled {@code Rate} (SampledStat over a windowed sum) as the worker's engine keeps it
 * (app/engine/stats.py): up to N + 1 samples of W ms, each starting at the event that opened it,
 * a sample reset once its last event is N*W behind, and the rate measured over the time since the
 * oldest sample started but never less than N - 1 full windows. Time is the events' own, clamped
 * so a state never moves backwards. A custom aggregate rather than Streams' hopping windows: a
 * hopping-window sum cannot reproduce Kafka's sample boundaries, purge or window length, and the
 * point of the anchor is the same arithmetic in both systems.
 */
public final class KafkaRate {

    private long[] starts;
    private long[] lasts;
    private double[] values;
    private int count;
    private int current;
    /** Latest event time seen (the monotonic clamp). */
    private long clock;
    /** {@code until} of the last directive published for this state (0: none). */
    private long until;

    public KafkaRate(int samples) {
        starts = new long[samples + 1];
        lasts = new long[samples + 1];
        values = new double[samples + 1];
    }

    /** The time to use for an event at {@code ts}: never earlier than one already seen. */
    public long advance(long ts) {
        if (ts > clock) {
            clock = ts;
        }
        return clock;
    }

    /** Sensor.record with a quota check: record, purge, and the rate per second over {@link #windowMs}. */
    public double recordMeasure(double value, long now, int n, long w) {
        if (count == 0 || now - starts[current] >= w) {
            newSample(now, n);
        }
        values[current] += value;
        lasts[current] = now;
        purge(now, n, w);
        return total() / (windowMs(now, n, w) / 1000.0);
    }

    /** Rate.windowSize after a purge: (N-1)*W at least, else the time since the oldest start. */
    public long windowMs(long now, int n, long w) {
        long oldest = starts[0];
        for (int i = 1; i < count; i++) {
            oldest = Math.min(oldest, starts[i]);
        }
        long elapsed = now - oldest;
        long full = elapsed / w;
        if (full < n - 1) {
            elapsed += (n - 1 - full) * w;
        }
        return Math.max(elapsed, 1);
    }

    public long until() {
        return until;
    }

    public void until(long value) {
        until = value;
    }

    private void newSample(long now, int n) {
        current = count == 0 ? 0 : (current + 1) % (n + 1);
        if (current >= count) {
            count = current + 1;
        }
        starts[current] = now;
        lasts[current] = now;
        values[current] = 0.0;
    }

    private void purge(long now, int n, long w) {
        long expire = n * w;
        for (int i = 0; i < count; i++) {
            if (now - lasts[i] >= expire) {
                starts[i] = now;
                lasts[i] = now;
                values[i] = 0.0;
            }
        }
    }

    /** The samples' sum in slot order, as Kafka adds them. */
    private double total() {
        double sum = 0.0;
        for (int i = 0; i < count; i++) {
            sum += values[i];
        }
        return sum;
    }

    /** The state as the store and its changelog hold it. */
    public byte[] toBytes() {
        ByteBuffer out = ByteBuffer.allocate(4 + 4 + 4 + 8 + 8 + count * 24);
        out.putInt(starts.length - 1).putInt(count).putInt(current).putLong(clock).putLong(until);
        for (int i = 0; i < count; i++) {
            out.putLong(starts[i]).putLong(lasts[i]).putDouble(values[i]);
        }
        return out.array();
    }

    public static KafkaRate fromBytes(byte[] data) {
        ByteBuffer in = ByteBuffer.wrap(data);
        KafkaRate rate = new KafkaRate(in.getInt());
        rate.count = in.getInt();
        rate.current = in.getInt();
        rate.clock = in.getLong();
        rate.until = in.getLong();
        for (int i = 0; i < rate.count; i++) {
            rate.starts[i] = in.getLong();
            rate.lasts[i] = in.getLong();
            rate.values[i] = in.getDouble();
        }
        return rate;
    }
}
