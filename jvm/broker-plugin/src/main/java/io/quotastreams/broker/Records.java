package io.quotastreams.broker;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import java.io.IOException;
import java.util.HashMap;
import java.util.Map;
import java.util.Set;

/**
 * Bounded parsing of control-topic records, with the rules and reasons of the Python readers
 * (app/contract/allocations.py, app/contract/directives.py): a value a writer never puts in a
 * record (a wrong type, a negative or non-finite amount, a limit above 10^15, a validity past an
 * hour, enforcers' limits adding up to more than 1.1 x the quota) is refused, never obeyed.
 */
public final class Records {
    /** Client quotas the workers allocate (app.engine.engine.ALLOCATED). */
    public static final Set<String> ALLOCATED = Set.of("producer_byte_rate", "consumer_byte_rate", "request_percentage");
    static final long MAX_VALIDITY_MS = 3_600_000L;
    static final double MAX_LIMIT = 1e15;
    static final int MAX_ENFORCERS = 1024;
    /** The listed limits may add up to (1 + LEND) x the quota (app.engine.allocation.LEND). */
    static final double LEND = 0.1;
    /** An enforcer holds its limit x its trim, within these (app.engine.allocation.TRIM_*). */
    static final double TRIM_MIN = 0.1;
    static final double TRIM_MAX = 3.0;
    static final int MAX_NAME = 1024;
    static final long MAX_THROTTLE_MS = Integer.MAX_VALUE;
    static final long MAX_FUTURE_MS = 86_400_000L;
    /**
     * The largest record value a follower reads (app.contract.directives.MAX_RECORD_BYTES): an
     * allocation at every other bound (1,024 enforcers, names of 1,024 characters, each escaped)
     * stays far below it; a larger one is refused unread, whatever the topic lets in.
     */
    static final int MAX_RECORD_BYTES = 262_144;
    private static final Set<String> DIRECTIVE_QUOTAS = Set.of("producer_byte_rate", "consumer_byte_rate",
            "request_percentage", "controller_mutation_rate", "connection_creation_rate", "max_connection_creation_rate");

    private static final ObjectMapper JSON = new ObjectMapper();

    private Records() {
    }

    /** The decoded JSON of a record without its seal. */
    public static JsonNode decode(byte[] payload) throws BadRecord {
        try {
            JsonNode node = JSON.readTree(payload);
            if (node == null || !node.isObject()) {
                throw new BadRecord("not_an_object", "");
            }
            return node;
        } catch (IOException e) {
            throw new BadRecord("not_json", "");
        }
    }

    public static boolean isAllocation(JsonNode record) {
        return "allocation".equals(record.path("kind").asText(null));
    }

    private static long nonNegative(JsonNode record, String name) throws BadRecord {
        JsonNode value = record.get(name);
        if (value == null || !value.isIntegralNumber() || !value.canConvertToLong() || value.asLong() < 0) {
            throw new BadRecord("wrong_type", name + " must be a non-negative integer");
        }
        return value.asLong();
    }

    private static double amount(JsonNode record, String name, double most) throws BadRecord {
        JsonNode value = record.get(name);
        if (value == null || !value.isNumber()) {
            throw new BadRecord("wrong_type", name + " must be a number");
        }
        double v = value.asDouble();
        if (!Double.isFinite(v) || v < 0 || v > most) {
            throw new BadRecord("out_of_range", name + " must be within [0, " + most + "]");
        }
        return v;
    }

    private static String name(JsonNode entity, String field) throws BadRecord {
        JsonNode value = entity.get(field);
        if (value == null) {
            return "";
        }
        if (!value.isTextual() || value.asText().length() > MAX_NAME) {
            throw new BadRecord("bad_entity", "entity." + field + " must be a string");
        }
        return value.asText();
    }

    /** Validate an allocation record (app.subscriber.allocations.parse_allocation). */
    public static Allocation allocation(JsonNode record) throws BadRecord {
        if (!isAllocation(record)) {
            throw new BadRecord("not_an_allocation", "");
        }
        JsonNode v = record.get("v");
        if (v == null || !v.isNumber() || v.asDouble() != 1.0) {
            throw new BadRecord("wrong_version", String.valueOf(v));
        }
        String quota = record.path("quota").isTextual() ? record.get("quota").asText() : null;
        if (quota == null || !ALLOCATED.contains(quota)) {
            throw new BadRecord("bad_quota", String.valueOf(record.get("quota")));
        }
        JsonNode entity = record.get("entity");
        if (entity == null || !entity.isObject()) {
            throw new BadRecord("bad_entity", "entity must be an object");
        }
        String user = name(entity, "user");
        String clientId = name(entity, "client_id");
        long ts = nonNegative(record, "ts");
        long validUntil = nonNegative(record, "valid_until");
        if (!(ts < validUntil && validUntil - ts <= MAX_VALIDITY_MS)) {
            throw new BadRecord("bad_validity", "valid_until must be within (ts, ts + " + MAX_VALIDITY_MS + "]");
        }
        double limit = amount(record, "limit", MAX_LIMIT);
        double others = amount(record, "others", limit);
        JsonNode rows = record.get("enforcers");
        if (rows == null || !rows.isArray() || rows.size() > MAX_ENFORCERS) {
            throw new BadRecord("bad_enforcers", "enforcers must be a list of at most " + MAX_ENFORCERS);
        }
        Map<Long, Double> shares = new HashMap<>();
        Map<Long, Double> enforcers = new HashMap<>();
        for (JsonNode row : rows) {
            if (!row.isObject()) {
                throw new BadRecord("bad_enforcers", "an enforcer entry must be an object");
            }
            long enforcer = nonNegative(row, "enforcer");
            double share = amount(row, "limit", limit);
            shares.put(enforcer, share);
            enforcers.put(enforcer, share * trim(row));
        }
        double sum = shares.values().stream().mapToDouble(Double::doubleValue).sum();
        if (sum > limit * (1 + LEND + 1e-9)) {
            throw new BadRecord("over_quota", "the enforcers' limits add up to more than (1 + " + LEND + ") x the quota");
        }
        return new Allocation(quota, user, clientId, ts, validUntil, limit, others, Map.copyOf(enforcers));
    }

    /** An enforcer's trim (app.engine.allocation.trimmed): 1 when the record has none. */
    private static double trim(JsonNode row) throws BadRecord {
        JsonNode value = row.get("trim");
        if (value == null) {
            return 1.0;
        }
        if (!value.isNumber() || !(value.asDouble() >= TRIM_MIN && value.asDouble() <= TRIM_MAX)) {
            throw new BadRecord("out_of_range", "trim must be within [" + TRIM_MIN + ", " + TRIM_MAX + "]");
        }
        return value.asDouble();
    }

    /**
     * Check a throttle directive with the subscriber's bounds (the plugin obeys allocations only:
     * a quota callback sets limits, it cannot impose a throttle until a given time).
     */
    public static void checkDirective(JsonNode record) throws BadRecord {
        JsonNode v = record.get("v");
        if (v == null || !v.isNumber() || v.asDouble() != 1.0) {
            throw new BadRecord("wrong_version", String.valueOf(v));
        }
        long ts = nonNegative(record, "ts");
        long until = nonNegative(record, "until");
        if (until - ts > MAX_THROTTLE_MS) {
            throw new BadRecord("until_out_of_range", "until is " + (until - ts) + " ms after ts");
        }
        String scope = record.path("scope").asText("");
        if (!scope.equals("broker") && !scope.equals("cluster")) {
            throw new BadRecord("bad_scope", scope);
        }
        if (scope.equals("broker")) {
            nonNegative(record, "broker");
        }
        JsonNode quota = record.get("quota");
        if (quota == null || !quota.isTextual() || !DIRECTIVE_QUOTAS.contains(quota.asText())) {
            throw new BadRecord("unknown_quota", String.valueOf(quota));
        }
        if (!record.path("entity").isObject()) {
            throw new BadRecord("bad_entity", "entity must be an object");
        }
    }

    /** The client quotas a config record may set, and the ones Kafka holds as integers. */
    static final Set<String> CLIENT_QUOTAS = Set.of("producer_byte_rate", "consumer_byte_rate",
            "request_percentage", "controller_mutation_rate");
    private static final Set<String> INTEGRAL = Set.of("producer_byte_rate", "consumer_byte_rate");
    static final String DEFAULT = "<default>";

    /**
     * A validated {@code quota_config} record of a client entity (app.engine.configs
     * .parse_config_record): {@code user} and {@code clientId} are null where the entity has no
     * such part, {@code "<default>"} for Kafka's default entity; a quota's value is null when the
     * record removes it.
     */
    public record Config(long ts, String user, String clientId, Map<String, Double> quotas) {}

    /**
     * Validate a quota config record; null for one of an IP or broker entity (connection
     * quotas, which a quota callback cannot hold).
     */
    public static Config config(JsonNode record) throws BadRecord {
        if (!"quota_config".equals(record.path("type").asText(null))) {
            throw new BadRecord("not_a_config", "");
        }
        JsonNode v = record.get("v");
        if (v == null || !v.isNumber() || v.asDouble() != 1.0) {
            throw new BadRecord("wrong_version", String.valueOf(v));
        }
        long ts = nonNegative(record, "ts");
        JsonNode entity = record.get("entity");
        JsonNode quotas = record.get("quotas");
        if (entity == null || !entity.isObject() || entity.isEmpty()) {
            throw new BadRecord("bad_entity", "entity must be a non-empty object");
        }
        if (quotas == null || !quotas.isObject() || quotas.isEmpty()) {
            throw new BadRecord("bad_quotas", "quotas must be a non-empty object");
        }
        if (entity.has("ip") || entity.has("broker")) {
            return null;
        }
        java.util.Iterator<String> keys = entity.fieldNames();
        while (keys.hasNext()) {
            String key = keys.next();
            if (!key.equals("user") && !key.equals("client_id")) {
                throw new BadRecord("bad_entity", "unknown entity key " + key);
            }
        }
        String user = entity.has("user") ? configName(entity, "user") : null;
        String clientId = entity.has("client_id") ? configName(entity, "client_id") : null;
        Map<String, Double> parsed = new HashMap<>();
        java.util.Iterator<Map.Entry<String, JsonNode>> fields = quotas.fields();
        while (fields.hasNext()) {
            Map.Entry<String, JsonNode> field = fields.next();
            String key = field.getKey();
            if (!CLIENT_QUOTAS.contains(key)) {
                throw new BadRecord("bad_quotas", "unknown quota " + key);
            }
            JsonNode value = field.getValue();
            if (value.isNull()) {
                parsed.put(key, null);
                continue;
            }
            if (!value.isNumber() || !Double.isFinite(value.asDouble()) || value.asDouble() <= 0
                    || value.asDouble() > MAX_LIMIT) {
                throw new BadRecord("out_of_range", key + " must be a number in (0, " + MAX_LIMIT + "]");
            }
            double d = value.asDouble();
            if (INTEGRAL.contains(key)) {
                if (Math.abs(d - Math.rint(d)) > 1e-6) {
                    throw new BadRecord("out_of_range", key + " must be an integer");
                }
                d = Math.rint(d);
            }
            parsed.put(key, d);
        }
        return new Config(ts, user, clientId, parsed);
    }

    private static String configName(JsonNode entity, String field) throws BadRecord {
        JsonNode value = entity.get(field);
        if (value == null || !value.isTextual() || value.asText().isEmpty() || value.asText().length() > MAX_NAME) {
            throw new BadRecord("bad_entity", "entity." + field + " must be a non-empty string");
        }
        return value.asText();
    }

    /** The record's {@code ts}, for the reader's "more than a day ahead" check. */
    public static long ts(JsonNode record) throws BadRecord {
        return nonNegative(record, "ts");
    }
}
