package io.quotastreams.anchor;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import java.nio.charset.StandardCharsets;
import java.util.HexFormat;
import java.util.List;
import java.util.Properties;
import java.util.concurrent.atomic.LongAdder;
import org.apache.kafka.common.serialization.ByteArraySerializer;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.streams.StreamsConfig;
import org.apache.kafka.streams.TestInputTopic;
import org.apache.kafka.streams.TestOutputTopic;
import org.apache.kafka.streams.TopologyTestDriver;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;

class AnchorTopologyTest {

    private static final ObjectMapper JSON = new ObjectMapper();
    /** Two request events (alice/app Produce 300 B at 1000, bob/etl Fetch 7000 B at 1001) as
     * `app.intake.columnar.encode_events` writes them. */
    private static final String COLUMNAR =
            "515343420100000002000000090000000900000005000000030000000000000007000000030000000300000009000000"
            + "05000000504c41494e54455854616c69636561707050726f64756365626f6265746c3132372e302e302e314665746368"
            + "e803000000000000e9030000000000000100000002000000ffffffffffffffff00000000030000000100000005000000"
            + "0200000006000000030000000700000004000000080000002c01000000000000581b00000000000020a1070000000000"
            + "000000000000000000000000000000000000000000000000010000000000000001000000000000000000";

    private TopologyTestDriver driver;
    private TestInputTopic<byte[], byte[]> input;
    private TestOutputTopic<String, String> output;
    private final LongAdder dropped = new LongAdder();

    @BeforeEach
    void start() {
        Properties props = new Properties();
        props.put(StreamsConfig.APPLICATION_ID_CONFIG, "anchor-test");
        props.put(StreamsConfig.BOOTSTRAP_SERVERS_CONFIG, "127.0.0.1:9");
        driver = new TopologyTestDriver(
                AnchorTopology.build("requests", "directives", new Windows(11, 1000, 500, 5000, 100), dropped),
                props);
        input = driver.createInputTopic("requests", new ByteArraySerializer(), new ByteArraySerializer());
        output = driver.createOutputTopic("directives", new StringDeserializer(), new StringDeserializer());
    }

    @AfterEach
    void stop() {
        driver.close();
    }

    private void send(String json) {
        input.pipeInput(json.getBytes(StandardCharsets.UTF_8));
    }

    private static String produce(long ts, String user, String client, long bytes) {
        return request(ts, "1", user, client, "Produce", bytes);
    }

    private static String fetch(long ts, String broker, String user, String client, long bytes) {
        return request(ts, broker, user, client, "Fetch", bytes);
    }

    /** A request event; {@code broker} null: none of its own (a batch's applies). */
    private static String request(long ts, String broker, String user, String client, String api, long bytes) {
        return "{\"type\":\"request\",\"v\":1,\"ts\":" + ts
                + (broker == null ? "" : ",\"broker\":" + broker) + ",\"user\":\"" + user
                + "\",\"client_id\":\"" + client + "\",\"api\":\"" + api + "\",\"bytes\":" + bytes + "}";
    }

    private static String batch(String... events) {
        return "{\"type\":\"batch\",\"v\":1,\"broker\":1,\"events\":[" + String.join(",", events) + "]}";
    }

    private List<JsonNode> directives() throws Exception {
        List<JsonNode> out = new java.util.ArrayList<>();
        for (String value : output.readValuesToList()) {
            out.add(JSON.readTree(value));
        }
        return out;
    }

    @Test
    void throttleTimeIsKafkasOverTheWindow() throws Exception {
        // ClientQuotaManagerTest#testQuotaViolation's figure: 6300 B over 10.5 s is 600 B/s
        // against 500 B/s, so 100/500 * 10500 = 2100 ms
        send(produce(0, "alice", "app", 300));
        assertTrue(output.isEmpty(), "30 B/s over the minimum window of 10 s is under the limit");
        send(batch(produce(10_500, "alice", "app", 6000)));
        List<JsonNode> out = directives();
        assertEquals(1, out.size());
        JsonNode d = out.get(0);
        assertEquals("producer_byte_rate", d.get("quota").asText());
        assertEquals("alice", d.get("entity").get("user").asText());
        assertEquals("app", d.get("entity").get("client_id").asText());
        assertEquals(2100, d.get("throttle_time_ms").asLong());
        assertEquals(10_500 + 2100, d.get("until").asLong());
        assertEquals(10_500, d.get("window_ms").asLong());
        assertEquals(600.0, d.get("observed").asDouble(), 1e-9);
        assertEquals(1, d.get("broker").asInt());
    }

    @Test
    void eachBrokerKeepsItsOwnWindows() throws Exception {
        // 4000 B/s on each of two brokers: under 5000 on each, as Kafka's brokers count
        send(batch(fetch(0, null, "bob", "a", 40_000), fetch(0, "2", "bob", "a", 40_000)));
        assertTrue(output.isEmpty());
        send(fetch(1, "2", "bob", "a", 40_000));
        List<JsonNode> out = directives();
        assertEquals(1, out.size(), "8000 B/s on broker 2");
        assertEquals(2, out.get(0).get("broker").asInt());
    }

    @Test
    void aThrottleExtendedByNoMoreThanTheMinimumPublishesNothing() throws Exception {
        send(produce(0, "alice", "app", 10_000));  // 1000 B/s: 10,000 ms of throttle, until 10,000
        send(produce(1, "alice", "app", 5));  // 10,005 B over 10,001 ms: until 10,010, 10 ms later
        send(produce(2, "alice", "app", 1000));  // 11,005 B over 10,002 ms: until 12,010
        List<JsonNode> out = directives();
        assertEquals(2, out.size());
        assertEquals(10_000, out.get(0).get("until").asLong());
        assertEquals(12_010, out.get(1).get("until").asLong());
    }

    @Test
    void anOlderEventIsChargedAtTheLatestTime() throws Exception {
        send(produce(5000, "alice", "app", 1));
        send(produce(100, "alice", "app", 10_000));
        assertEquals(5000, directives().get(0).get("ts").asLong());
    }

    @Test
    void fetchBytesAreChargedToTheUserAcrossClients() throws Exception {
        send(batch(fetch(0, "1", "bob", "a", 30_000), fetch(0, "1", "bob", "b", 30_000)));
        List<JsonNode> out = directives();
        assertEquals(1, out.size(), "3000 B/s is under 5000, 6000 B/s over");
        assertEquals("consumer_byte_rate", out.get(0).get("quota").asText());
        assertEquals("", out.get(0).get("entity").get("client_id").asText());
        assertEquals(2000, out.get(0).get("throttle_time_ms").asLong());
    }

    @Test
    void columnarBatchesDecodeAsTheirJson() {
        List<Sample> samples = RequestDecoder.decode(HexFormat.of().parseHex(COLUMNAR), dropped);
        assertEquals(List.of(new Sample(1000, 1, "alice", "app", "Produce", 300),
                new Sample(1001, 2, "bob", "etl", "Fetch", 7000)), samples);
        assertEquals(0, dropped.sum());
    }

    @Test
    void brokenValuesAreDroppedAndCounted() throws Exception {
        byte[] cut = HexFormat.of().parseHex(COLUMNAR.substring(0, COLUMNAR.length() - 2));
        input.pipeInput(cut);
        send("{not json");
        send("{\"type\":\"request\",\"v\":1,\"ts\":0,\"user\":\"alice\",\"api\":\"Produce\",\"bytes\":1}");
        send("{\"type\":\"connection\",\"v\":1,\"ts\":0,\"broker\":1,\"listener\":\"L\",\"ip\":\"127.0.0.1\"}");
        send(produce(0, "alice", "app", 10_000));
        assertEquals(3, dropped.sum(), "a cut columnar record, bad JSON, an event without client_id");
        assertEquals(1, directives().size());
    }

    @Test
    void aFreshRateIsMeasuredOverTheMinimumWindow() {
        KafkaRate rate = new KafkaRate(11);
        rate.recordMeasure(50, 0, 11, 1000);
        assertEquals(50 / 10.999, rate.recordMeasure(0, 999, 11, 1000), 1e-12);
        KafkaRate back = KafkaRate.fromBytes(rate.toBytes());
        assertEquals(50 / 10.999, back.recordMeasure(0, 999, 11, 1000), 1e-12);
    }

    @Test
    void aSampleIsDroppedOnceItsLastEventLeavesTheWindow() {
        KafkaRate rate = new KafkaRate(11);
        rate.recordMeasure(11_000, 0, 11, 1000);
        assertEquals(0.0, rate.recordMeasure(0, 11_000, 11, 1000), 0.0);
    }

    @Test
    void badCommandLinesAreOneLine() {
        var e = assertThrows(IllegalArgumentException.class, () -> Main.parse(new String[] {"--bootstrap"}));
        assertEquals("--bootstrap needs a value", e.getMessage());
        e = assertThrows(IllegalArgumentException.class, () -> Main.parse(new String[] {"--nope", "1"}));
        assertEquals("unknown argument --nope", e.getMessage());
        e = assertThrows(IllegalArgumentException.class,
                () -> Main.number(java.util.Map.of("producer-limit", "-1"), "producer-limit", 1));
        assertEquals("--producer-limit must be a positive number, got -1", e.getMessage());
    }
}
