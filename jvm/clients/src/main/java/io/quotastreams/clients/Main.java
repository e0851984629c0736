package io.quotastreams.clients;

import java.time.Duration;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.atomic.AtomicReference;

import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.KafkaException;
import org.apache.kafka.common.errors.AuthenticationException;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;
import org.apache.kafka.common.serialization.ByteArraySerializer;

/**
 * {@code produce} and {@code consume} with kafka-clients, as app/clients runs them for the other
 * libraries: a producer offering {@code --rate} bytes/s of {@code --record-bytes} records with at
 * most {@code --window} bytes unacknowledged; a consumer in {@code --group} reading
 * {@code --topic} from the start. Both print one JSON line per second ({@link Reporter}).
 *
 * <p>Exit status: 0 done; 2 bad arguments (one line on stderr); 3 the broker refused the
 * authentication (one line, {@code authentication failed: <Kafka's message>}).
 */
public final class Main {

    static final int BAD_ARGUMENTS = 2;
    static final int AUTHENTICATION_FAILED = 3;

    private Main() {
    }

    public static void main(String[] argv) {
        Args args;
        Properties security;
        try {
            args = Args.parse(argv);
            security = Security.configs(args);
        } catch (IllegalArgumentException e) {
            System.err.println(e.getMessage());
            System.exit(BAD_ARGUMENTS);
            return;
        }
        Reporter reporter;
        try {
            reporter = new Reporter(args.text("name", "client"), System.out, System::nanoTime,
                    start(args.number("epoch", -1, -1), System.nanoTime(),
                            System.currentTimeMillis()));
        } catch (IllegalArgumentException e) {
            System.err.println(e.getMessage());
            System.exit(BAD_ARGUMENTS);
            return;
        }
        try {
            if (args.program.equals("produce")) {
                produce(args, security, reporter);
            } else {
                consume(args, security, reporter);
            }
        } catch (AuthenticationException e) {
            System.err.println("authentication failed: " + e.getMessage());
            System.exit(AUTHENTICATION_FAILED);
        } catch (IllegalArgumentException e) {
            System.err.println(e.getMessage());
            System.exit(BAD_ARGUMENTS);
        }
        reporter.finish(Map.of());
        System.exit(0);
    }

    static void produce(Args args, Properties props, Reporter reporter) {
        int size = (int) args.number("record-bytes", 1000, 1);
        double rate = args.number("rate", 0, 1e-9);
        long window = (long) args.number("window", 256 * 1024, 1);
        long deadline = deadline(args);
        props.put("bootstrap.servers", args.text("bootstrap"));
        props.put("client.id", args.text("client-id"));
        props.put("linger.ms", "5");
        props.put("max.block.ms", "10000");
        AtomicLong outstanding = new AtomicLong();
        AtomicReference<AuthenticationException> refused = new AtomicReference<>();
        Pace pace = new Pace(rate, Math.max(size, rate / 20), System::nanoTime);
        byte[] value = new byte[size];
        java.util.Arrays.fill(value, (byte) 'x');
        String topic = args.text("topic");
        try (KafkaProducer<byte[], byte[]> producer = new KafkaProducer<>(props,
                new ByteArraySerializer(), new ByteArraySerializer())) {
            while (System.nanoTime() < deadline) {
                if (refused.get() != null) {
                    throw refused.get();
                }
                double wait = outstanding.get() + size <= window ? pace.take(size) : 0.005;
                if (wait > 0) {
                    sleep(Math.min(wait, 0.05));
                    reporter.tick();
                    continue;
                }
                try {
                    producer.send(new ProducerRecord<>(topic, value), (metadata, error) -> {
                        outstanding.addAndGet(-size);
                        if (error == null) {
                            reporter.add("bytes", size);
                            reporter.add("records", 1);
                        } else if (error instanceof AuthenticationException auth) {
                            refused.set(auth);
                        } else {
                            reporter.add("errors", 1);
                        }
                    });
                    outstanding.addAndGet(size);
                } catch (AuthenticationException e) {
                    throw e;
                } catch (KafkaException e) {
                    reporter.add("errors", 1);
                }
            }
            producer.flush();
        }
    }

    static void consume(Args args, Properties props, Reporter reporter) {
        int fetchBytes = (int) args.number("fetch-bytes", 65536, 1);
        long deadline = deadline(args);
        props.put("bootstrap.servers", args.text("bootstrap"));
        props.put("client.id", args.text("client-id"));
        props.put("group.id", args.text("group"));
        props.put("auto.offset.reset", "earliest");
        props.put("session.timeout.ms", "6000");
        props.put("heartbeat.interval.ms", "1000");
        props.put("max.partition.fetch.bytes", String.valueOf(fetchBytes));
        props.put("fetch.max.bytes", String.valueOf(Math.max(fetchBytes, 1024 * 1024)));
        try (KafkaConsumer<byte[], byte[]> consumer = new KafkaConsumer<>(props,
                new ByteArrayDeserializer(), new ByteArrayDeserializer())) {
            consumer.subscribe(List.of(args.text("topic")));
            while (System.nanoTime() < deadline) {
                ConsumerRecords<byte[], byte[]> records = consumer.poll(Duration.ofMillis(200));
                if (records.isEmpty()) {
                    reporter.tick();
                    continue;
                }
                long bytes = 0;
                for (ConsumerRecord<byte[], byte[]> record : records) {
                    bytes += record.value() == null ? 0 : record.value().length;
                }
                reporter.add("bytes", bytes);
                reporter.add("records", records.count());
            }
        }
    }

    /** The nanoTime reading that is second 0: {@code epoch} (wall-clock seconds) if given
     *  (not negative), else now. */
    static long start(double epoch, long nanoNow, long wallMillis) {
        return epoch < 0 ? nanoNow : nanoNow - (long) ((wallMillis / 1e3 - epoch) * 1e9);
    }

    private static long deadline(Args args) {
        return System.nanoTime() + (long) (args.number("seconds", 30, 1e-9) * 1e9);
    }

    private static void sleep(double seconds) {
        try {
            Thread.sleep((long) (seconds * 1000), (int) ((seconds * 1e9) % 1_000_000));
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        }
    }
}
