package io.quotastreams.anchor;

import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ObjectNode;
import org.apache.kafka.streams.processor.api.Processor;
import org.apache.kafka.streams.processor.api.ProcessorContext;
import org.apache.kafka.streams.processor.api.Record;
import org.apache.kafka.streams.state.KeyValueStore;

/**
 * Charges each sample to its entity's window on its broker (the worker's default broker scope,
 * Kafka's own accounting), Kafka's way ({@link KafkaRate}), and forwards a
 * directive (the shape of the worker's, keyed {@code <quota>|<entity as JSON>}) when the rate is
 * over the limit. The state lives in a store whose changelog makes it survive a restart, as the
 * worker's windows do.
 */
public final class WindowProcessor implements Processor<String, Sample, String, String> {

    private static final ObjectMapper JSON = new ObjectMapper();

    private final Windows windows;
    private ProcessorContext<String, String> context;
    private KeyValueStore<String, KafkaRate> store;

    public WindowProcessor(Windows windows) {
        this.windows = windows;
    }

    @Override
    public void init(ProcessorContext<String, String> context) {
        this.context = context;
        this.store = context.getStateStore(AnchorTopology.STORE);
    }

    @Override
    public void process(Record<String, Sample> record) {
        Sample s = record.value();
        String quota;
        String client;
        double limit;
        if ("Produce".equals(s.api())) {
            quota = "producer_byte_rate";
            client = s.clientId();
            limit = windows.producerLimit();
        } else if ("Fetch".equals(s.api())) {
            quota = "consumer_byte_rate";
            client = "";
            limit = windows.consumerLimit();
        } else {
            return;
        }
        // the store key needs no JSON: the entity is written out only for a directive
        String key = quota + '\u0000' + s.broker() + '\u0000' + s.user() + '\u0000' + client;
        KafkaRate rate = store.get(key);
        if (rate == null) {
            rate = new KafkaRate(windows.samples());
        }
        long now = rate.advance(s.ts());
        double observed = rate.recordMeasure(s.bytes(), now, windows.samples(), windows.windowMs());
        if (observed > limit) {
            long window = rate.windowMs(now, windows.samples(), windows.windowMs());
            long throttle = Math.min(Math.round((observed - limit) / limit * window), Integer.MAX_VALUE);
            long until = now + throttle;
            if (throttle > 0 && (rate.until() <= now || until > rate.until() + windows.minExtensionMs())) {
                rate.until(until);
                ObjectNode directive = JSON.createObjectNode().put("v", 1).put("ts", now)
                        .put("scope", "broker").put("broker", s.broker()).put("quota", quota).put("action", "throttle")
                        .put("throttle_time_ms", throttle).put("until", until)
                        .put("observed", observed).put("limit", limit).put("window_ms", window);
                ObjectNode entity = directive.putObject("entity").put("user", s.user()).put("client_id", client);
                context.forward(new Record<>(quota + "|" + entity, directive.toString(), record.timestamp()));
            }
        }
        store.put(key, rate);
    }
}
