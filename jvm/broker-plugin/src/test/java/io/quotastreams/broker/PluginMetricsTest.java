package io.quotastreams.broker;

import static org.junit.jupiter.api.Assertions.assertEquals;

import java.lang.management.ManagementFactory;
import java.nio.charset.StandardCharsets;
import java.util.Collections;
import java.util.Map;
import javax.management.MBeanServer;
import javax.management.ObjectName;
import org.junit.jupiter.api.Test;

/** The plugin's counters as a JMX exporter reads them: beans on the platform MBean server. */
class PluginMetricsTest {
    private static final MBeanServer SERVER = ManagementFactory.getPlatformMBeanServer();

    private static double read(String bean, String attribute) throws Exception {
        return ((Number) SERVER.getAttribute(new ObjectName(PluginMetrics.DOMAIN + ":" + bean), attribute))
                .doubleValue();
    }

    private static byte[] b(String s) {
        return s.getBytes(StandardCharsets.UTF_8);
    }

    @Test
    void allocationsInForceAndOnTheirFailSafeAreBeansOfTheCallback() throws Exception {
        long[] now = {2_000};
        AllocationTable table = new AllocationTable(600_000);
        table.apply(RecordsTest.parse(RecordsTest.allocation("producer_byte_rate", 1_000, 6_000, "600000",
                RecordsTest.THREE)), now[0]);
        table.apply(RecordsTest.parse(RecordsTest.allocation("consumer_byte_rate", 1_000, 9_000, "600000",
                RecordsTest.THREE)), now[0]);
        QuotaCallback callback = QuotaCallback.over(table, 1, 3, () -> now[0]);
        try (PluginMetrics metrics = new PluginMetrics()) {
            callback.state().reportTo(metrics);
            assertEquals(2, read("type=callback", "allocations-in-force"));
            now[0] = 7_000;  // the produce allocation ended: its static split holds
            assertEquals(1, read("type=callback", "allocations-in-force"));
            assertEquals(1, read("type=callback", "allocations-fail-safe"));
            assertEquals(2, read("type=callback", "allocations-held"));
            assertEquals(3, read("type=callback", "brokers"));
        }
        assertEquals(0, SERVER.queryNames(new ObjectName(PluginMetrics.DOMAIN + ":type=callback"), null).size());
    }

    @Test
    void eachRefusalReasonOfAFollowerIsABeanCountingItsRecords() throws Exception {
        Settings settings = Settings.from(Map.of("node.id", "1", "quota.streams.bootstrap.servers",
                "127.0.0.1:9092", "quota.streams.brokers", "3"));
        ControlFollower follower = new ControlFollower(settings, new AllocationTable(60_000), () -> 2_000L);
        follower.handle("quota.directives", null, b("not json"), 2_000);  // before: reported too
        try (PluginMetrics metrics = new PluginMetrics()) {
            follower.reportTo(metrics);
            follower.handle("quota.directives", null, b("not json"), 2_000);
            follower.handle("quota.directives", null, b(RecordsTest.allocation("producer_byte_rate", 1_000, 6_000,
                    "600000", RecordsTest.THREE)), 2_000);
            String refused = follower.counts().keySet().stream().filter(k -> k.startsWith("bad.")).findFirst()
                    .orElseThrow();
            assertEquals(2, read("type=follower,follower=control,outcome=" + refused, "records-total"));
            assertEquals(1, read("type=follower,follower=control,outcome=added", "records-total"));
            assertEquals(3, read("type=follower,follower=control,outcome=records", "records-total"));
        }
    }

    @Test
    void theReportersUsageRecordsAreBeans() throws Exception {
        UsageReporter reporter = new UsageReporter();
        reporter.prepare(Map.of("node.id", "1", "quota.streams.bootstrap.servers", "127.0.0.1:9092",
                "quota.streams.brokers", "3", "quota.streams.usage.queue.records", "5"));
        try (PluginMetrics metrics = new PluginMetrics()) {
            reporter.reportTo(metrics);
            reporter.enqueue(Collections.nCopies(7, b("{}")));  // a queue of 5
            assertEquals(5, read("type=reporter", "usage-records-queued"));
            assertEquals(2, read("type=reporter", "usage-records-dropped-total"));
            assertEquals(0, read("type=reporter", "usage-records-written-total"));
            assertEquals(0, read("type=reporter", "client-sensors"));
        }
    }
}
