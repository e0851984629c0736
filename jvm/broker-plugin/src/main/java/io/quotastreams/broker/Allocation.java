package io.quotastreams.broker;

import java.util.Map;

/**
 * One validated allocation record: the bound each enforcer holds until {@code validUntil}, its
 * allocation x its trim ({@code enforcers}).
 */
public record Allocation(String quota, String user, String clientId, long ts, long validUntil,
                         double limit, double others, Map<Long, Double> enforcers) {

    /** This enforcer's bound: its own, or the floor of those the record does not list. */
    public double limitFor(long enforcer) {
        return enforcers.getOrDefault(enforcer, others);
    }
}
