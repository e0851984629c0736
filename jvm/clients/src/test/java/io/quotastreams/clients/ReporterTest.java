package io.quotastreams.clients;

import static org.junit.jupiter.api.Assertions.assertEquals;

import java.io.ByteArrayOutputStream;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.util.Map;
import java.util.concurrent.atomic.AtomicLong;
import org.junit.jupiter.api.Test;

class ReporterTest {

    @Test
    void oneLinePerSecondThenTheTotals() {
        AtomicLong clock = new AtomicLong(5_000_000_000L);
        ByteArrayOutputStream buffer = new ByteArrayOutputStream();
        Reporter reporter = new Reporter("p-\"java\"", new PrintStream(buffer, true,
            StandardCharsets.UTF_8), clock::get, clock.get());
        reporter.add("bytes", 1000);
        reporter.add("records", 1);
        clock.addAndGet(2_500_000_000L);  // 2.5 s: seconds 0 and 1 have ended
        reporter.add("bytes", 500);
        reporter.finish(Map.of());
        String[] lines = buffer.toString(StandardCharsets.UTF_8).split("\n");
        assertEquals("{\"name\": \"p-\\\"java\\\"\", \"t\": 0, \"bytes\": 1000, \"records\": 1}",
            lines[0]);
        assertEquals("{\"name\": \"p-\\\"java\\\"\", \"t\": 1}", lines[1]);
        assertEquals("{\"name\": \"p-\\\"java\\\"\", \"final\": true, \"seconds\": 2.5, "
            + "\"bytes\": 1500, \"records\": 1}", lines[2]);
        assertEquals(3, lines.length);
    }

    @Test
    void secondsCountFromTheEpochWhenGiven() {
        // 2.5 s of wall clock since the epoch: second 0 began 2.5 s before this nanoTime reading
        assertEquals(7_500_000_000L, Main.start(1000.0, 10_000_000_000L, 1_002_500L));
        assertEquals(10_000_000_000L, Main.start(-1, 10_000_000_000L, 1_002_500L));
    }
}
