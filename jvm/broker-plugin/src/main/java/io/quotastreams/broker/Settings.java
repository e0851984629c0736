package io.quotastreams.broker;

import java.util.HashMap;
import java.util.Map;
import org.apache.kafka.common.config.ConfigException;

/**
 * The plugin's settings, read from the broker's server.properties (docs/broker-plugin.md). A
 * setting a broker cannot run with is a {@link ConfigException}, which stops the broker's start
 * with its one-line message.
 */
public record Settings(String bootstrap, String controlTopic, String requestTopic, String configTopic,
                       boolean clusterScope, Seal seal, long brokerId, int brokers, long failSafeMs,
                       long usageIntervalMs, int usageQueueRecords, Map<String, Object> clientConfig) {
    public static final String PREFIX = "quota.streams.";
    static final String CLIENT_PREFIX = PREFIX + "client.";

    public static Settings from(Map<String, ?> configs) {
        String bootstrap = text(configs, PREFIX + "bootstrap.servers", ownListener(configs));
        Object node = configs.containsKey("node.id") ? configs.get("node.id") : configs.get("broker.id");
        long brokerId = number(node, "node.id", 0, Integer.MAX_VALUE, -1);
        Map<String, Object> client = new HashMap<>();
        configs.forEach((k, v) -> {
            if (k.startsWith(CLIENT_PREFIX)) {
                client.put(k.substring(CLIENT_PREFIX.length()), v);
            }
        });
        Seal seal;
        try {
            seal = Seal.parse(text(configs, PREFIX + "signing.keys", ""));
        } catch (IllegalArgumentException e) {
            throw new ConfigException(PREFIX + "signing.keys: " + e.getMessage());
        }
        String scope = text(configs, PREFIX + "scope", "cluster");
        if (!scope.equals("cluster") && !scope.equals("broker")) {
            throw new ConfigException(PREFIX + "scope must be cluster or broker, got " + scope);
        }
        return new Settings(bootstrap,
                text(configs, PREFIX + "control.topic", "quota.directives"),
                text(configs, PREFIX + "request.topic", "quota.events.request"),
                text(configs, PREFIX + "config.topic", "quota.configs"),
                scope.equals("cluster"), seal, brokerId,
                (int) number(configs.get(PREFIX + "brokers"), PREFIX + "brokers", 1, 100_000, -1),
                number(configs.get(PREFIX + "fail.safe.ms"), PREFIX + "fail.safe.ms", 0, Records.MAX_VALIDITY_MS * 24, 3_600_000L),
                number(configs.get(PREFIX + "usage.interval.ms"), PREFIX + "usage.interval.ms", 100, 60_000, 1000),
                (int) number(configs.get(PREFIX + "usage.queue.records"), PREFIX + "usage.queue.records", 1, 1_000_000, 1000),
                Map.copyOf(client));
    }

    /**
     * The broker's own inter-broker listener (its advertised address), where the plugin's
     * clients connect by default: the control and event topics are then on this cluster. Null
     * when it cannot be told.
     */
    static String ownListener(Map<String, ?> configs) {
        Object nameSetting = configs.get("inter.broker.listener.name");
        String name = nameSetting == null ? "PLAINTEXT" : nameSetting.toString().strip();
        Object listeners = configs.containsKey("advertised.listeners") ? configs.get("advertised.listeners") : configs.get("listeners");
        for (String entry : (listeners == null ? "" : listeners.toString()).split(",")) {
            String[] parts = entry.strip().split("://", 2);
            if (parts.length == 2 && parts[0].equalsIgnoreCase(name) && !parts[1].startsWith(":")) {
                return parts[1];
            }
        }
        return null;
    }

    private static String text(Map<String, ?> configs, String name, String fallback) {
        Object value = configs.get(name);
        if (value == null || value.toString().isBlank()) {
            if (fallback == null) {
                throw new ConfigException("the quota-streams plugin needs " + name);
            }
            return fallback;
        }
        return value.toString().strip();
    }

    private static long number(Object value, String name, long least, long most, long fallback) {
        if (value == null || value.toString().isBlank()) {
            if (fallback < 0) {
                throw new ConfigException("the quota-streams plugin needs " + name);
            }
            return fallback;
        }
        long n;
        try {
            n = Long.parseLong(value.toString().strip());
        } catch (NumberFormatException e) {
            throw new ConfigException(name + " must be an integer, got " + value);
        }
        if (n < least || n > most) {
            throw new ConfigException(name + " must be within [" + least + ", " + most + "], got " + n);
        }
        return n;
    }
}
