package io.quotastreams.broker;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotSame;
import static org.junit.jupiter.api.Assertions.assertSame;

import java.lang.management.ManagementFactory;
import java.util.List;
import java.util.Map;
import javax.management.ObjectName;
import org.apache.kafka.common.Cluster;
import org.apache.kafka.common.Node;
import org.apache.kafka.server.quota.ClientQuotaType;
import org.junit.jupiter.api.Test;

/**
 * A combined broker and controller builds its quota managers twice, so two callbacks configured
 * alike run in one process: they must read the topics once and report one set of beans.
 */
class NodeStateTest {
    private static final Map<String, String> CONFIGS = Map.of("node.id", "7",
            "quota.streams.bootstrap.servers", "127.0.0.1:1", "quota.streams.brokers", "3",
            "quota.streams.control.topic", "node-state-test.directives");

    private static long followerThreads() {
        return Thread.getAllStackTraces().keySet().stream()
                .filter(t -> t.isAlive() && t.getName().startsWith("quota-streams-")).count();
    }

    private static int beans() throws Exception {
        return ManagementFactory.getPlatformMBeanServer()
                .queryNames(new ObjectName(PluginMetrics.DOMAIN + ":type=callback"), null).size();
    }

    @Test
    void twoCallbacksOfOneNodeShareTheirFollowersTablesAndBeans() throws Exception {
        long before = followerThreads();
        QuotaCallback broker = new QuotaCallback();
        QuotaCallback controller = new QuotaCallback();
        broker.configure(CONFIGS);
        controller.configure(CONFIGS);
        try {
            assertSame(broker.state(), controller.state());
            assertEquals(2, followerThreads() - before);  // one control and one config follower
            assertEquals(1, beans());
            controller.configured().update(ClientQuotaType.PRODUCE, null, "loader", 600000.0);
            Map<String, String> tags = Map.of("user", "", "client-id", "loader");
            assertEquals(200000.0, broker.quotaLimit(ClientQuotaType.PRODUCE, tags));
            // the broker learns the brokers from its metadata; the controller's bounds follow
            Node one = new Node(1, "127.0.0.1", 1);
            Node two = new Node(2, "127.0.0.1", 2);
            broker.updateClusterMetadata(new Cluster("c", List.of(one, two), List.of(), java.util.Set.of(),
                    java.util.Set.of()));
            assertEquals(300000.0, controller.quotaLimit(ClientQuotaType.PRODUCE, tags));
        } finally {
            controller.close();
        }
        assertEquals(1, beans());  // the broker's callback still reports
        broker.close();
        assertEquals(0, beans());
        QuotaCallback again = new QuotaCallback();
        again.configure(CONFIGS);
        try {
            assertNotSame(broker.state(), again.state());  // a closed state is not handed out again
        } finally {
            again.close();
        }
    }
}
