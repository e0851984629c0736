package io.quotastreams.broker;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNull;

import java.nio.charset.StandardCharsets;
import java.util.Map;
import org.apache.kafka.server.quota.ClientQuotaType;
import org.junit.jupiter.api.Test;

class ConfigFollowerTest {
    private static final Settings PLAIN = Settings.from(Map.of("node.id", "1", "quota.streams.brokers", "3",
            "quota.streams.bootstrap.servers", "127.0.0.1:9092"));

    private static byte[] config(long ts, String entity, String quotas) {
        return ("{\"type\":\"quota_config\",\"v\":1,\"ts\":" + ts + ",\"entity\":" + entity
                + ",\"quotas\":" + quotas + "}").getBytes(StandardCharsets.UTF_8);
    }

    @Test
    void clientQuotasAreHeldWithKafkasPrecedenceAndConnectionQuotasLeftToKafka() {
        KafkaQuotas quotas = new KafkaQuotas();
        ConfigFollower follower = new ConfigFollower(PLAIN, quotas, () -> 2000L);
        follower.handle("quota.configs", null, config(1000, "{\"client_id\":\"loader\"}",
                "{\"producer_byte_rate\":1048576,\"controller_mutation_rate\":5}"), 2000);
        follower.handle("quota.configs", null, config(1000, "{\"user\":\"<default>\"}",
                "{\"consumer_byte_rate\":2000}"), 2000);
        follower.handle("quota.configs", null, config(1000, "{\"ip\":\"127.0.0.9\"}",
                "{\"connection_creation_rate\":10}"), 2000);
        assertEquals(1048576.0, quotas.limit(ClientQuotaType.PRODUCE, "", "loader"));
        assertEquals(5.0, quotas.limit(ClientQuotaType.CONTROLLER_MUTATION, "", "loader"));
        // the default user's quota: every user's own window
        org.junit.jupiter.api.Assertions.assertArrayEquals(new String[] {"alice", ""},
                quotas.tags(ClientQuotaType.FETCH, "alice", "app"));
        assertEquals(2000.0, quotas.limit(ClientQuotaType.FETCH, "alice", ""));
        Map<String, Long> counts = follower.counts();
        assertEquals(3L, counts.get("applied"));
        assertEquals(1L, counts.get("not_client_quotas"));
    }

    @Test
    void aRemovalAnOlderConfigAndABadOneAreEachTheirOwnOutcome() {
        KafkaQuotas quotas = new KafkaQuotas();
        ConfigFollower follower = new ConfigFollower(PLAIN, quotas, () -> 2000L);
        follower.handle("quota.configs", null, config(1500, "{\"client_id\":\"loader\"}",
                "{\"producer_byte_rate\":1000}"), 2000);
        long version = quotas.version();
        follower.handle("quota.configs", null, config(1400, "{\"client_id\":\"loader\"}",
                "{\"producer_byte_rate\":9000}"), 2000);  // older than the one in force
        assertEquals(1000.0, quotas.limit(ClientQuotaType.PRODUCE, "", "loader"));
        assertEquals(version, quotas.version());
        follower.handle("quota.configs", null, config(1600, "{\"client_id\":\"loader\"}",
                "{\"producer_byte_rate\":null}"), 2000);
        assertNull(quotas.limit(ClientQuotaType.PRODUCE, "", "loader"));
        follower.handle("quota.configs", null, config(1700, "{\"client_id\":\"loader\"}",
                "{\"producer_byte_rate\":10.5}"), 2000);
        follower.handle("quota.configs", null, config(1700, "{\"client_id\":\"\"}",
                "{\"producer_byte_rate\":10}"), 2000);
        follower.handle("quota.configs", null, config(1700, "{\"client_id\":\"a\"}",
                "{\"leader_replication_throttled_rate\":10}"), 2000);
        follower.handle("quota.configs", null, config(2000 + Records.MAX_FUTURE_MS + 1, "{\"client_id\":\"a\"}",
                "{\"producer_byte_rate\":10}"), 2000);
        Map<String, Long> counts = follower.counts();
        assertEquals(1L, counts.get("stale"));
        assertEquals(2L, counts.get("applied"));
        assertEquals(1L, counts.get("bad.out_of_range"));
        assertEquals(1L, counts.get("bad.bad_entity"));
        assertEquals(1L, counts.get("bad.bad_quotas"));
        assertEquals(1L, counts.get("bad.ts_in_future"));
    }

    @Test
    void withKeysAConfigWithoutAValidSealIsRefused() {
        Settings sealed = Settings.from(Map.of("node.id", "1", "quota.streams.brokers", "3",
                "quota.streams.bootstrap.servers", "127.0.0.1:9092",
                "quota.streams.signing.keys", "k1:0123456789abcdef-secret"));
        KafkaQuotas quotas = new KafkaQuotas();
        ConfigFollower follower = new ConfigFollower(sealed, quotas, () -> 2000L);
        follower.handle("quota.configs", null, config(1000, "{\"client_id\":\"loader\"}",
                "{\"producer_byte_rate\":1000}"), 2000);
        assertNull(quotas.limit(ClientQuotaType.PRODUCE, "", "loader"));
        assertEquals(1L, follower.counts().get("bad.unsigned"));
    }
}
