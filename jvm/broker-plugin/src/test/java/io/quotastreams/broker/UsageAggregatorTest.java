package io.quotastreams.broker;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import java.io.IOException;
import java.util.List;
import org.junit.jupiter.api.Test;

class UsageAggregatorTest {
    private static final UsageAggregator.Source LOADER = new UsageAggregator.Source("Produce", "", "loader");
    private static final UsageAggregator.Source OTHER = new UsageAggregator.Source("Fetch", "bob", "app");

    private static JsonNode only(List<byte[]> records) throws IOException {
        assertEquals(1, records.size());
        JsonNode batch = new ObjectMapper().readTree(records.get(0));
        assertEquals("batch", batch.get("type").asText());
        assertEquals(2, batch.get("broker").asInt());
        return batch.get("events");
    }

    @Test
    void chargesWhatEachSampleGainedPerEntityAndSecond() throws IOException {
        UsageAggregator agg = new UsageAggregator(2);
        agg.observe(LOADER, List.of(new UsageAggregator.Sample(10_000, 50_000, 5, 10_900)));
        agg.observe(OTHER, List.of(new UsageAggregator.Sample(10_200, 7_000, 2, 10_300)));
        JsonNode events = only(agg.drain());
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

        // the same sample grew, a new one started in the next second
        agg.observe(LOADER, List.of(new UsageAggregator.Sample(10_000, 80_000, 8, 10_990),
                new UsageAggregator.Sample(11_000, 20_000, 2, 11_400)));
        events = only(agg.drain());
        assertEquals(2, events.size());
        assertEquals(10_000, events.get(0).get("ts").asLong());
        assertEquals(30_000, events.get(0).get("bytes").asLong());
        assertEquals(3, events.get(0).get("count").asLong());
        assertEquals(11_000, events.get(1).get("ts").asLong());
        assertEquals(20_000, events.get(1).get("bytes").asLong());
        assertTrue(agg.drain().isEmpty());
    }

    @Test
    void aReusedSampleAndTakenBackBytesAreNotChargedTwice() throws IOException {
        UsageAggregator agg = new UsageAggregator(2);
        agg.observe(LOADER, List.of(new UsageAggregator.Sample(10_000, 50_000, 5, 10_900)));
        agg.drain();
        agg.observe(LOADER, List.of(new UsageAggregator.Sample(10_000, 40_000, 6, 10_950)));  // a fetch unrecorded
        assertTrue(agg.drain().isEmpty());
        agg.observe(LOADER, List.of(new UsageAggregator.Sample(21_000, 9_000, 3, 21_100)));  // reset for a new window
        JsonNode events = only(agg.drain());
        assertEquals(9_000, events.get(0).get("bytes").asLong());
        assertEquals(21_000, events.get(0).get("ts").asLong());
    }

    @Test
    void aLargeFlushIsSplitIntoBoundedRecords() {
        UsageAggregator agg = new UsageAggregator(2);
        for (int i = 0; i < UsageAggregator.EVENTS_PER_RECORD + 1; i++) {
            agg.observe(new UsageAggregator.Source("Produce", "u", "c" + i), List.of(new UsageAggregator.Sample(0, 10, 2, 5)));
        }
        assertEquals(2, agg.drain().size());
    }
}
