package io.quotastreams.broker;

import java.lang.reflect.Field;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.ArrayBlockingQueue;
import java.util.concurrent.BlockingQueue;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;
import java.util.function.LongSupplier;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.Producer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.MetricName;
import org.apache.kafka.common.metrics.KafkaMetric;
import org.apache.kafka.common.metrics.MetricsReporter;
import org.apache.kafka.common.metrics.stats.Rate;
import org.apache.kafka.common.metrics.stats.SampledStat;
import org.apache.kafka.common.serialization.ByteArraySerializer;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * A {@code metric.reporters} plugin that writes the broker's per-client usage to the request
 * topic: just after each {@code usage.interval.ms} of the wall clock ends it reads the samples
 * of each client's quota sensors (the Produce and Fetch {@code byte-rate}, the Request
 * {@code request-time} Kafka's quota managers charge, and the {@code throttle-time} of each),
 * and a background producer writes what they gained as pre-aggregated request events stamped
 * with the interval's second (UsageAggregator). Reading on the clock's seconds puts every
 * broker's events of a second on the workers before any of the next second. Records wait in a
 * bounded queue; when it is full a record is dropped and counted, so a slow event topic never
 * holds the broker up.
 *
 * <p>Kafka offers no public way to read a sensor's samples: they are read by reflection from
 * kafka-clients' Rate, SampledStat and its Sample (checked at start; without them nothing is
 * written and the broker says so once).
 */
public final class UsageReporter implements MetricsReporter {
    private static final Logger LOG = LoggerFactory.getLogger(UsageReporter.class);
    /** each quota type's quota sensor metric, by Kafka's group name */
    private static final Map<String, String> USAGE_METRICS = Map.of(
            "Produce", "byte-rate", "Fetch", "byte-rate", "Request", "request-time");
    static final String THROTTLE_METRIC = "throttle-time";
    static final String OWN_CLIENT_PREFIX = "quota-streams-plugin-";
    /** how long after an interval ends its sensors are read: the requests handled at its end are in */
    static final long READ_DELAY_MS = 50;
    /** the longest wait between two tries to make the usage producer */
    static final long MAX_BACKOFF_MS = 30_000;

    /** A metric the reporter reads: whose sensor it is, and which. */
    record Read(UsageAggregator.Source source, UsageAggregator.Kind kind) {}

    private final Map<MetricName, KafkaMetric> sensors = new ConcurrentHashMap<>();
    /** the sensors read so far, by the reader thread alone */
    private final Map<MetricName, Read> known = new HashMap<>();
    private final AtomicLong dropped = new AtomicLong();
    private final AtomicLong sent = new AtomicLong();
    private final AtomicLong producerErrors = new AtomicLong();
    private Settings settings;
    private UsageAggregator aggregator;
    private BlockingQueue<byte[]> queue;
    private volatile boolean running;
    private Thread reader;
    private Thread sender;
    private PluginMetrics metrics;
    private Field rateStat;
    private Field statSamples;
    private Field metricLock;
    private Field sampleStart;
    private Field sampleValue;
    private Field sampleCount;

    @Override
    public void configure(Map<String, ?> configs) {
        if (prepare(configs)) {
            metrics = new PluginMetrics();
            reportTo(metrics);
            running = true;
            reader = daemon(this::readLoop, "quota-streams-usage-reader");
            sender = startSender(KafkaProducer::new);
        }
    }

    /**
     * The reporter's gauges: usage records written, dropped, waiting; client sensors followed;
     * failed tries to make its producer.
     */
    void reportTo(PluginMetrics m) {
        m.gauge(PluginMetrics.REPORTER, "usage-records-written-total", "usage records the event topic acknowledged",
                Map.of(), sent::get);
        m.gauge(PluginMetrics.REPORTER, "usage-records-dropped-total",
                "usage records dropped: the queue full or the write failed", Map.of(), dropped::get);
        m.gauge(PluginMetrics.REPORTER, "usage-records-queued", "usage records waiting for the producer",
                Map.of(), () -> queue.size());
        m.gauge(PluginMetrics.REPORTER, "client-sensors", "client quota sensors the reporter reads",
                Map.of(), () -> sensors.size());
        m.gauge(PluginMetrics.REPORTER, "producer-errors-total", "failed tries to make the usage producer",
                Map.of(), producerErrors::get);
    }

    /** The settings and the reflective access to Kafka's samples; false when that is missing. */
    boolean prepare(Map<String, ?> configs) {
        settings = Settings.from(configs);
        aggregator = new UsageAggregator(settings.brokerId());
        queue = new ArrayBlockingQueue<>(settings.usageQueueRecords());
        try {
            rateStat = Rate.class.getDeclaredField("stat");
            statSamples = SampledStat.class.getDeclaredField("samples");
            metricLock = KafkaMetric.class.getDeclaredField("lock");
            Class<?> sample = Class.forName(SampledStat.class.getName() + "$Sample");
            sampleStart = sample.getDeclaredField("startTimeMs");
            sampleValue = sample.getDeclaredField("value");
            sampleCount = sample.getDeclaredField("eventCount");
            for (Field f : List.of(rateStat, statSamples, metricLock, sampleStart, sampleValue, sampleCount)) {
                f.setAccessible(true);
            }
        } catch (ReflectiveOperationException | RuntimeException e) {
            LOG.error("quota-streams: cannot read Kafka's quota samples ({}); no usage is written", e.toString());
            return false;
        }
        return true;
    }

    private static Thread daemon(Runnable body, String name) {
        Thread t = new Thread(body, name);
        t.setDaemon(true);
        t.start();
        return t;
    }

    /** Records dropped because the queue was full, and records the producer acknowledged. */
    public long dropped() {
        return dropped.get();
    }

    public long sent() {
        return sent.get();
    }

    /** What a metric is to the reporter, or null when it reads it not. */
    static Read source(MetricName name) {
        String usage = USAGE_METRICS.get(name.group());
        Map<String, String> tags = name.tags();
        if (usage == null || !tags.keySet().equals(Set.of("user", "client-id"))) {
            return null;
        }
        UsageAggregator.Kind kind = name.name().equals(usage) ? UsageAggregator.Kind.USAGE
                : name.name().equals(THROTTLE_METRIC) ? UsageAggregator.Kind.THROTTLE : null;
        String clientId = tags.get("client-id");
        if (kind == null || clientId.startsWith(OWN_CLIENT_PREFIX)) {
            return null;
        }
        return new Read(new UsageAggregator.Source(name.group(), tags.get("user"), clientId), kind);
    }

    @Override
    public void init(List<KafkaMetric> metrics) {
        metrics.forEach(this::metricChange);
    }

    @Override
    public void metricChange(KafkaMetric metric) {
        if (source(metric.metricName()) != null) {
            sensors.put(metric.metricName(), metric);
        }
    }

    @Override
    public void metricRemoval(KafkaMetric metric) {
        sensors.remove(metric.metricName());
    }

    /** A metric's samples: a Rate's (the quota sensors) or a sampled stat's own (throttle-time's Avg). */
    private List<UsageAggregator.Sample> samples(KafkaMetric metric) throws ReflectiveOperationException {
        Object measurable = metric.measurable();
        SampledStat stat = measurable instanceof Rate ? (SampledStat) rateStat.get(measurable)
                : measurable instanceof SampledStat sampled ? sampled : null;
        if (stat == null) {
            return List.of();
        }
        List<UsageAggregator.Sample> out = new ArrayList<>();
        synchronized (metricLock.get(metric)) {
            for (Object s : (List<?>) statSamples.get(stat)) {
                out.add(new UsageAggregator.Sample(sampleStart.getLong(s), sampleValue.getDouble(s),
                        sampleCount.getLong(s)));
            }
        }
        return out;
    }

    /** How long to sleep from {@code now} until {@code READ_DELAY_MS} after the interval ends. */
    static long untilNextRead(long now, long interval) {
        return interval - Math.floorMod(now - READ_DELAY_MS, interval);
    }

    /** The second a look due at {@code due} stamps its events with: the one holding its interval's middle. */
    static long second(long due, long interval) {
        return Math.floorDiv(due - interval / 2, 1000) * 1000;
    }

    /** Sleeps the reader thread (a test's advances its clock). */
    interface Sleeper {
        void sleep(long ms) throws InterruptedException;
    }

    /**
     * When the reader looks, and the second each look stamps: a look is due {@code READ_DELAY_MS}
     * after each interval ends and is stamped with the second of the interval it is due for,
     * however late its thread wakes. Stamped by the wake-up instead, a look woken late into the
     * next second and the next look on time would stamp one second twice.
     */
    static final class Looks {
        private final LongSupplier clock;
        private final Sleeper sleeper;
        private final long interval;

        Looks(LongSupplier clock, Sleeper sleeper, long interval) {
            this.clock = clock;
            this.sleeper = sleeper;
            this.interval = interval;
        }

        /** Sleep until the next look is due; the second it stamps. */
        long next() throws InterruptedException {
            long now = clock.getAsLong();
            long due = now + untilNextRead(now, interval);
            sleeper.sleep(due - now);
            return second(due, interval);
        }
    }

    private void readLoop() {
        long[] reportedDrops = {0, 0};
        Looks looks = new Looks(System::currentTimeMillis, Thread::sleep, settings.usageIntervalMs());
        while (running) {
            long second;
            try {
                second = looks.next();
            } catch (InterruptedException e) {
                return;
            }
            List<byte[]> records;
            try {
                records = read(second);
            } catch (ReflectiveOperationException e) {
                LOG.error("quota-streams: reading a quota sensor failed ({}); no usage is written", e.toString());
                running = false;
                return;
            }
            enqueue(records);
            reportedDrops = reportDrops(reportedDrops);
        }
    }

    /**
     * One look at every client's sensors: the records of the request events for what they gained
     * since the last look, stamped {@code second} (the reader thread's work each interval).
     */
    List<byte[]> read(long second) throws ReflectiveOperationException {
        known.keySet().removeIf(name -> {
            if (!sensors.containsKey(name)) {
                Read gone = known.get(name);
                aggregator.forget(gone.source(), gone.kind());
                return true;
            }
            return false;
        });
        for (KafkaMetric metric : sensors.values()) {
            Read read = known.computeIfAbsent(metric.metricName(), UsageReporter::source);
            try {
                aggregator.observe(read.source(), read.kind(), samples(metric));
            } catch (RuntimeException e) {  // this sensor this time; its gain is read next time
                LOG.warn("quota-streams: reading the sensor of {} failed ({})", read.source(), e.toString());
            }
        }
        return aggregator.drain(second);
    }

    /** Hand records to the sender; past the queue's bound a record is dropped and counted. */
    void enqueue(List<byte[]> records) {
        for (byte[] record : records) {
            if (!queue.offer(record)) {
                dropped.incrementAndGet();
            }
        }
    }

    /** Say in the broker's log, at most once a minute, how many usage records were lost. */
    private long[] reportDrops(long[] reported) {
        long now = System.currentTimeMillis();
        long lost = dropped.get();
        if (lost > reported[0] && now - reported[1] >= 60_000) {
            LOG.warn("quota-streams: {} usage records dropped so far (queue full or write failed), {} written",
                    lost, sent.get());
            return new long[] {lost, now};
        }
        return reported;
    }

    /** Makes the sender's producer (a test's makes a MockProducer). */
    interface Producers {
        Producer<byte[], byte[]> create(Map<String, Object> config);
    }

    /**
     * The sender thread's work: a producer, and each queued record written to this broker's
     * partition of the request topic. A producer that cannot be made (a bootstrap address that
     * does not resolve yet, a certificate not yet mounted) is tried again with a backoff up to
     * {@code MAX_BACKOFF_MS}, counted in {@code producer_errors}; meanwhile records wait in the
     * queue and past its bound are dropped and counted, as on any failed write.
     */
    Thread startSender(Producers producers) {
        running = true;
        return daemon(() -> sendLoop(producers), "quota-streams-usage-sender");
    }

    private void sendLoop(Producers producers) {
        long backoff = 100;
        while (running) {
            try (Producer<byte[], byte[]> producer = producers.create(producerConfig())) {
                backoff = 100;
                send(producer);
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
                return;
            } catch (RuntimeException e) {
                if (producerErrors.getAndIncrement() == 0) {
                    LOG.warn("quota-streams: cannot make the usage producer ({}); retrying, later failures only counted",
                            e.toString());
                }
                try {
                    Thread.sleep(backoff);
                } catch (InterruptedException stop) {
                    return;
                }
                backoff = Math.min(backoff * 2, MAX_BACKOFF_MS);
            }
        }
    }

    private Map<String, Object> producerConfig() {
        Map<String, Object> config = new HashMap<>(settings.clientConfig());
        config.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, settings.bootstrap());
        config.put(ProducerConfig.CLIENT_ID_CONFIG, OWN_CLIENT_PREFIX + "usage-" + settings.brokerId());
        config.put(ProducerConfig.LINGER_MS_CONFIG, 0);
        config.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class);
        config.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class);
        return config;
    }

    private void send(Producer<byte[], byte[]> producer) throws InterruptedException {
        byte[] key = ("broker/" + settings.brokerId()).getBytes(StandardCharsets.UTF_8);
        Integer partition = null;
        while (running) {
            byte[] value = queue.poll(200, TimeUnit.MILLISECONDS);
            if (value == null) {
                continue;
            }
            try {
                if (partition == null) {
                    partition = (int) (settings.brokerId() % producer.partitionsFor(settings.requestTopic()).size());
                }
                producer.send(new ProducerRecord<>(settings.requestTopic(), partition, key, value), (meta, error) -> {
                    if (error == null) {
                        sent.incrementAndGet();
                    } else {
                        dropped.incrementAndGet();
                    }
                });
            } catch (RuntimeException e) {
                dropped.incrementAndGet();
                LOG.warn("quota-streams: writing usage to {} failed ({})", settings.requestTopic(), e.toString());
            }
        }
    }

    @Override
    public void close() {
        running = false;
        if (reader != null) {
            reader.interrupt();
        }
        if (metrics != null) {
            metrics.close();
        }
    }
}
