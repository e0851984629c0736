package io.quotastreams.anchor;

import java.util.LinkedHashMap;
import java.util.Map;
import java.util.Properties;
import java.util.Set;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.atomic.LongAdder;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.streams.KafkaStreams;
import org.apache.kafka.streams.StreamsConfig;

/**
 * {@code Main --bootstrap H:P --application-id ID --input T --output T --state-dir D
 * [--producer-limit B/s] [--consumer-limit B/s] [--commit-ms 1000] [--linger-ms 5]}: runs the
 * anchor until SIGTERM, printing {@code anchor ready} once the application is RUNNING (the
 * benchmark's start mark). A bad command line is one line on stderr and exit 2.
 */
public final class Main {

    static final Set<String> REQUIRED = Set.of("bootstrap", "application-id", "input", "output", "state-dir");
    static final Set<String> OPTIONAL = Set.of("producer-limit", "consumer-limit", "commit-ms", "linger-ms");

    private Main() {
    }

    public static void main(String[] argv) throws InterruptedException {
        Map<String, String> args;
        Windows windows;
        Properties props;
        try {
            args = parse(argv);
            windows = Windows.of(number(args, "producer-limit", 1_000_000),
                    number(args, "consumer-limit", 4_000_000));
            props = properties(args);
        } catch (IllegalArgumentException e) {
            System.err.println("streams-anchor: " + e.getMessage());
            System.exit(2);
            return;
        }
        LongAdder dropped = new LongAdder();
        KafkaStreams streams = new KafkaStreams(
                AnchorTopology.build(args.get("input"), args.get("output"), windows, dropped), props);
        CountDownLatch stopped = new CountDownLatch(1);
        streams.setStateListener((now, before) -> {
            if (now == KafkaStreams.State.RUNNING) {
                System.out.println("anchor ready");
                System.out.flush();
            }
            if (now == KafkaStreams.State.ERROR || now == KafkaStreams.State.NOT_RUNNING) {
                stopped.countDown();
            }
        });
        Runtime.getRuntime().addShutdownHook(new Thread(() -> {
            streams.close();
            System.err.println("streams-anchor: stopped; inputs dropped: " + dropped.sum());
        }));
        streams.start();
        stopped.await();
    }

    static Map<String, String> parse(String[] argv) {
        Map<String, String> values = new LinkedHashMap<>();
        for (int i = 0; i < argv.length; i += 2) {
            String flag = argv[i];
            String name = flag.startsWith("--") ? flag.substring(2) : "";
            if (!REQUIRED.contains(name) && !OPTIONAL.contains(name)) {
                throw new IllegalArgumentException("unknown argument " + flag);
            }
            if (i + 1 >= argv.length) {
                throw new IllegalArgumentException(flag + " needs a value");
            }
            values.put(name, argv[i + 1]);
        }
        for (String name : REQUIRED) {
            if (!values.containsKey(name)) {
                throw new IllegalArgumentException("--" + name + " is required");
            }
        }
        return values;
    }

    static double number(Map<String, String> args, String name, double fallback) {
        String raw = args.get(name);
        if (raw == null) {
            return fallback;
        }
        try {
            double value = Double.parseDouble(raw);
            if (value > 0 && Double.isFinite(value)) {
                return value;
            }
        } catch (NumberFormatException e) {
            // reported below
        }
        throw new IllegalArgumentException("--" + name + " must be a positive number, got " + raw);
    }

    /**
     * One stream thread (the worker is one process on one core's worth of event loop), at-least-once
     * with a 1 s commit as the worker commits, and a short producer linger: Streams' default of
     * 100 ms would add that much to every directive's latency.
     */
    static Properties properties(Map<String, String> args) {
        Properties p = new Properties();
        p.put(StreamsConfig.APPLICATION_ID_CONFIG, args.get("application-id"));
        p.put(StreamsConfig.BOOTSTRAP_SERVERS_CONFIG, args.get("bootstrap"));
        p.put(StreamsConfig.STATE_DIR_CONFIG, args.get("state-dir"));
        p.put(StreamsConfig.NUM_STREAM_THREADS_CONFIG, 1);
        p.put(StreamsConfig.COMMIT_INTERVAL_MS_CONFIG, (long) number(args, "commit-ms", 1000));
        p.put(StreamsConfig.producerPrefix(ProducerConfig.LINGER_MS_CONFIG), (int) number(args, "linger-ms", 5));
        p.put(StreamsConfig.consumerPrefix(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG), "earliest");
        return p;
    }
}
