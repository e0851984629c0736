package io.quotastreams.broker;

import java.time.Duration;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.atomic.AtomicLong;
import java.util.function.LongSupplier;
import java.util.stream.Collectors;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.common.PartitionInfo;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.errors.InterruptException;
import org.apache.kafka.common.errors.WakeupException;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * Follows one of the workers' topics, as app.subscriber.consumer does: no consumer group (every
 * broker needs every record), every partition read from the beginning at start, so what it holds
 * is rebuilt from what the topic holds; a refused record (one over {@link Records#MAX_RECORD_BYTES}
 * unread) is counted by reason and skipped, and no error ever stops the reading (it is retried
 * with a backoff). What a record means is the subclass's ({@link #apply}).
 */
public abstract class Follower implements Runnable {
    private static final Logger LOG = LoggerFactory.getLogger(Follower.class);
    /** How often the topic's partitions are looked up again (from the consumer's metadata). */
    private static final long PARTITION_CHECK_NS = 5_000_000_000L;
    /** How old the consumer's metadata may get: a partition added is seen within this. */
    static final int METADATA_MAX_AGE_MS = 30_000;

    protected final Settings settings;
    protected final LongSupplier clock;
    private final String topic;
    private final String name;
    private final Map<String, AtomicLong> counts = new ConcurrentHashMap<>();
    private volatile PluginMetrics metrics;
    private volatile boolean running = true;
    private volatile KafkaConsumer<byte[], byte[]> consumer;

    /** {@code name}: this follower's part of its client id and of its thread's name. */
    protected Follower(Settings settings, String topic, String name, LongSupplier clock) {
        this.settings = settings;
        this.topic = topic;
        this.name = name;
        this.clock = clock;
    }

    /** What a record's payload (its seal checked) does; a {@link BadRecord} is counted. */
    protected abstract void apply(byte[] payload, long now) throws BadRecord;

    /** Let what ended by {@code now} take effect (called after every poll, and while waiting). */
    protected void tick(long now) {
    }

    /** Records read and refused, by outcome and reason. */
    public Map<String, Long> counts() {
        return counts.entrySet().stream().collect(Collectors.toMap(Map.Entry::getKey, e -> e.getValue().get()));
    }

    protected void count(String what) {
        AtomicLong counter = counts.get(what);
        if (counter == null) {
            counter = counts.computeIfAbsent(what, k -> new AtomicLong());
            register(what, counter);
        }
        counter.incrementAndGet();
    }

    /**
     * Report every count, now and from now on, as {@code records-total} of the {@code follower}
     * group, tagged with this follower's name and the outcome (records, tombstones,
     * consumer_errors, partitions_added, bad.REASON for a refused record, and the subclass's own).
     */
    public void reportTo(PluginMetrics metrics) {
        this.metrics = metrics;
        counts.forEach(this::register);
    }

    private static Map<String, String> tags(String k1, String v1, String k2, String v2) {
        Map<String, String> tags = new LinkedHashMap<>();
        tags.put(k1, v1);
        tags.put(k2, v2);
        return tags;
    }

    private void register(String outcome, AtomicLong counter) {
        PluginMetrics m = metrics;
        if (m != null) {
            m.gauge(PluginMetrics.FOLLOWER, "records-total", "records read from " + topic + " by outcome",
                    tags("follower", name, "outcome", outcome), counter::get);
        }
    }

    /** Take one record as read from the topic (public for tests: no Kafka needed). */
    public void handle(String topic, byte[] key, byte[] value, long now) {
        count("records");
        if (value == null) {
            count("tombstones");
            return;
        }
        try {
            if (value.length > Records.MAX_RECORD_BYTES) {
                throw new BadRecord("too_large", value.length + " bytes, over " + Records.MAX_RECORD_BYTES);
            }
            Seal.Opened opened = settings.seal().open(topic, key, value);
            if (opened.payload() == null) {
                throw new BadRecord(opened.refused(), "");
            }
            apply(opened.payload(), now);
        } catch (BadRecord e) {
            if (counts.getOrDefault("bad." + e.reason(), new AtomicLong()).get() == 0) {
                LOG.warn("quota-streams: skipping a bad record of {} ({}); further ones are only counted",
                        topic, e.getMessage());
            }
            count("bad." + e.reason());
        }
    }

    /** A daemon thread running this follower, started. */
    public Thread start() {
        Thread thread = new Thread(this, "quota-streams-" + name);
        thread.setDaemon(true);
        thread.start();
        return thread;
    }

    @Override
    public void run() {
        long backoff = 100;
        while (running) {
            try (KafkaConsumer<byte[], byte[]> c = new KafkaConsumer<>(consumerConfig(),
                    new ByteArrayDeserializer(), new ByteArrayDeserializer())) {
                consumer = c;
                List<TopicPartition> partitions = waitForPartitions(c);
                c.assign(partitions);
                c.seekToBeginning(partitions);
                long checked = System.nanoTime();
                while (running) {
                    for (ConsumerRecord<byte[], byte[]> r : c.poll(Duration.ofMillis(100))) {
                        handle(r.topic(), r.key(), r.value(), clock.getAsLong());
                    }
                    tick(clock.getAsLong());
                    backoff = 100;
                    if (System.nanoTime() - checked >= PARTITION_CHECK_NS) {
                        partitions = followNewPartitions(c, partitions);
                        checked = System.nanoTime();
                    }
                }
            } catch (WakeupException | InterruptException e) {
                return;
            } catch (RuntimeException e) {
                count("consumer_errors");
                LOG.warn("quota-streams: reading {} failed ({}); retrying", topic, e.toString());
                tick(clock.getAsLong());
                sleep(backoff);
                backoff = Math.min(backoff * 2, 5000);
            }
        }
    }

    /**
     * The topic's partitions now: when it gained some since {@code assigned} (partitions added,
     * or the topic deleted and recreated with more), all are read again from their beginning,
     * as at start (what the follower holds is rebuilt from what the topic holds, and a recreated
     * topic's old partitions are new logs too); a failed look-up keeps {@code assigned} until
     * the next check.
     */
    private List<TopicPartition> followNewPartitions(KafkaConsumer<byte[], byte[]> c,
                                                     List<TopicPartition> assigned) {
        List<PartitionInfo> infos;
        try {
            infos = c.partitionsFor(topic, Duration.ofSeconds(1));
        } catch (RuntimeException e) {
            return assigned;
        }
        if (infos == null || infos.isEmpty()) {
            return assigned;
        }
        List<TopicPartition> now = infos.stream().map(p -> new TopicPartition(p.topic(), p.partition())).toList();
        List<TopicPartition> added = now.stream().filter(tp -> !assigned.contains(tp)).toList();
        if (added.isEmpty()) {
            return assigned;
        }
        LOG.info("quota-streams: {} has {} partitions now; reading them all again from their beginning", topic,
                now.size());
        c.assign(now);
        c.seekToBeginning(now);
        count("partitions_added");
        return now;
    }

    private List<TopicPartition> waitForPartitions(KafkaConsumer<byte[], byte[]> c) {
        while (running) {
            List<PartitionInfo> infos = c.partitionsFor(topic, Duration.ofSeconds(5));
            if (infos != null && !infos.isEmpty()) {
                return infos.stream().map(p -> new TopicPartition(p.topic(), p.partition())).toList();
            }
            tick(clock.getAsLong());
            sleep(500);
        }
        return List.of();
    }

    private void sleep(long ms) {
        try {
            Thread.sleep(ms);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            running = false;
        }
    }

    private Map<String, Object> consumerConfig() {
        Map<String, Object> config = new java.util.HashMap<>(settings.clientConfig());
        config.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, settings.bootstrap());
        config.put(ConsumerConfig.CLIENT_ID_CONFIG, UsageReporter.OWN_CLIENT_PREFIX + name + "-" + settings.brokerId());
        config.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, false);
        config.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
        config.put(ConsumerConfig.FETCH_MAX_WAIT_MS_CONFIG, 100);
        config.put(ConsumerConfig.METADATA_MAX_AGE_CONFIG, METADATA_MAX_AGE_MS);
        // asking for a missing topic must not create it with the broker's defaults
        config.put(ConsumerConfig.ALLOW_AUTO_CREATE_TOPICS_CONFIG, false);
        config.remove(ConsumerConfig.GROUP_ID_CONFIG);
        return config;
    }

    public void stop() {
        running = false;
        KafkaConsumer<byte[], byte[]> c = consumer;
        if (c != null) {
            c.wakeup();
        }
    }
}
