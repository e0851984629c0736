package io.quotastreams.broker;

import java.util.HashMap;
import java.util.Map;
import java.util.function.LongSupplier;

/**
 * What the plugin holds once per Kafka process, however many quota-manager sets load the
 * callback. A node with {@code process.roles=broker,controller} builds its quota managers twice
 * (Kafka's {@code BrokerServer} and {@code ControllerServer} each call
 * {@code QuotaFactory.instantiate}), so two callbacks run in one JVM. They share one allocation
 * table, one copy of the workers' configs, one follower per topic, one broker count and one set
 * of beans: apart, every record would be read twice, and two sets of beans under the same names
 * would replace each other's one by one, so a scrape could read one table's count of records
 * beside the other's count of allocations.
 */
final class NodeState {
    /** the states open in this process, by {@link #key}; guarded by the class */
    private static final Map<String, NodeState> OPEN = new HashMap<>();

    final AllocationTable table;
    /** the workers' quota configs, from the config topic */
    final KafkaQuotas configured = new KafkaQuotas();
    private final LongSupplier clock;
    private final String key;
    private ControlFollower control;
    private ConfigFollower configs;
    private PluginMetrics metrics;
    private volatile int brokers;
    private int holders;

    /** A state no follower feeds (tests and benchmarks fill {@code table} themselves). */
    NodeState(AllocationTable table, int brokers, LongSupplier clock) {
        this(table, brokers, clock, "");
    }

    private NodeState(AllocationTable table, int brokers, LongSupplier clock, String key) {
        this.table = table;
        this.brokers = brokers;
        this.clock = clock;
        this.key = key;
    }

    /**
     * The state of the plugin configured with {@code settings} in this process: the open one,
     * or a new one whose followers and beans are started. Each call is paired with a
     * {@link #release}.
     */
    static synchronized NodeState acquire(Settings settings, LongSupplier clock) {
        String key = String.join("\n", String.valueOf(settings.brokerId()), String.valueOf(settings.bootstrap()),
                settings.controlTopic(), settings.configTopic());
        NodeState state = OPEN.get(key);
        if (state == null) {
            state = new NodeState(new AllocationTable(settings.failSafeMs()), settings.brokers(), clock, key);
            state.start(settings);
            OPEN.put(key, state);
        }
        state.holders++;
        return state;
    }

    private void start(Settings settings) {
        control = new ControlFollower(settings, table, clock);
        configs = new ConfigFollower(settings, configured, clock);
        metrics = new PluginMetrics();
        reportTo(metrics);
        control.reportTo(metrics);
        configs.reportTo(metrics);
        control.start();
        configs.start();
    }

    /** One holder is done with the state; the last one stops its followers and beans. */
    void release() {
        synchronized (NodeState.class) {
            if (--holders > 0 || control == null) {
                return;
            }
            OPEN.remove(key);
        }
        control.stop();
        configs.stop();
        metrics.close();
    }

    /** The brokers the static split divides a quota among. */
    int brokers() {
        return brokers;
    }

    /** Count {@code live} brokers (from the metadata Kafka passes); whether the count changed. */
    boolean brokers(int live) {
        boolean changed = live != brokers;
        brokers = live;
        return changed;
    }

    /**
     * The callback's gauges: allocations held, in force, and on their static split after one
     * ended (the fail-safe), and the brokers the static split divides by.
     */
    void reportTo(PluginMetrics m) {
        m.gauge(PluginMetrics.CALLBACK, "allocations-held", "allocations held (in force or fail-safe)",
                Map.of(), table::size);
        m.gauge(PluginMetrics.CALLBACK, "allocations-in-force", "allocations whose bounds are in force",
                Map.of(), () -> table.validCount(clock.getAsLong()));
        m.gauge(PluginMetrics.CALLBACK, "allocations-fail-safe",
                "allocations that ended: the static split holds until the fail-safe time",
                Map.of(), () -> table.size() - table.validCount(clock.getAsLong()));
        m.gauge(PluginMetrics.CALLBACK, "brokers", "the brokers the static split divides a quota among",
                Map.of(), () -> brokers);
    }
}
