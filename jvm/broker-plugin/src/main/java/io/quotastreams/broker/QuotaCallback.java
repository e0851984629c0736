package io.quotastreams.broker;

import java.util.Arrays;
import java.util.Map;
import java.util.concurrent.atomic.AtomicLongArray;
import java.util.function.LongSupplier;
import org.apache.kafka.common.Cluster;
import org.apache.kafka.common.security.auth.KafkaPrincipal;
import org.apache.kafka.server.quota.ClientQuotaCallback;
import org.apache.kafka.server.quota.ClientQuotaEntity;
import org.apache.kafka.server.quota.ClientQuotaType;

/**
 * The broker's client quota callback (KIP-257, {@code client.quota.callback.class}): each broker
 * holds its allocation of a cluster-wide producer or consumer byte rate, and Kafka itself
 * enforces it (its rate window, {@code throttle_time_ms}, muting the channel).
 *
 * <p>Kafka asks {@link #quotaMetricTags} on every request for the sensor a request is charged
 * to, and {@link #quotaLimit} for that sensor's bound. A request is charged to the allocated
 * entity it belongs to (so clients sharing a quota share one window, as in Kafka); else to the
 * level of Kafka's own quota configs it resolves to, with Kafka's per-broker bound
 * ({@link KafkaQuotas}); else to its own user and client id, without a limit.
 * {@link #quotaResetRequired} answers true once after the allocations changed, and Kafka then
 * re-reads every sensor's bound.
 */
public final class QuotaCallback implements ClientQuotaCallback {
    static final String USER = "user";
    static final String CLIENT_ID = "client-id";

    private final LongSupplier clock;
    private final KafkaQuotas kafkaQuotas = new KafkaQuotas();
    /** per quota type, the table's version Kafka last re-read the bounds at (-1: never) */
    private final AtomicLongArray applied = newApplied();
    private Settings settings;
    private AllocationTable table;
    private ControlFollower follower;
    private Thread thread;
    private volatile int brokers;

    public QuotaCallback() {
        this(System::currentTimeMillis);
    }

    QuotaCallback(LongSupplier clock) {
        this.clock = clock;
    }

    @Override
    public void configure(Map<String, ?> configs) {
        settings = Settings.from(configs);
        brokers = settings.brokers();
        table = new AllocationTable(settings.failSafeMs());
        follower = new ControlFollower(settings, table, clock);
        thread = new Thread(follower, "quota-streams-control-follower");
        thread.setDaemon(true);
        thread.start();
    }

    /** For tests: a callback over a given table, with no reader. */
    static QuotaCallback over(AllocationTable table, long brokerId, int brokers, LongSupplier clock) {
        QuotaCallback callback = new QuotaCallback(clock);
        callback.table = table;
        callback.brokers = brokers;
        callback.settings = new Settings("", "", "", Seal.parse(""), brokerId, brokers, 0, 1000, 1, Map.of());
        return callback;
    }

    static String quotaName(ClientQuotaType type) {
        return switch (type) {
            case PRODUCE -> "producer_byte_rate";
            case FETCH -> "consumer_byte_rate";
            default -> null;
        };
    }

    @Override
    public Map<String, String> quotaMetricTags(ClientQuotaType type, KafkaPrincipal principal, String clientId) {
        String quota = quotaName(type);
        String user = principal.getName();
        Allocation a = quota == null ? null : table.entityFor(quota, user, clientId);
        if (a != null) {
            return Map.of(USER, a.user(), CLIENT_ID, a.clientId());
        }
        String[] level = kafkaQuotas.tags(type, user, clientId);
        return level == null ? Map.of(USER, user, CLIENT_ID, clientId) : Map.of(USER, level[0], CLIENT_ID, level[1]);
    }

    @Override
    public Double quotaLimit(ClientQuotaType type, Map<String, String> tags) {
        String quota = quotaName(type);
        String user = tags.getOrDefault(USER, "");
        String clientId = tags.getOrDefault(CLIENT_ID, "");
        Double allocated = quota == null ? null
                : table.limit(quota, user, clientId, settings.brokerId(), brokers, clock.getAsLong());
        return allocated != null ? allocated : kafkaQuotas.limit(type, user, clientId);
    }

    private static AtomicLongArray newApplied() {
        long[] never = new long[ClientQuotaType.values().length];
        Arrays.fill(never, -1);
        return new AtomicLongArray(never);
    }

    /** Asked by Kafka on every request: lock-free, one atomic swap. */
    @Override
    public boolean quotaResetRequired(ClientQuotaType type) {
        long version = table.version();
        return applied.getAndSet(type.ordinal(), version) != version;
    }

    /** Kafka's own client quota configs: held per broker, as Kafka's default callback does. */
    @Override
    public void updateQuota(ClientQuotaType type, ClientQuotaEntity entity, double newValue) {
        kafkaQuotas.update(type, entity, newValue);
    }

    @Override
    public void removeQuota(ClientQuotaType type, ClientQuotaEntity entity) {
        kafkaQuotas.remove(type, entity);
    }

    /** Where Kafka passes its metadata, the static split divides by the brokers it lists. */
    @Override
    public boolean updateClusterMetadata(Cluster cluster) {
        int live = Math.max(1, cluster.nodes().size());
        boolean changed = live != brokers;
        brokers = live;
        return changed;
    }

    @Override
    public void close() {
        if (follower != null) {
            follower.stop();
        }
    }
}
