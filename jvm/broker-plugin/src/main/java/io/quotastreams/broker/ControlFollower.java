package io.quotastreams.broker;

import com.fasterxml.jackson.databind.JsonNode;
import java.util.function.LongSupplier;

/**
 * Follows the control topic into an {@link AllocationTable}: allocations are taken, throttle
 * directives checked and counted (a quota callback sets bounds; it cannot make Kafka throttle a
 * client until a given time).
 */
public final class ControlFollower extends Follower {
    private final AllocationTable table;

    public ControlFollower(Settings settings, AllocationTable table, LongSupplier clock) {
        super(settings, settings.controlTopic(), "control", clock);
        this.table = table;
    }

    @Override
    protected void apply(byte[] payload, long now) throws BadRecord {
        JsonNode record = Records.decode(payload);
        if (!Records.isAllocation(record)) {
            Records.checkDirective(record);
            if (Records.ts(record) > now + Records.MAX_FUTURE_MS) {
                throw new BadRecord("ts_in_future", "");
            }
            count("directives_not_enforced");
            return;
        }
        count(table.apply(Records.allocation(record), now).name().toLowerCase());
    }

    @Override
    protected void tick(long now) {
        table.tick(now);
    }
}
