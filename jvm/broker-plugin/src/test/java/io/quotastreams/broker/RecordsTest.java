package io.quotastreams.broker;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;

import java.nio.charset.StandardCharsets;
import org.junit.jupiter.api.Test;

class RecordsTest {
    static String allocation(String quota, long ts, long validUntil, String limit, String enforcers) {
        return "{\"v\":1,\"kind\":\"allocation\",\"ts\":" + ts + ",\"scope\":\"cluster\","
                + "\"entity\":{\"user\":\"\",\"client_id\":\"loader\"},\"quota\":\"" + quota + "\","
                + "\"limit\":" + limit + ",\"window_ms\":11000,\"config_level\":\"/config/clients/loader\","
                + "\"valid_until\":" + validUntil + ",\"others\":30000.0,\"enforcers\":[" + enforcers + "]}";
    }

    static final String THREE = "{\"enforcer\":1,\"limit\":200000.0,\"usage\":1.0,\"saturated\":true},"
            + "{\"enforcer\":2,\"limit\":250000,\"usage\":1.0,\"saturated\":true},"
            + "{\"enforcer\":3,\"limit\":150000.0,\"usage\":1.0,\"saturated\":false}";

    static Allocation parse(String json) throws BadRecord {
        return Records.allocation(Records.decode(json.getBytes(StandardCharsets.UTF_8)));
    }

    static String reason(String json) {
        return assertThrows(BadRecord.class, () -> parse(json)).reason();
    }

    @Test
    void parsesAnAllocation() throws BadRecord {
        Allocation a = parse(allocation("producer_byte_rate", 1000, 6000, "600000", THREE));
        assertEquals("", a.user());
        assertEquals("loader", a.clientId());
        assertEquals(6000, a.validUntil());
        assertEquals(250000.0, a.limitFor(2));
        assertEquals(30000.0, a.limitFor(7));
    }

    @Test
    void anEnforcerHoldsItsAllocationTimesItsTrimAndTheSumIsTheAllocations() throws BadRecord {
        String trimmed = "{\"enforcer\":1,\"limit\":300000.0,\"trim\":0.5},"
                + "{\"enforcer\":2,\"limit\":300000.0,\"trim\":2.0}";
        Allocation a = parse(allocation("producer_byte_rate", 1000, 6000, "600000", trimmed));
        assertEquals(150000.0, a.limitFor(1));
        assertEquals(600000.0, a.limitFor(2));  // over the quota's 1.1x: the allocations are not
        assertEquals("out_of_range", reason(allocation("producer_byte_rate", 1000, 6000, "600000",
                "{\"enforcer\":1,\"limit\":300000.0,\"trim\":3.5}")));
        assertEquals("out_of_range", reason(allocation("producer_byte_rate", 1000, 6000, "600000",
                "{\"enforcer\":1,\"limit\":300000.0,\"trim\":\"x\"}")));
    }

    @Test
    void refusesAbsurdValues() {
        assertEquals("out_of_range", reason(allocation("producer_byte_rate", 1000, 6000, "1e16", "")));
        assertEquals("out_of_range", reason(allocation("producer_byte_rate", 1000, 6000, "-1", "")));
        assertEquals("bad_validity", reason(allocation("producer_byte_rate", 1000, 1000 + 3_600_001, "600000", "")));
        assertEquals("bad_validity", reason(allocation("producer_byte_rate", 1000, 1000, "600000", "")));
        assertEquals("over_quota", reason(allocation("producer_byte_rate", 1000, 6000, "500000", THREE)));
        assertEquals("out_of_range", reason(allocation("producer_byte_rate", 1000, 6000, "100000", THREE)));
        assertEquals("bad_quota", reason(allocation("controller_mutation_rate", 1000, 6000, "600000", "")));
        assertEquals("wrong_type", reason(allocation("producer_byte_rate", 1000, 6000, "true", "")));
        assertEquals("wrong_type", reason(allocation("producer_byte_rate", 1000, 6000, "600000", THREE)
                .replace("\"ts\":1000", "\"ts\":1000.5")));
        assertEquals("wrong_type", reason(allocation("producer_byte_rate", 1000, 6000, "600000", "{\"enforcer\":-1,\"limit\":1}")));
        assertEquals("bad_entity", reason(allocation("producer_byte_rate", 1000, 6000, "600000", "")
                .replace("\"loader\"", "\"" + "x".repeat(1025) + "\"")));
        assertEquals("bad_enforcers", reason(allocation("producer_byte_rate", 1000, 6000, "600000",
                String.join(",", java.util.Collections.nCopies(1025, "{\"enforcer\":1,\"limit\":1}")))));
        assertEquals("wrong_version", reason(allocation("producer_byte_rate", 1000, 6000, "600000", "").replace("\"v\":1", "\"v\":2")));
        assertEquals("not_json", assertThrows(BadRecord.class, () -> Records.decode("{\"v\":".getBytes(StandardCharsets.UTF_8))).reason());
    }

    @Test
    void checksDirectivesWithTheSubscribersBounds() throws BadRecord {
        String ok = "{\"v\":1,\"ts\":1000,\"until\":2000,\"scope\":\"cluster\",\"quota\":\"producer_byte_rate\","
                + "\"action\":\"throttle\",\"entity\":{\"user\":\"a\",\"client_id\":\"\"}}";
        Records.checkDirective(Records.decode(ok.getBytes(StandardCharsets.UTF_8)));
        String far = ok.replace("\"until\":2000", "\"until\":" + (1000L + Integer.MAX_VALUE + 1));
        assertEquals("until_out_of_range", assertThrows(BadRecord.class,
                () -> Records.checkDirective(Records.decode(far.getBytes(StandardCharsets.UTF_8)))).reason());
        String broker = ok.replace("\"cluster\"", "\"broker\"");
        assertEquals("wrong_type", assertThrows(BadRecord.class,
                () -> Records.checkDirective(Records.decode(broker.getBytes(StandardCharsets.UTF_8)))).reason());
    }
}
