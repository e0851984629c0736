package io.quotastreams.broker;

import static org.junit.jupiter.api.Assertions.assertEquals;

import java.nio.charset.StandardCharsets;
import java.util.Map;
import org.junit.jupiter.api.Test;

class ControlFollowerTest {
    private static byte[] b(String s) {
        return s.getBytes(StandardCharsets.UTF_8);
    }

    @Test
    void withKeysOnlySealedAllocationsAreTakenAndEveryRefusalIsCounted() {
        Settings settings = Settings.from(Map.of("node.id", "1", "quota.streams.bootstrap.servers", "127.0.0.1:9092",
                "quota.streams.brokers", "3", "quota.streams.signing.keys", "k1:0123456789abcdef-secret"));
        AllocationTable table = new AllocationTable(60_000);
        ControlFollower follower = new ControlFollower(settings, table, () -> 2000L);
        String unsigned = RecordsTest.allocation("producer_byte_rate", 1000, 6000, "600000", RecordsTest.THREE);
        follower.handle("quota.directives", null, b(unsigned), 2000);
        follower.handle("quota.directives", null, b("not json"), 2000);
        follower.handle("quota.directives", null, null, 2000);
        assertEquals(0, table.size());
        Map<String, Long> counts = follower.counts();
        assertEquals(2L, counts.get("bad.unsigned"));
        assertEquals(1L, counts.get("tombstones"));
        assertEquals(3L, counts.get("records"));
    }

    @Test
    void withoutKeysAllocationsAreTakenAndDirectivesOnlyChecked() {
        Settings settings = Settings.from(Map.of("node.id", "1", "quota.streams.bootstrap.servers", "127.0.0.1:9092",
                "quota.streams.brokers", "3"));
        AllocationTable table = new AllocationTable(60_000);
        ControlFollower follower = new ControlFollower(settings, table, () -> 2000L);
        follower.handle("quota.directives", null,
                b(RecordsTest.allocation("producer_byte_rate", 1000, 6000, "600000", RecordsTest.THREE)), 2000);
        follower.handle("quota.directives", null, b("{\"v\":1,\"ts\":1000,\"until\":2000,\"scope\":\"cluster\","
                + "\"quota\":\"producer_byte_rate\",\"action\":\"throttle\",\"entity\":{\"user\":\"a\"}}"), 2000);
        follower.handle("quota.directives", null,
                b(RecordsTest.allocation("producer_byte_rate", 1000 + 2 * 86_400_000L, 2 * 86_400_000L + 6000, "600000", "")), 2000);
        assertEquals(1, table.size());
        Map<String, Long> counts = follower.counts();
        assertEquals(1L, counts.get("added"));
        assertEquals(1L, counts.get("directives_not_enforced"));
        assertEquals(1L, counts.get("bad.ts_in_future"));
    }
}
