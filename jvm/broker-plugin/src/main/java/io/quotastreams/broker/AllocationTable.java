package io.quotastreams.broker;

import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;

/**
 * The newest allocation per (quota, entity) and the limit it gives this broker.
 *
 * <p>While an allocation is valid the broker holds its own share (or the record's floor for an
 * enforcer it does not list); once it ends, the static split, the allocated quota / the brokers,
 * as app.subscriber.allocations.AllocatedLimits does when it has no allocation. The plugin knows a
 * quota only from its allocations, so it keeps the static split for {@code failSafeMs} after the
 * last one ended, then forgets the entity (its quota is taken to be gone). {@link #version}
 * changes whenever a limit may have changed, so Kafka is told to re-read them.
 *
 * <p>Thread-safe: the control-topic reader writes (one writer at a time), the broker's request
 * threads read without a lock, on every request.
 */
public final class AllocationTable {
    /** Outcome of {@link #apply}, counted by the reader. */
    public enum Outcome { ADDED, REPLACED, STALE, EXPIRED }

    private record Key(String quota, String user, String clientId) {}

    private final long failSafeMs;
    private final Map<Key, Allocation> held = new ConcurrentHashMap<>();
    private volatile long version;
    private long nextChange = Long.MAX_VALUE;

    public AllocationTable(long failSafeMs) {
        this.failSafeMs = failSafeMs;
    }

    public long version() {
        return version;
    }

    public int size() {
        return held.size();
    }

    /** How many allocations are in force at {@code now} (the rest are on their static split). */
    public int validCount(long now) {
        int valid = 0;
        for (Allocation a : held.values()) {
            if (a.validUntil() > now && a.limit() > 0) {
                valid++;
            }
        }
        return valid;
    }

    /** Take a validated allocation read at {@code now}. */
    public synchronized Outcome apply(Allocation a, long now) throws BadRecord {
        if (a.ts() > now + Records.MAX_FUTURE_MS) {
            throw new BadRecord("ts_in_future", "ts " + a.ts() + " is more than a day after now " + now);
        }
        Key key = new Key(a.quota(), a.user(), a.clientId());
        Allocation old = held.get(key);
        if (old != null && a.ts() < old.ts()) {
            return Outcome.STALE;
        }
        if (a.validUntil() + failSafeMs <= now) {
            return Outcome.EXPIRED;
        }
        held.put(key, a);
        nextChange = Math.min(nextChange, a.validUntil() > now ? a.validUntil() : a.validUntil() + failSafeMs);
        version++;
        if (a.validUntil() <= now) {
            return Outcome.EXPIRED;
        }
        return old == null ? Outcome.ADDED : Outcome.REPLACED;
    }

    /** Let validity and fail-safe periods that ended by {@code now} take effect. */
    public synchronized void tick(long now) {
        if (now < nextChange) {
            return;
        }
        held.values().removeIf(a -> a.validUntil() + failSafeMs <= now);
        long next = Long.MAX_VALUE;
        for (Allocation a : held.values()) {
            next = Math.min(next, a.validUntil() > now ? a.validUntil() : a.validUntil() + failSafeMs);
        }
        nextChange = next;
        version++;
    }

    /**
     * The allocated entity a request of {@code user} and {@code clientId} is charged to, in
     * Kafka's order of precedence (user and client id, user, client id), or null when no
     * allocation names one.
     */
    public Allocation entityFor(String quota, String user, String clientId) {
        Allocation a = held.get(new Key(quota, user, clientId));
        if (a == null) {
            a = held.get(new Key(quota, user, ""));
        }
        return a != null ? a : held.get(new Key(quota, "", clientId));
    }

    /** Whether an allocation of the entity ({@code user}, {@code clientId}) is valid at {@code now}. */
    public boolean valid(String quota, String user, String clientId, long now) {
        Allocation a = held.get(new Key(quota, user, clientId));
        return a != null && a.validUntil() > now && a.limit() > 0;
    }

    /**
     * This broker's limit for the allocated entity ({@code user}, {@code clientId}): its share
     * while the allocation is valid, else the quota / {@code brokers}; null (unlimited) when no
     * allocation is held for it.
     */
    public Double limit(String quota, String user, String clientId, long broker, int brokers, long now) {
        Allocation a = held.get(new Key(quota, user, clientId));
        if (a == null || a.validUntil() + failSafeMs <= now) {
            return null;
        }
        if (a.validUntil() > now && a.limit() > 0) {
            return a.limitFor(broker);
        }
        return a.limit() / Math.max(1, brokers);
    }
}
