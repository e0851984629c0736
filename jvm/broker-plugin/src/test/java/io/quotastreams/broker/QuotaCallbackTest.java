package io.quotastreams.broker;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.atomic.AtomicLong;
import org.apache.kafka.common.Cluster;
import org.apache.kafka.common.Node;
import org.apache.kafka.common.security.auth.KafkaPrincipal;
import org.apache.kafka.server.quota.ClientQuotaEntity;
import org.apache.kafka.server.quota.ClientQuotaType;
import org.junit.jupiter.api.Test;

class QuotaCallbackTest {
    private static final KafkaPrincipal ANON = new KafkaPrincipal(KafkaPrincipal.USER_TYPE, "ANONYMOUS");
    private final AtomicLong now = new AtomicLong(2000);
    private final AllocationTable table = new AllocationTable(60_000);

    private QuotaCallback broker(long id) {
        return QuotaCallback.over(table, id, 3, now::get);
    }

    private void allocate(long ts, long validUntil) throws BadRecord {
        table.apply(RecordsTest.parse(RecordsTest.allocation("producer_byte_rate", ts, validUntil, "600000", RecordsTest.THREE)), now.get());
    }

    @Test
    void eachBrokerHoldsItsAllocationAndTheOthersTheFloor() throws BadRecord {
        allocate(1000, 6000);
        Map<String, String> tags = broker(2).quotaMetricTags(ClientQuotaType.PRODUCE, ANON, "loader");
        assertEquals(Map.of("user", "", "client-id", "loader"), tags);  // the client-id quota's window
        assertEquals(200000.0, broker(1).quotaLimit(ClientQuotaType.PRODUCE, tags));
        assertEquals(250000.0, broker(2).quotaLimit(ClientQuotaType.PRODUCE, tags));
        assertEquals(30000.0, broker(4).quotaLimit(ClientQuotaType.PRODUCE, tags));
        assertNull(broker(2).quotaLimit(ClientQuotaType.FETCH, tags));
        assertNull(broker(2).quotaLimit(ClientQuotaType.REQUEST, tags));
    }

    @Test
    void aRequestPercentageAllocationBoundsTheRequestQuotasWindow() throws BadRecord {
        String record = RecordsTest.allocation("request_percentage", 1000, 6000, "60",
                "{\"enforcer\":2,\"limit\":25.0,\"usage\":30.0,\"saturated\":true,\"trim\":0.8}")
                .replace("\"others\":30000.0", "\"others\":3.0");
        table.apply(RecordsTest.parse(record), now.get());
        Map<String, String> tags = broker(2).quotaMetricTags(ClientQuotaType.REQUEST, ANON, "loader");
        assertEquals(Map.of("user", "", "client-id", "loader"), tags);  // the allocated entity's window
        assertEquals(20.0, broker(2).quotaLimit(ClientQuotaType.REQUEST, tags));  // 25 x its trim
        assertNull(broker(2).quotaLimit(ClientQuotaType.PRODUCE, tags));  // no byte rate allocated
        assertEquals(Map.of("user", "ANONYMOUS", "client-id", "loader"),
                broker(2).quotaMetricTags(ClientQuotaType.PRODUCE, ANON, "loader"));
    }

    @Test
    void aConfiguredQuotaIsHeldAtItsStaticSplitUntilItsFirstAllocationAndAfterTheLast() throws BadRecord {
        QuotaCallback callback = broker(2);
        callback.configured().update(ClientQuotaType.PRODUCE, null, "loader", 600000.0);
        Map<String, String> tags = callback.quotaMetricTags(ClientQuotaType.PRODUCE, ANON, "loader");
        assertEquals(Map.of("user", "", "client-id", "loader"), tags);
        assertTrue(callback.quotaResetRequired(ClientQuotaType.PRODUCE));
        assertEquals(200000.0, callback.quotaLimit(ClientQuotaType.PRODUCE, tags));  // never unlimited
        allocate(1000, 6000);
        assertTrue(callback.quotaResetRequired(ClientQuotaType.PRODUCE));
        assertEquals(250000.0, callback.quotaLimit(ClientQuotaType.PRODUCE, tags));
        now.set(6000);  // the allocation ended: the quota as configured now, split
        callback.configured().update(ClientQuotaType.PRODUCE, null, "loader", 300000.0);
        assertEquals(100000.0, callback.quotaLimit(ClientQuotaType.PRODUCE, tags));
        now.set(6000 + 60_000);  // past the fail-safe too: the config still holds
        table.tick(now.get());
        assertEquals(100000.0, callback.quotaLimit(ClientQuotaType.PRODUCE, tags));
    }

    @Test
    void theControllerHoldsAConfiguredMutationQuotaWhole() {
        QuotaCallback callback = broker(1);
        callback.configured().update(ClientQuotaType.CONTROLLER_MUTATION, null, KafkaQuotas.DEFAULT, 5.0);
        Map<String, String> tags = callback.quotaMetricTags(ClientQuotaType.CONTROLLER_MUTATION, ANON, "terraform");
        assertEquals(Map.of("user", "", "client-id", "terraform"), tags);
        // the active controller charges every CreateTopics of the cluster: per node is cluster-wide
        assertEquals(5.0, callback.quotaLimit(ClientQuotaType.CONTROLLER_MUTATION, tags));
    }

    @Test
    void clientsWithoutAnAllocationAreTheirOwnUnlimitedWindow() throws BadRecord {
        allocate(1000, 6000);
        Map<String, String> tags = broker(1).quotaMetricTags(ClientQuotaType.PRODUCE, ANON, "other");
        assertEquals(Map.of("user", "ANONYMOUS", "client-id", "other"), tags);
        assertNull(broker(1).quotaLimit(ClientQuotaType.PRODUCE, tags));
    }

    @Test
    void theStaticSplitCountsBrokersNotTheirListeners() {
        QuotaCallback callback = QuotaCallback.over(table, 1, 1, now::get);
        callback.configured().update(ClientQuotaType.PRODUCE, null, "loader", 600000.0);
        // as KRaft lists them: each broker once per listener (PLAINTEXT and INTERNAL here)
        List<Node> nodes = new ArrayList<>();
        for (int id = 1; id <= 3; id++) {
            nodes.add(new Node(id, "127.0.0.1", 9000 + id));
            nodes.add(new Node(id, "127.0.0.1", 9100 + id));
        }
        assertTrue(callback.updateClusterMetadata(new Cluster("c", nodes, List.of(), Set.of(), Set.of())));
        Map<String, String> tags = callback.quotaMetricTags(ClientQuotaType.PRODUCE, ANON, "loader");
        assertEquals(200000.0, callback.quotaLimit(ClientQuotaType.PRODUCE, tags));  // 600000 / 3
        assertFalse(callback.updateClusterMetadata(new Cluster("c", nodes.subList(0, 6), List.of(), Set.of(), Set.of())));
    }

    @Test
    void whenTheControlTopicGoesQuietEachBrokerHoldsTheStaticSplit() throws BadRecord {
        allocate(1000, 6000);
        QuotaCallback callback = broker(2);
        Map<String, String> tags = Map.of("user", "", "client-id", "loader");
        assertTrue(callback.quotaResetRequired(ClientQuotaType.PRODUCE));
        assertFalse(callback.quotaResetRequired(ClientQuotaType.PRODUCE));
        now.set(5999);
        table.tick(now.get());
        assertFalse(callback.quotaResetRequired(ClientQuotaType.PRODUCE));
        now.set(6000);
        table.tick(now.get());
        assertTrue(callback.quotaResetRequired(ClientQuotaType.PRODUCE));  // Kafka re-reads the bound
        assertEquals(200000.0, callback.quotaLimit(ClientQuotaType.PRODUCE, tags));  // 600000 / 3
        now.set(6000 + 60_000);
        table.tick(now.get());
        assertTrue(callback.quotaResetRequired(ClientQuotaType.PRODUCE));
        assertNull(callback.quotaLimit(ClientQuotaType.PRODUCE, tags));  // fail-safe period over
    }

    @Test
    void theNewestAllocationWinsAndAnOldOneRebuiltAtStartGivesTheStaticSplit() throws BadRecord {
        now.set(10_000);
        allocate(1000, 6000);  // read back at start, already ended: the static split
        assertEquals(200000.0, broker(2).quotaLimit(ClientQuotaType.PRODUCE, Map.of("user", "", "client-id", "loader")));
        allocate(9000, 14000);
        allocate(8000, 13000);  // stale
        assertEquals(250000.0, broker(2).quotaLimit(ClientQuotaType.PRODUCE, Map.of("user", "", "client-id", "loader")));
    }

    private static ClientQuotaEntity.ConfigEntity part(ClientQuotaEntity.ConfigEntityType type, String name) {
        return new ClientQuotaEntity.ConfigEntity() {
            @Override
            public String name() {
                return name;
            }

            @Override
            public ClientQuotaEntity.ConfigEntityType entityType() {
                return type;
            }
        };
    }

    private static ClientQuotaEntity entity(ClientQuotaEntity.ConfigEntity... parts) {
        return () -> List.of(parts);
    }

    @Test
    void kafkasOwnQuotaConfigsStayInForcePerBrokerWithKafkasPrecedence() throws BadRecord {
        QuotaCallback callback = broker(1);
        ClientQuotaEntity.ConfigEntity loader = part(ClientQuotaEntity.ConfigEntityType.CLIENT_ID, "loader");
        callback.updateQuota(ClientQuotaType.REQUEST, entity(loader), 50.0);
        Map<String, String> tags = callback.quotaMetricTags(ClientQuotaType.REQUEST, ANON, "loader");
        assertEquals(Map.of("user", "", "client-id", "loader"), tags);
        assertEquals(50.0, callback.quotaLimit(ClientQuotaType.REQUEST, tags));

        callback.updateQuota(ClientQuotaType.REQUEST, entity(part(ClientQuotaEntity.ConfigEntityType.DEFAULT_USER, "<default>")), 20.0);
        tags = callback.quotaMetricTags(ClientQuotaType.REQUEST, ANON, "loader");
        assertEquals(Map.of("user", "ANONYMOUS", "client-id", ""), tags);  // /users/<default> comes first
        assertEquals(20.0, callback.quotaLimit(ClientQuotaType.REQUEST, tags));
        callback.removeQuota(ClientQuotaType.REQUEST, entity(part(ClientQuotaEntity.ConfigEntityType.DEFAULT_USER, "<default>")));
        assertEquals(Map.of("user", "", "client-id", "loader"), callback.quotaMetricTags(ClientQuotaType.REQUEST, ANON, "loader"));

        // a byte rate the workers allocate: the allocation, not the per-broker config, bounds it
        callback.updateQuota(ClientQuotaType.PRODUCE, entity(loader), 1_000_000.0);
        Map<String, String> produce = callback.quotaMetricTags(ClientQuotaType.PRODUCE, ANON, "loader");
        assertEquals(1_000_000.0, callback.quotaLimit(ClientQuotaType.PRODUCE, produce));
        allocate(1000, 6000);
        assertEquals(200000.0, callback.quotaLimit(ClientQuotaType.PRODUCE, produce));
    }

    @Test
    void kafkasOwnConfigIsACeilingOnWhatTheWorkersGiveABroker() throws BadRecord {
        QuotaCallback callback = broker(2);
        Map<String, String> tags = Map.of("user", "", "client-id", "loader");
        callback.configured().update(ClientQuotaType.PRODUCE, null, "loader", 1_800_000.0);
        callback.updateQuota(ClientQuotaType.PRODUCE,
                entity(part(ClientQuotaEntity.ConfigEntityType.CLIENT_ID, "loader")), 150000.0);
        // before any allocation: the static split, 600000, over the broker's own 150000
        assertEquals(150000.0, callback.quotaLimit(ClientQuotaType.PRODUCE, tags));
        allocate(1000, 6000);  // 250000 for broker 2
        assertEquals(150000.0, callback.quotaLimit(ClientQuotaType.PRODUCE, tags));
        callback.updateQuota(ClientQuotaType.PRODUCE,
                entity(part(ClientQuotaEntity.ConfigEntityType.DEFAULT_CLIENT_ID, "<default>")), 100000.0);
        assertEquals(150000.0, callback.quotaLimit(ClientQuotaType.PRODUCE, tags));  // its own comes first
        callback.removeQuota(ClientQuotaType.PRODUCE,
                entity(part(ClientQuotaEntity.ConfigEntityType.CLIENT_ID, "loader")));
        assertEquals(100000.0, callback.quotaLimit(ClientQuotaType.PRODUCE, tags));  // then the default
        callback.removeQuota(ClientQuotaType.PRODUCE,
                entity(part(ClientQuotaEntity.ConfigEntityType.DEFAULT_CLIENT_ID, "<default>")));
        assertEquals(250000.0, callback.quotaLimit(ClientQuotaType.PRODUCE, tags));  // removed: the workers'
    }
}
