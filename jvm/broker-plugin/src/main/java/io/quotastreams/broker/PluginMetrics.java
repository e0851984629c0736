package io.quotastreams.broker;

import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.function.LongSupplier;
import org.apache.kafka.common.MetricName;
import org.apache.kafka.common.metrics.Gauge;
import org.apache.kafka.common.metrics.JmxReporter;
import org.apache.kafka.common.metrics.KafkaMetricsContext;
import org.apache.kafka.common.metrics.MetricConfig;
import org.apache.kafka.common.metrics.Metrics;
import org.apache.kafka.common.metrics.MetricsReporter;
import org.apache.kafka.common.utils.Time;

/**
 * The plugin's own counters as Kafka metrics under the JMX domain {@value #DOMAIN}, so the JMX
 * exporter that scrapes a broker scrapes them too (deploy/broker-plugin/jmx-exporter.yaml names
 * them for Prometheus). Every metric is a gauge over state the plugin keeps anyway: reading one
 * costs the request path nothing. Bean names: {@code DOMAIN:type=GROUP[,tag=value...]}, one
 * attribute per metric name.
 */
public final class PluginMetrics implements AutoCloseable {
    static final String DOMAIN = "io.quotastreams.broker";
    /** the callback's allocations: held, in force (valid), on their static split (fail-safe) */
    static final String CALLBACK = "callback";
    /** each follower's records by outcome (tags follower, outcome) */
    static final String FOLLOWER = "follower";
    /** the reporter's usage records: written, dropped, waiting */
    static final String REPORTER = "reporter";

    private final Metrics metrics;

    public PluginMetrics() {
        this(List.of(new JmxReporter()));
    }

    PluginMetrics(List<MetricsReporter> reporters) {
        metrics = new Metrics(new MetricConfig(), reporters, Time.SYSTEM, new KafkaMetricsContext(DOMAIN));
    }

    /**
     * Register the gauge {@code name} of {@code group}, its tags in the order given (the bean's
     * key order, which the exporter's rules match), read from {@code value}; once per name and tags.
     */
    public void gauge(String group, String name, String description, Map<String, String> tags, LongSupplier value) {
        MetricName metric = metrics.metricName(name, group, description, new LinkedHashMap<>(tags));
        metrics.addMetricIfAbsent(metric, null, (Gauge<Long>) (config, now) -> value.getAsLong());
    }

    /** Unregister every metric (the broker closes the plugin). */
    @Override
    public void close() {
        metrics.close();
    }
}
