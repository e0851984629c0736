package io.quotastreams.broker;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.charset.StandardCharsets;
import java.util.List;
import java.util.Map;
import java.util.Set;
import org.apache.kafka.clients.producer.MockProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.Cluster;
import org.apache.kafka.common.KafkaException;
import org.apache.kafka.common.Node;
import org.apache.kafka.common.PartitionInfo;
import org.apache.kafka.common.serialization.ByteArraySerializer;
import org.junit.jupiter.api.Test;

/** The reporter's sender: what it does when its producer cannot be made at first. */
class UsageSenderTest {
    private static final String TOPIC = "quota.events.request";

    private static byte[] b(String s) {
        return s.getBytes(StandardCharsets.UTF_8);
    }

    @Test
    void aProducerThatCannotBeMadeYetIsTriedAgainAndTheQueuedRecordsAreWritten() throws Exception {
        UsageReporter reporter = new UsageReporter();
        reporter.prepare(Map.of("node.id", "4", "quota.streams.bootstrap.servers", "127.0.0.1:9092",
                "quota.streams.brokers", "3", "quota.streams.request.topic", TOPIC));
        Node node = new Node(1, "127.0.0.1", 9092);
        List<PartitionInfo> partitions = List.of(0, 1, 2).stream()
                .map(p -> new PartitionInfo(TOPIC, p, node, new Node[] {node}, new Node[] {node})).toList();
        Cluster cluster = new Cluster("c", List.of(node), partitions, Set.of(), Set.of());
        MockProducer<byte[], byte[]> mock = new MockProducer<>(cluster, true, null, new ByteArraySerializer(),
                new ByteArraySerializer());
        int[] tries = {0};
        reporter.enqueue(List.of(b("{\"a\":1}"), b("{\"b\":2}")));
        Thread sender = reporter.startSender(config -> {
            if (tries[0]++ < 2) {  // the bootstrap address does not resolve yet
                throw new KafkaException("No resolvable bootstrap urls given in bootstrap.servers");
            }
            return mock;
        });
        long deadline = System.nanoTime() + 30_000_000_000L;  // the backoffs take 0.3 s
        while (mock.history().size() < 2 && System.nanoTime() < deadline) {
            Thread.sleep(20);
        }
        reporter.close();
        sender.join(5_000);
        assertEquals(3, tries[0]);
        List<ProducerRecord<byte[], byte[]>> written = mock.history();
        assertEquals(2, written.size());
        assertTrue(written.stream().allMatch(r -> r.topic().equals(TOPIC) && r.partition() == 1));  // 4 % 3
        assertEquals("broker/4", new String(written.get(0).key(), StandardCharsets.UTF_8));
        assertTrue(!sender.isAlive());
    }
}
