package io.quotastreams.broker;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import io.quotastreams.broker.UsageAggregator.Kind;
import io.quotastreams.broker.UsageAggregator.Sample;
import io.quotastreams.broker.UsageAggregator.Source;
import java.io.IOException;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import org.apache.kafka.common.MetricName;
import org.junit.jupiter.api.Test;

class UsageAggregatorTest {
    private static final Source LOADER = new Source("Produce", "", "loader");
    private static final Source OTHER = new Source("Fetch", "bob", "app");
    private static final Source TIME = new Source("Request", "", "loader");

    private static JsonNode only(List<byte[]> records) throws IOException {
        assertEquals(1, records.size());
        JsonNode batch = new ObjectMapper().readTree(records.get(0));
        assertEquals("batch", batch.get("type").asText());
        assertEquals(2, batch.get("broker").asInt());
        return batch.get("events");
    }

    @Test
    void chargesWhatEachSensorGainedSinceTheLastLookStampedWithTheSecond() throws IOException {
        UsageAggregator agg = new UsageAggregator(2);
        agg.observe(LOADER, Kind.USAGE, List.of(new Sample(10_000, 50_000, 5)));
        agg.observe(OTHER, Kind.USAGE, List.of(new Sample(10_200, 7_000, 2)));
        JsonNode events = only(agg.drain(10_000));
        assertEquals(2, events.size());
        JsonNode first = events.get(0);
        assertEquals(10_000, first.get("ts").asLong());
        assertEquals("Produce", first.get("api").asText());
        assertEquals("loader", first.get("client_id").asText());
        assertEquals("", first.get("user").asText());
        assertEquals(50_000, first.get("bytes").asLong());
        assertEquals(5, first.get("count").asLong());
        assertEquals(2, first.get("broker").asLong());
        assertEquals(1, first.get("v").asInt());
        assertEquals("request", first.get("type").asText());
        assertNull(first.get("throttle_ms"));

        // the same sample grew, a new one started: one event of what both gained, this second's
        agg.observe(LOADER, Kind.USAGE, List.of(new Sample(10_000, 80_000, 8), new Sample(11_000, 20_000, 2)));
        events = only(agg.drain(11_000));
        assertEquals(1, events.size());
        assertEquals(11_000, events.get(0).get("ts").asLong());
        assertEquals(50_000, events.get(0).get("bytes").asLong());
        assertEquals(5, events.get(0).get("count").asLong());
        assertTrue(agg.drain(12_000).isEmpty());
    }

    @Test
    void theThrottlesKafkaAnsweredARequestsWithComeWithTheirUsage() throws IOException {
        UsageAggregator agg = new UsageAggregator(2);
        agg.observe(LOADER, Kind.USAGE, List.of(new Sample(10_000, 1_000_000, 1)));
        // throttle-time is an Avg over Kafka's default metric window: its samples sum the ms
        agg.observe(LOADER, Kind.THROTTLE, List.of(new Sample(0, 5_600, 1)));
        JsonNode event = only(agg.drain(10_000)).get(0);
        assertEquals(1_000_000, event.get("bytes").asLong());
        assertEquals(5_600, event.get("throttle_ms").asLong());
        // a throttle read without its request's bytes (the look fell between the two) counts one
        agg.observe(LOADER, Kind.USAGE, List.of(new Sample(10_000, 1_000_000, 1)));
        agg.observe(LOADER, Kind.THROTTLE, List.of(new Sample(0, 9_100, 2)));
        event = only(agg.drain(11_000)).get(0);
        assertEquals(3_500, event.get("throttle_ms").asLong());
        assertEquals(0, event.get("bytes").asLong());
        assertEquals(1, event.get("count").asLong());
    }

    @Test
    void requestTimeIsReportedInMsAsTheRequestQuotasOwn() throws IOException {
        UsageAggregator agg = new UsageAggregator(2);
        // ClientRequestQuotaManager records 100 / 1e9 per ns of thread time: 1.5 is 15 ms
        agg.observe(TIME, Kind.USAGE, List.of(new Sample(10_000, 1.5, 3)));
        agg.observe(TIME, Kind.THROTTLE, List.of(new Sample(0, 1_000, 1)));
        JsonNode event = only(agg.drain(10_000)).get(0);
        assertEquals("Request", event.get("api").asText());
        assertEquals(15.0, event.get("thread_time_ms").asDouble(), 1e-9);
        assertNull(event.get("bytes"));
        assertEquals(3, event.get("count").asLong());
        assertEquals(1_000, event.get("throttle_ms").asLong());
    }

    @Test
    void aReusedSampleAndTakenBackBytesAreNotChargedTwice() throws IOException {
        UsageAggregator agg = new UsageAggregator(2);
        agg.observe(LOADER, Kind.USAGE, List.of(new Sample(10_000, 50_000, 5)));
        agg.drain(10_000);
        agg.observe(LOADER, Kind.USAGE, List.of(new Sample(10_000, 40_000, 6)));  // a fetch unrecorded
        assertTrue(agg.drain(11_000).isEmpty());
        agg.observe(LOADER, Kind.USAGE, List.of(new Sample(21_000, 9_000, 3)));  // reset for a new window
        JsonNode events = only(agg.drain(21_000));
        assertEquals(9_000, events.get(0).get("bytes").asLong());
        assertEquals(21_000, events.get(0).get("ts").asLong());
    }

    @Test
    void slotsResetToTheSameStartAreToldApartByTheirPlace() throws IOException {
        // Kafka's purge resets every obsolete slot to the same start at once; the next record
        // goes into one of them: only what it gained counts, once
        UsageAggregator agg = new UsageAggregator(2);
        agg.observe(LOADER, Kind.USAGE, List.of(new Sample(30_000, 0, 0), new Sample(30_000, 2_000_000, 2),
                new Sample(30_000, 0, 0)));
        assertEquals(2_000_000, only(agg.drain(30_000)).get(0).get("bytes").asLong());
        for (long second = 31_000; second < 35_000; second += 1000) {  // nothing new: nothing again
            agg.observe(LOADER, Kind.USAGE, List.of(new Sample(30_000, 0, 0), new Sample(30_000, 2_000_000, 2),
                    new Sample(30_000, 0, 0)));
            assertTrue(agg.drain(second).isEmpty());
        }
        agg.observe(LOADER, Kind.USAGE, List.of(new Sample(35_000, 500, 1), new Sample(30_000, 2_000_000, 2),
                new Sample(30_000, 0, 0)));
        assertEquals(500, only(agg.drain(35_000)).get(0).get("bytes").asLong());
    }

    @Test
    void aLargeFlushIsSplitIntoBoundedRecords() {
        UsageAggregator agg = new UsageAggregator(2);
        for (int i = 0; i < UsageAggregator.EVENTS_PER_RECORD + 1; i++) {
            agg.observe(new Source("Produce", "u", "c" + i), Kind.USAGE, List.of(new Sample(0, 10, 2)));
        }
        assertEquals(2, agg.drain(0).size());
    }

    @Test
    void theReporterReadsEachQuotaSensorAndItsThrottleTimeNamedAsKafkaNamesThem() {
        Map<String, String> tags = Map.of("user", "", "client-id", "loader");
        assertEquals(new UsageReporter.Read(LOADER, Kind.USAGE),
                UsageReporter.source(new MetricName("byte-rate", "Produce", "", tags)));
        assertEquals(new UsageReporter.Read(LOADER, Kind.THROTTLE),
                UsageReporter.source(new MetricName("throttle-time", "Produce", "", tags)));
        assertEquals(new UsageReporter.Read(TIME, Kind.USAGE),
                UsageReporter.source(new MetricName("request-time", "Request", "", tags)));
        assertNull(UsageReporter.source(new MetricName("byte-rate", "Request", "", tags)));
        assertNull(UsageReporter.source(new MetricName("queue-size", "Produce", "", tags)));
        assertNull(UsageReporter.source(new MetricName("byte-rate", "Produce", "", Map.of("user", ""))));
        assertNull(UsageReporter.source(new MetricName("byte-rate", "Produce", "",
                Map.of("user", "", "client-id", UsageReporter.OWN_CLIENT_PREFIX + "usage-1"))));
    }

    @Test
    void looksAreMadeJustAfterEachIntervalAndStampedWithTheSecondTheyCover() {
        assertEquals(950, UsageReporter.untilNextRead(10_100, 1_000));
        assertEquals(50, UsageReporter.untilNextRead(11_000, 1_000));
        assertEquals(1_000, UsageReporter.untilNextRead(11_050, 1_000));
        assertEquals(10_000, UsageReporter.second(11_050, 1_000));  // the second that ended
        assertEquals(10_000, UsageReporter.second(11_400, 1_000));  // a late wake-up, the same
        assertFalse(UsageReporter.second(11_600, 1_000) == 10_000);  // mostly the next second
    }

    @Test
    void aLookWokenLateStampsTheSecondItWasDueForSoNoSecondIsStampedTwice() throws Exception {
        long[] now = {10_100};
        long[] late = {600, 0, 900, 0, 0, 450};  // how late each wake-up is (a busy machine, a GC)
        int[] looked = {0};
        UsageReporter.Looks looks = new UsageReporter.Looks(() -> now[0],
                ms -> now[0] += ms + late[looked[0]++], 1_000);
        List<Long> stamps = new ArrayList<>();
        for (int i = 0; i < late.length; i++) {
            stamps.add(looks.next());
        }
        // the first look is due at 11.05 s and woken at 11.65 s: it stamps 10 s, the next 11 s
        assertEquals(List.of(10_000L, 11_000L, 12_000L, 13_000L, 14_000L, 15_000L), stamps);
    }
}
