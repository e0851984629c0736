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
 * Turns Kafka's quota sensors into contract request events (docs/contract.md): what each
 * sensor's samples gained since the last look, summed per client and quota type into one event
 * per look, with its request {@code count} and the throttles Kafka answered those requests with,
 * so the workers see the broker's real usage at a few events per client and second rather than
 * one per request, and tell a broker muting its clients from one its clients left.
 *
 * <p>Per client and quota type three sensors count: the quota sensor ({@code byte-rate} of
 * Produce and Fetch: bytes; {@code request-time} of Request: thread time, in Kafka's percent
 * units), its requests (the quota sensor's event count) and its {@code throttle-time} (the ms
 * of each throttle, summed). Request time is reported as {@code "api": "Request"}: Kafka's
 * request quota counts every API's time in one sensor.
 *
 * <p>Pure: the reporter passes the samples it read; not thread-safe (one reporter thread).
 */
public final class UsageAggregator {
    /** One sample of a sampled stat (Rate's or Avg's): Kafka's SampledStat.Sample, as read. */
    public record Sample(long startMs, double value, long count) {}

    /** A client's sensors of one quota type: the type (Produce, Fetch, Request) and its tags. */
    public record Source(String api, String user, String clientId) {}

    /** Which of a source's sensors a metric is. */
    public enum Kind { USAGE, THROTTLE }

    private record Sensor(Source source, Kind kind) {}

    private static final ObjectMapper JSON = new ObjectMapper();
    /** events per record: about 150 bytes each, well below a record's 1 MB */
    static final int EVENTS_PER_RECORD = 2000;
    /** the request quota's units per ms of thread time (ClientRequestQuotaManager: 100 / 1e9 per ns) */
    static final double PERCENT_PER_MS = 0.1;
    /** the most a throttle sum carries (the contract's unsigned 32-bit throttle_ms) */
    static final long MAX_THROTTLE_MS = 0xFFFF_FFFFL;

    private final long broker;
    /** each sensor's samples at the last look, slot by slot */
    private final Map<Sensor, List<Sample>> seen = new HashMap<>();
    /** per source, what this look gained: usage, requests, throttle ms */
    private final Map<Source, double[]> gained = new LinkedHashMap<>();

    public UsageAggregator(long broker) {
        this.broker = broker;
    }

    /**
     * Take a sensor's current samples, in their slots' order; what each gained since the last
     * call is counted. A slot is the same sample while its start is: Kafka resets a slot to a new
     * start when it reuses it, and every obsolete slot to the same start at once, so a start
     * alone does not name a sample.
     */
    public void observe(Source source, Kind kind, List<Sample> samples) {
        Sensor sensor = new Sensor(source, kind);
        List<Sample> before = seen.getOrDefault(sensor, List.of());
        double value = 0;
        long requests = 0;
        for (int i = 0; i < samples.size(); i++) {
            Sample s = samples.get(i);
            Sample old = i < before.size() && before.get(i).startMs() == s.startMs() ? before.get(i) : null;
            double gain = s.value() - (old == null ? 0 : old.value());
            if (gain > 0) {  // a fetch's bytes taken back, or a sample reset, gain nothing
                value += gain;
                requests += Math.max(0, s.count() - (old == null ? 0 : old.count()));
            }
        }
        seen.put(sensor, List.copyOf(samples));
        if (value > 0) {
            double[] sums = gained.computeIfAbsent(source, k -> new double[3]);
            if (kind == Kind.USAGE) {
                sums[0] += value;
                sums[1] += requests;
            } else {
                sums[2] += value;
            }
        }
    }

    /** A sensor Kafka removed (idle for an hour). */
    public void forget(Source source, Kind kind) {
        seen.remove(new Sensor(source, kind));
    }

    /**
     * The events gained since the last drain, stamped {@code second} (the second the look's
     * interval mostly covers), as JSON batch records of this broker.
     */
    public List<byte[]> drain(long second) {
        List<byte[]> records = new ArrayList<>();
        ArrayNode events = JSON.createArrayNode();
        for (Map.Entry<Source, double[]> e : gained.entrySet()) {
            Source s = e.getKey();
            double[] sums = e.getValue();
            ObjectNode event = events.addObject();
            event.put("type", "request").put("v", 1).put("ts", second).put("broker", broker)
                    .put("user", s.user()).put("client_id", s.clientId()).put("api", s.api());
            if (s.api().equals("Request")) {
                event.put("thread_time_ms", sums[0] / PERCENT_PER_MS);
            } else {
                event.put("bytes", Math.round(sums[0]));
            }
            // a throttle seen without its request's usage (read between the two) still counts one
            event.put("count", Math.max(1, (long) sums[1]));
            long throttle = Math.min(MAX_THROTTLE_MS, Math.round(sums[2]));
            if (throttle > 0) {
                event.put("throttle_ms", throttle);
            }
            if (events.size() == EVENTS_PER_RECORD) {
                records.add(batch(events));
                events = JSON.createArrayNode();
            }
        }
        if (!events.isEmpty()) {
            records.add(batch(events));
        }
        gained.clear();
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
