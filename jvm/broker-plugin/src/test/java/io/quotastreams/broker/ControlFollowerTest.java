package io.quotastreams.broker;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.IOException;
import java.net.ServerSocket;
import java.nio.charset.StandardCharsets;
import java.util.Map;
import java.util.concurrent.atomic.AtomicLong;
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

    /** A follower without signing keys, into {@code table}, at t = 2 s. */
    private static ControlFollower unsigned(AllocationTable table) {
        Settings settings = Settings.from(Map.of("node.id", "1", "quota.streams.bootstrap.servers", "127.0.0.1:9092",
                "quota.streams.brokers", "3"));
        return new ControlFollower(settings, table, () -> 2000L);
    }

    @Test
    void withoutKeysAllocationsAreTakenAndDirectivesOnlyChecked() {
        AllocationTable table = new AllocationTable(60_000);
        ControlFollower follower = unsigned(table);
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

    @Test
    void aRecordOverTheSizeBoundIsRefusedUnreadAndTheNextOneTaken() {
        AllocationTable table = new AllocationTable(60_000);
        ControlFollower follower = unsigned(table);
        String allocation = RecordsTest.allocation("producer_byte_rate", 1000, 6000, "600000", RecordsTest.THREE);
        // a valid allocation padded past the bound: refused for its size alone
        String padded = allocation.substring(0, allocation.length() - 1) + ",\"pad\":\""
                + "x".repeat(Records.MAX_RECORD_BYTES) + "\"}";
        follower.handle("quota.directives", null, b(padded), 2000);
        assertEquals(0, table.size());
        follower.handle("quota.directives", null, b(allocation), 2000);
        assertEquals(1, table.size());
        Map<String, Long> counts = follower.counts();
        assertEquals(1L, counts.get("bad.too_large"));
        assertEquals(1L, counts.get("added"));
        assertEquals(2L, counts.get("records"));
    }

    /** A loopback port nothing listens on. */
    private static int closedPort() throws IOException {
        try (ServerSocket socket = new ServerSocket(0)) {
            return socket.getLocalPort();
        }
    }

    @Test
    void withTheControlTopicUnreachableTheLastBoundsHoldThenTheStaticSplitAndFailuresAreCounted()
            throws IOException, InterruptedException, BadRecord {
        Settings settings = Settings.from(Map.of("node.id", "2", "quota.streams.brokers", "3",
                "quota.streams.bootstrap.servers", "127.0.0.1:" + closedPort()));
        AllocationTable table = new AllocationTable(60_000);
        AtomicLong now = new AtomicLong(2000);
        ControlFollower follower = new ControlFollower(settings, table, now::get);
        follower.handle("quota.directives", null,
                b(RecordsTest.allocation("producer_byte_rate", 1000, 6000, "600000", RecordsTest.THREE)), 2000);
        Thread reader = new Thread(follower);
        reader.start();
        try {
            long deadline = System.nanoTime() + 30_000_000_000L;
            while (follower.counts().getOrDefault("consumer_errors", 0L) == 0 && System.nanoTime() < deadline) {
                Thread.sleep(100);
            }
            assertTrue(follower.counts().getOrDefault("consumer_errors", 0L) >= 1, follower.counts().toString());
            // the allocation read before holds while it is valid: this broker's own share
            assertEquals(250000.0, table.limit("producer_byte_rate", "", "loader", 2, 3, now.get()));
            now.set(6000);  // it ended, and nothing newer can be read: the static split
            table.tick(now.get());
            assertEquals(200000.0, table.limit("producer_byte_rate", "", "loader", 2, 3, now.get()));
        } finally {
            follower.stop();
            reader.interrupt();
            reader.join(10_000);
        }
    }
}
