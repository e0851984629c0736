package io.quotastreams.broker;

/** A control record the plugin refuses; {@code reason} is the short label it is counted by. */
public final class BadRecord extends Exception {
    private final String reason;

    public BadRecord(String reason, String detail) {
        super(detail.isEmpty() ? reason : reason + ": " + detail);
        this.reason = reason;
    }

    public String reason() {
        return reason;
    }
}
