package io.quotastreams.broker;

import java.util.Arrays;
import java.util.Map;
import java.util.concurrent.atomic.AtomicLongArray;
import java.util.function.LongSupplier;
import org.apache.kafka.common.Cluster;
import org.apache.kafka.common.Node;
import org.apache.kafka.common.security.auth.KafkaPrincipal;
import org.apache.kafka.server.quota.ClientQuotaCallback;
import org.apache.kafka.server.quota.ClientQuotaEntity;
import org.apache.kafka.server.quota.ClientQuotaType;

/**
 * The broker's client quota callback (KIP-257, {@code client.quota.callback.class}): each broker
 * holds its allocation of a cluster-wide producer or consumer byte rate or request percentage,
 * and Kafka itself enforces it (its rate window, {@code throttle_time_ms}, muting the channel).
 *
 * <p>Kafka asks {@link #quotaMetricTags} on every request for the sensor a request is charged
 * to, and {@link #quotaLimit} for that sensor's bound. A request is charged to the window of, in
 * order: the allocated entity it belongs to (so clients sharing a quota share one window, as in
 * Kafka); the level of the workers' quota configs it resolves to (the config topic, {@link
 * ConfigFollower}); the level of Kafka's own quota configs ({@link KafkaQuotas}); else its own
 * user and client id, without a limit. The bound of a workers' config with no allocation in
 * force is its static split (quota / brokers; in broker scope the quota), and of a controller
 * mutation quota the whole quota: the active controller charges every mutation of the cluster.
 * {@link #quotaResetRequired} answers true once after the allocations or the configs changed,
 * and Kafka then re-reads every sensor's bound. The allocations, the workers' configs and their
 * followers are the process's ({@link NodeState}), shared with its other callback if it has one.
 */
public final class QuotaCallback implements ClientQuotaCallback {
    static final String USER = "user";
    static final String CLIENT_ID = "client-id";

    private final LongSupplier clock;
    private final KafkaQuotas kafkaQuotas = new KafkaQuotas();
    /** per quota type, the version Kafka last re-read the bounds at (-1: never) */
    private final AtomicLongArray applied = newApplied();
    private Settings settings;
    /** the allocations, workers' configs and broker count, shared with this process's other callback */
    private NodeState state;

    public QuotaCallback() {
        this(System::currentTimeMillis);
    }

    QuotaCallback(LongSupplier clock) {
        this.clock = clock;
    }

    @Override
    public void configure(Map<String, ?> configs) {
        settings = Settings.from(configs);
        state = NodeState.acquire(settings, clock);
    }

    /** For tests: a callback over a given table and configs, with no reader. */
    static QuotaCallback over(AllocationTable table, long brokerId, int brokers, LongSupplier clock) {
        QuotaCallback callback = new QuotaCallback(clock);
        callback.state = new NodeState(table, brokers, clock);
        callback.settings = new Settings("", "", "", "", true, Seal.parse(""), brokerId, brokers, 0,
                1000, 1, Map.of());
        return callback;
    }

    /** What this callback shares with the process's other one (a test reads it). */
    NodeState state() {
        return state;
    }

    /** The workers' quota configs this callback holds (a test feeds them). */
    KafkaQuotas configured() {
        return state.configured;
    }

    /** The quota the workers allocate for a type of Kafka's client quotas, or null for none. */
    static String quotaName(ClientQuotaType type) {
        return switch (type) {
            case PRODUCE -> "producer_byte_rate";
            case FETCH -> "consumer_byte_rate";
            case REQUEST -> "request_percentage";
            default -> null;
        };
    }

    @Override
    public Map<String, String> quotaMetricTags(ClientQuotaType type, KafkaPrincipal principal, String clientId) {
        String quota = quotaName(type);
        String user = principal.getName();
        Allocation a = quota == null ? null : state.table.entityFor(quota, user, clientId);
        if (a != null) {
            return Map.of(USER, a.user(), CLIENT_ID, a.clientId());
        }
        String[] level = state.configured.tags(type, user, clientId);
        if (level == null) {
            level = kafkaQuotas.tags(type, user, clientId);
        }
        return level == null ? Map.of(USER, user, CLIENT_ID, clientId) : Map.of(USER, level[0], CLIENT_ID, level[1]);
    }

    /**
     * The bound of the window {@code tags} name: the workers' (see the class comment), capped by
     * Kafka's own quota config of that entity where one is set. Kafka's own configs are a
     * per-broker ceiling, so a broker with the plugin never lets a client through more than the
     * same broker without it would: brokers may take the plugin one at a time, and the workers
     * take over a quota whole once its Kafka config is removed (docs/broker-plugin.md).
     */
    @Override
    public Double quotaLimit(ClientQuotaType type, Map<String, String> tags) {
        String user = tags.getOrDefault(USER, "");
        String clientId = tags.getOrDefault(CLIENT_ID, "");
        Double workers = workersLimit(type, user, clientId);
        Double kafka = kafkaQuotas.limit(type, user, clientId);
        if (workers == null || kafka == null) {
            return workers == null ? kafka : workers;
        }
        return Math.min(workers, kafka);
    }

    /** The workers' bound of a window: allocation, static split of their config, or none. */
    private Double workersLimit(ClientQuotaType type, String user, String clientId) {
        String quota = quotaName(type);
        long now = clock.getAsLong();
        AllocationTable table = state.table;
        int brokers = state.brokers();
        Double allocated = quota == null ? null : table.limit(quota, user, clientId, settings.brokerId(), brokers, now);
        if (allocated != null && table.valid(quota, user, clientId, now)) {
            return allocated;
        }
        Double whole = state.configured.limit(type, user, clientId);
        if (whole != null) {
            boolean split = quota != null && settings.clusterScope();
            return split ? whole / Math.max(1, brokers) : whole;
        }
        return allocated;
    }

    private static AtomicLongArray newApplied() {
        long[] never = new long[ClientQuotaType.values().length];
        Arrays.fill(never, -1);
        return new AtomicLongArray(never);
    }

    /** Asked by Kafka on every request: lock-free, one atomic swap. */
    @Override
    public boolean quotaResetRequired(ClientQuotaType type) {
        long version = state.table.version() + state.configured.version() + kafkaQuotas.version();
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

    /**
     * Where Kafka passes its metadata, the static split divides by the brokers it lists. KRaft's
     * {@code MetadataCache.toCluster} lists a broker once per listener, so brokers are counted by
     * id: by nodes, three brokers with two listeners each would hold a sixth of a quota each.
     */
    @Override
    public boolean updateClusterMetadata(Cluster cluster) {
        return state.brokers((int) Math.max(1, cluster.nodes().stream().mapToInt(Node::id).distinct().count()));
    }

    @Override
    public void close() {
        if (state != null) {
            state.release();
        }
    }
}
