package io.quotastreams.broker;

import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.function.LongSupplier;
import org.apache.kafka.server.quota.ClientQuotaType;

/**
 * Follows the workers' quota config topic (as {@code kafka-configs} writes them:
 * docs/contract.md) into a {@link KafkaQuotas} of its own, so a broker knows every client quota
 * from the moment it is set: before an entity's first allocation it holds the quota's static
 * split, and the controller mutation quota, which the active controller charges for every
 * mutation of the cluster, whole. A config older than one already read for the same entity and
 * quota is refused as stale, as the workers refuse it.
 */
public final class ConfigFollower extends Follower {
    /** Each client quota's Kafka quota type. */
    static final Map<String, ClientQuotaType> TYPES = Map.of(
            "producer_byte_rate", ClientQuotaType.PRODUCE, "consumer_byte_rate", ClientQuotaType.FETCH,
            "request_percentage", ClientQuotaType.REQUEST, "controller_mutation_rate", ClientQuotaType.CONTROLLER_MUTATION);

    private record Key(String user, String clientId, String quota) {}

    private final KafkaQuotas quotas;
    /** the ts of the config in force per entity and quota (the reader thread's alone) */
    private final Map<Key, Long> newest = new HashMap<>();

    public ConfigFollower(Settings settings, KafkaQuotas quotas, LongSupplier clock) {
        super(settings, settings.configTopic(), "configs", clock);
        this.quotas = quotas;
    }

    @Override
    protected void apply(byte[] payload, long now) throws BadRecord {
        Records.Config config = Records.config(Records.decode(payload));
        if (config == null) {
            count("not_client_quotas");
            return;
        }
        if (config.ts() > now + Records.MAX_FUTURE_MS) {
            throw new BadRecord("ts_in_future", "");
        }
        for (String quota : List.copyOf(config.quotas().keySet())) {
            Key key = new Key(config.user(), config.clientId(), quota);
            Long held = newest.get(key);
            if (held != null && config.ts() < held) {
                count("stale");
                continue;
            }
            newest.put(key, config.ts());
            quotas.update(TYPES.get(quota), name(config.user()), name(config.clientId()), config.quotas().get(quota));
            count("applied");
        }
    }

    /** A config record's entity name as KafkaQuotas holds it. */
    private static String name(String part) {
        return Records.DEFAULT.equals(part) ? KafkaQuotas.DEFAULT : part;
    }
}
