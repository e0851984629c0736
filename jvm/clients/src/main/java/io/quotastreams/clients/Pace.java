package io.quotastreams.clients;

import java.util.function.LongSupplier;

/**
 * Offers {@code rate} units per second without catching up: time spent blocked is not made up
 * afterwards (an offered load, not a backlog); {@code burst} caps the tokens saved while idle.
 * app/clients/report.py's Pace, the same arithmetic.
 */
public final class Pace {

    private final double rate;
    private final double burst;
    private final LongSupplier nanos;
    private double tokens;
    private long last;

    public Pace(double rate, double burst, LongSupplier nanos) {
        this.rate = rate;
        this.burst = burst;
        this.nanos = nanos;
        this.last = nanos.getAsLong();
    }

    /** Seconds to wait before {@code amount} may go (0: take it now). */
    public double take(double amount) {
        long now = nanos.getAsLong();
        tokens = Math.min(burst, tokens + (now - last) / 1e9 * rate);
        last = now;
        if (tokens >= amount) {
            tokens -= amount;
            return 0.0;
        }
        return (amount - tokens) / rate;
    }
}
