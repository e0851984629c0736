package io.quotastreams.broker;

import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

/**
 * Turns Kafka's quota windows into contract request events (docs/contract.md): what each
 * sample of a client's byte-rate sensor gained since the last look, summed per entity, API and
 * second into one event with its request {@code count}, so the workers see the broker's real
 * usage at a few events per client and second rather than one per request.
 *
 * <p>Pure: the reporter passes the samples it read; not thread-safe (one reporter thread).
 */
public final class UsageAggregator {
    /** One sample of a rate sensor: Kafka's SampledStat.Sample, as read. */
    public record Sample(long startMs, double value, long count, long lastEventMs) {}

    /** A sensor: the API it measures (Produce or Fetch) and its metric tags. */
    public record Source(String api, String user, String clientId) {}

    private record Bucket(Source source, long second) {}

    private static final ObjectMapper JSON = new ObjectMapper();
    /** events per record: about 150 bytes each, well below a record's 1 MB */
    static final int EVENTS_PER_RECORD = 2000;

    private final long broker;
    private final Map<Source, Map<Long, Sample>> seen = new HashMap<>();
    private final Map<Bucket, double[]> buckets = new LinkedHashMap<>();

    public UsageAggregator(long broker) {
        this.broker = broker;
    }

    /** Take a sensor's current samples; what each gained since the last call is charged. */
    public void observe(Source source, List<Sample> samples) {
        Map<Long, Sample> before = seen.getOrDefault(source, Map.of());
        Map<Long, Sample> now = new HashMap<>();
        for (Sample s : samples) {
            now.put(s.startMs(), s);
            Sample old = before.get(s.startMs());
            double gained = s.value() - (old == null ? 0 : old.value());
            long requests = s.count() - (old == null ? 0 : old.count());
            if (gained > 0) {
                double[] sums = buckets.computeIfAbsent(new Bucket(source, s.lastEventMs() / 1000 * 1000),
                        k -> new double[2]);
                sums[0] += gained;
                sums[1] += Math.max(0, requests);
            }
        }
        seen.put(source, now);
    }

    /** A sensor Kafka removed (idle for an hour). */
    public void forget(Source source) {
        seen.remove(source);
    }

    /** The events gathered since the last drain, as JSON batch records of this broker. */
    public List<byte[]> drain() {
        List<byte[]> records = new ArrayList<>();
        ArrayNode events = JSON.createArrayNode();
        for (Map.Entry<Bucket, double[]> e : buckets.entrySet()) {
            Source s = e.getKey().source();
            ObjectNode event = events.addObject();
            event.put("type", "request").put("v", 1).put("ts", e.getKey().second()).put("broker", broker)
                    .put("user", s.user()).put("client_id", s.clientId()).put("api", s.api())
                    .put("bytes", Math.round(e.getValue()[0]))
                    .put("count", Math.max(1, (long) e.getValue()[1]));
            if (events.size() == EVENTS_PER_RECORD) {
                records.add(batch(events));
                events = JSON.createArrayNode();
            }
        }
        if (!events.isEmpty()) {
            records.add(batch(events));
        }
        buckets.clear();
        return records;
    }

    private byte[] batch(ArrayNode events) {
        ObjectNode batch = JSON.createObjectNode();
        batch.put("type", "batch").put("v", 1).put("broker", broker).set("events", events);
        try {
            return JSON.writeValueAsBytes(batch);
        } catch (com.fasterxml.jackson.core.JsonProcessingException e) {
            throw new IllegalStateException(e);
        }
    }
}
