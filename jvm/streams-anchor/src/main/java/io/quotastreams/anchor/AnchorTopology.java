package io.quotastreams.anchor;

import java.util.concurrent.atomic.LongAdder;
import org.apache.kafka.common.serialization.Serde;
import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.streams.KeyValue;
import org.apache.kafka.streams.StreamsBuilder;
import org.apache.kafka.streams.Topology;
import org.apache.kafka.streams.kstream.Consumed;
import org.apache.kafka.streams.kstream.Produced;
import org.apache.kafka.streams.kstream.Repartitioned;
import org.apache.kafka.streams.state.Stores;

/**
 * Source records -> samples re-keyed by broker and user through a repartition topic (the worker
 * routes a principal's windows so in broker scope under the benchmark's configs) -> the windows
 * -> directives. The
 * same two stages as the worker: its ingest re-keys to the samples topic, its engine keeps the
 * windows with a changelog.
 */
public final class AnchorTopology {

    public static final String STORE = "windows";

    static final Serde<Sample> SAMPLES = Serdes.serdeFrom(
            (topic, sample) -> sample == null ? null : sample.toBytes(),
            (topic, data) -> data == null ? null : Sample.fromBytes(data));
    static final Serde<KafkaRate> RATES = Serdes.serdeFrom(
            (topic, rate) -> rate == null ? null : rate.toBytes(),
            (topic, data) -> data == null ? null : KafkaRate.fromBytes(data));

    private AnchorTopology() {
    }

    /** {@code dropped} counts the values and events that gave no sample. */
    public static Topology build(String input, String output, Windows windows, LongAdder dropped) {
        StreamsBuilder builder = new StreamsBuilder();
        // cached: the changelog gets a window's latest state per commit, not a record per sample
        builder.addStateStore(Stores.keyValueStoreBuilder(
                Stores.inMemoryKeyValueStore(STORE), Serdes.String(), RATES).withCachingEnabled());
        builder.stream(input, Consumed.with(Serdes.ByteArray(), Serdes.ByteArray()))
                .flatMap((key, value) -> RequestDecoder.decode(value, dropped).stream()
                        .map(s -> KeyValue.pair("b" + s.broker() + ":u:" + s.user(), s)).toList())
                .repartition(Repartitioned.with(Serdes.String(), SAMPLES).withName("samples"))
                .process(() -> new WindowProcessor(windows), STORE)
                .to(output, Produced.with(Serdes.String(), Serdes.String()));
        return builder.build();
    }
}
