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
    static final int MAX_NAME = 1024;
    static final long MAX_THROTTLE_MS = Integer.MAX_VALUE;
    static final long MAX_FUTURE_MS = 86_400_000L;
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
        Map<Long, Double> enforcers = new HashMap<>();
        double sum = 0;
        for (JsonNode row : rows) {
            if (!row.isObject()) {
                throw new BadRecord("bad_enforcers", "an enforcer entry must be an object");
            }
            long enforcer = nonNegative(row, "enforcer");
            double share = amount(row, "limit", limit);
            Double old = enforcers.put(enforcer, share);
            sum += share - (old == null ? 0 : old);
        }
        if (sum > limit * (1 + LEND + 1e-9)) {
            throw new BadRecord("over_quota", "the enforcers' limits add up to more than (1 + " + LEND + ") x the quota");
        }
        return new Allocation(quota, user, clientId, ts, validUntil, limit, others, Map.copyOf(enforcers));
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

    /** The record's {@code ts}, for the reader's "more than a day ahead" check. */
    public static long ts(JsonNode record) throws BadRecord {
        return nonNegative(record, "ts");
    }
}
