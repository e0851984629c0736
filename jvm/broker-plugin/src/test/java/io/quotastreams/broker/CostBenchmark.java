package io.quotastreams.broker;

import java.lang.management.ManagementFactory;
import java.lang.management.ThreadMXBean;
import java.net.InetAddress;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Map;
import kafka.server.ClientQuotaManager;
import org.apache.kafka.common.MetricName;
import org.apache.kafka.common.internals.Plugin;
import org.apache.kafka.common.metrics.MetricConfig;
import org.apache.kafka.common.metrics.Metrics;
import org.apache.kafka.common.metrics.Quota;
import org.apache.kafka.common.metrics.Sensor;
import org.apache.kafka.common.metrics.stats.Avg;
import org.apache.kafka.common.metrics.stats.Rate;
import org.apache.kafka.common.security.auth.KafkaPrincipal;
import org.apache.kafka.common.utils.Time;
import org.apache.kafka.network.Session;
import org.apache.kafka.server.config.ClientQuotaManagerConfig;
import org.apache.kafka.server.quota.ClientQuotaCallback;
import org.apache.kafka.server.quota.ClientQuotaType;
import org.apache.kafka.server.quota.QuotaType;
import scala.Option;

/**
 * What the plugin costs a broker, printed as one JSON line (bench/bench_broker_plugin.py runs
 * it and prints the table).
 *
 * <ul>
 *   <li>Per request: Kafka's own {@code ClientQuotaManager} (Produce, Kafka's default window)
 *   charging requests of {@code clients} client ids in turn, each with a quota, once with
 *   Kafka's default callback (a {@code producer_byte_rate} per client id) and once with
 *   {@link QuotaCallback} (an allocation per client id): nanoseconds per request, the median of
 *   the rounds. The quotas are far above the load: the path is measured, not a throttle.</li>
 *   <li>The reporter: {@link UsageReporter#read} over {@code clients} Produce byte-rate sensors
 *   as Kafka names them, each charged one request since the last pass: CPU milliseconds and
 *   bytes of events per pass (a pass every {@code quota.streams.usage.interval.ms}, 1 s by
 *   default).</li>
 * </ul>
 */
public final class CostBenchmark {
    private static final double FAR_ABOVE = 1e12;

    public static void main(String[] args) throws Exception {
        int clients = Integer.parseInt(args[0]);
        int requests = Integer.parseInt(args[1]);
        int rounds = Integer.parseInt(args[2]);
        String[] ids = new String[clients];
        for (int i = 0; i < clients; i++) {
            ids[i] = "client-" + i;
        }
        double kafka = perRequest(kafkaDefault(ids), ids, requests, rounds);
        double plugin = perRequest(withPlugin(ids), ids, requests, rounds);
        double tags = tagsAlone(ids, requests, rounds);
        long[] reporter = reporter(ids, rounds);
        System.out.printf("{\"clients\": %d, \"requests\": %d, \"rounds\": %d, \"kafka_ns\": %.1f, "
                + "\"plugin_ns\": %.1f, \"plugin_tags_ns\": %.1f, \"reporter_cpu_us\": %d, \"reporter_bytes\": %d, \"reporter_events\": %d}%n",
                clients, requests, rounds, kafka, plugin, tags, reporter[0], reporter[1], reporter[2]);
    }

    private static ClientQuotaManager manager(Metrics metrics, Option<Plugin<ClientQuotaCallback>> callback) {
        return new ClientQuotaManager(new ClientQuotaManagerConfig(), metrics, QuotaType.PRODUCE, Time.SYSTEM, "",
                callback);
    }

    private static ClientQuotaManager kafkaDefault(String[] ids) {
        ClientQuotaManager manager = manager(new Metrics(), Option.empty());
        for (String id : ids) {
            manager.updateQuota(Option.empty(), Option.apply(new ClientQuotaManager.ClientIdEntity(id)),
                    Option.apply(Quota.upperBound(FAR_ABOVE)));
        }
        return manager;
    }

    private static AllocationTable allocations(String[] ids) throws BadRecord {
        long now = System.currentTimeMillis();
        AllocationTable table = new AllocationTable(3_600_000);
        for (String id : ids) {
            table.apply(new Allocation("producer_byte_rate", "", id, now, now + 3_600_000, FAR_ABOVE,
                    FAR_ABOVE / 20, Map.of(1L, FAR_ABOVE / 3, 2L, FAR_ABOVE / 3, 3L, FAR_ABOVE / 3)), now);
        }
        return table;
    }

    private static ClientQuotaManager withPlugin(String[] ids) throws BadRecord {
        Metrics metrics = new Metrics();
        ClientQuotaCallback callback = QuotaCallback.over(allocations(ids), 1, 3, System::currentTimeMillis);
        return manager(metrics, Option.apply(Plugin.wrapInstance(callback, metrics, "client.quota.callback.class")));
    }

    /** Median nanoseconds per charged request over `rounds` rounds of `requests`. */
    private static double perRequest(ClientQuotaManager manager, String[] ids, int requests, int rounds) {
        Session session = new Session(new KafkaPrincipal(KafkaPrincipal.USER_TYPE, "ANONYMOUS"),
                InetAddress.getLoopbackAddress());
        double[] ns = new double[rounds + 1];
        for (int round = 0; round <= rounds; round++) {  // the first warms the JIT up, uncounted
            long start = System.nanoTime();
            long throttled = 0;
            for (int i = 0; i < requests; i++) {
                throttled += manager.maybeRecordAndGetThrottleTimeMs(session, ids[i % ids.length], 1000.0,
                        System.currentTimeMillis());
            }
            ns[round] = (System.nanoTime() - start) / (double) requests;
            if (throttled != 0) {
                throw new IllegalStateException("a request was throttled: the quotas are meant to be far above the load");
            }
        }
        manager.shutdown();  // its throttled-channel reaper thread
        double[] counted = Arrays.copyOfRange(ns, 1, ns.length);
        Arrays.sort(counted);
        return counted[counted.length / 2];
    }

    /** Median nanoseconds of the plugin's own part of a request: the two calls Kafka makes. */
    private static double tagsAlone(String[] ids, int requests, int rounds) throws BadRecord {
        QuotaCallback callback = QuotaCallback.over(allocations(ids), 1, 3, System::currentTimeMillis);
        KafkaPrincipal principal = new KafkaPrincipal(KafkaPrincipal.USER_TYPE, "ANONYMOUS");
        double[] ns = new double[rounds + 1];
        long found = 0;
        for (int round = 0; round <= rounds; round++) {
            long start = System.nanoTime();
            for (int i = 0; i < requests; i++) {
                found += callback.quotaMetricTags(ClientQuotaType.PRODUCE, principal, ids[i % ids.length]).size();
                found += callback.quotaResetRequired(ClientQuotaType.PRODUCE) ? 1 : 0;
            }
            ns[round] = (System.nanoTime() - start) / (double) requests;
        }
        if (found < (long) requests * (rounds + 1) * 2) {
            throw new IllegalStateException("a client id had no allocation's window");
        }
        double[] counted = Arrays.copyOfRange(ns, 1, ns.length);
        Arrays.sort(counted);
        return counted[counted.length / 2];
    }

    /** {median CPU microseconds, bytes, events} of a reporter pass over one request per client. */
    private static long[] reporter(String[] ids, int rounds) throws ReflectiveOperationException {
        Metrics metrics = new Metrics(new MetricConfig().samples(11), new ArrayList<>(), Time.SYSTEM);
        UsageReporter reporter = new UsageReporter();
        // prepared, not configured: no thread reads or sends, the benchmark calls read() itself
        if (!reporter.prepare(Map.of("node.id", "1", "quota.streams.brokers", "3",
                "quota.streams.bootstrap.servers", "127.0.0.1:9092"))) {
            throw new IllegalStateException("the reporter cannot read Kafka's samples");
        }
        metrics.addReporter(reporter);
        List<Sensor> sensors = new ArrayList<>();
        for (String id : ids) {  // as ClientQuotaManager names a client's Produce sensors
            Map<String, String> tags = Map.of("user", "", "client-id", id);
            Sensor sensor = metrics.sensor("Produce-:" + id);
            sensor.add(metrics.metricName("byte-rate", "Produce", "", tags), new Rate());
            sensors.add(sensor);
            metrics.sensor("ProduceThrottleTime-:" + id).add(
                    metrics.metricName("throttle-time", "Produce", "", tags), new Avg());
        }
        ThreadMXBean cpu = ManagementFactory.getThreadMXBean();
        long[] micros = new long[rounds + 1];
        long bytes = 0;
        long events = 0;
        for (int round = 0; round <= rounds; round++) {
            for (Sensor sensor : sensors) {
                sensor.record(1000.0);
            }
            long start = cpu.getCurrentThreadCpuTime();
            List<byte[]> records = reporter.read(0);
            micros[round] = (cpu.getCurrentThreadCpuTime() - start) / 1000;
            if (round > 0) {
                bytes = 0;
                for (byte[] record : records) {
                    bytes += record.length;
                }
                events = records.stream().mapToLong(r -> new String(r, java.nio.charset.StandardCharsets.UTF_8)
                        .split("\"type\":\"request\"", -1).length - 1).sum();
            }
        }
        long[] counted = Arrays.copyOfRange(micros, 1, micros.length);
        Arrays.sort(counted);
        return new long[] {counted[counted.length / 2], bytes, events};
    }
}
