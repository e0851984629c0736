package io.quotastreams.clients;

import java.io.PrintStream;
import java.util.Map;
import java.util.TreeMap;
import java.util.function.LongSupplier;

/**
 * One JSON line per second of run time, as app/clients/report.py prints them:
 * {@code {"name": ..., "t": <second>, "bytes": ..., "records": ...}}, the counters of that
 * second; then a last line with {@code "final": true} and the totals. Seconds count from the
 * start, or from {@code --epoch} (wall-clock seconds), so clients started together line up. Counters are added from
 * the client's callback thread and the main thread alike, so every method is synchronized.
 */
public final class Reporter {

    private final String name;
    private final PrintStream out;
    private final LongSupplier nanos;
    private final long start;
    private long second;
    private Map<String, Double> current = new TreeMap<>();
    private final Map<String, Double> totals = new TreeMap<>();

    /** Seconds count from {@code start} (a {@code nanos} reading). */
    public Reporter(String name, PrintStream out, LongSupplier nanos, long start) {
        this.name = name;
        this.out = out;
        this.nanos = nanos;
        this.start = start;
    }

    public synchronized void add(String counter, double amount) {
        tick();
        current.merge(counter, amount, Double::sum);
        totals.merge(counter, amount, Double::sum);
    }

    /** Print the line of every second that has ended. */
    public synchronized void tick() {
        long now = (nanos.getAsLong() - start) / 1_000_000_000L;
        while (second < now) {
            StringBuilder line = new StringBuilder("{\"name\": ").append(string(name))
                    .append(", \"t\": ").append(second);
            counters(line, current);
            out.println(line.append('}'));
            current = new TreeMap<>();
            second++;
        }
        out.flush();
    }

    /** The last line: the totals, and {@code extra} (already JSON values). */
    public synchronized void finish(Map<String, String> extra) {
        tick();
        double seconds = (nanos.getAsLong() - start) / 1e9;
        StringBuilder line = new StringBuilder("{\"name\": ").append(string(name))
                .append(", \"final\": true, \"seconds\": ").append(seconds);
        counters(line, totals);
        extra.forEach((k, v) -> line.append(", ").append(string(k)).append(": ").append(v));
        out.println(line.append('}'));
        out.flush();
    }

    private static void counters(StringBuilder line, Map<String, Double> values) {
        values.forEach((k, v) -> {
            line.append(", ").append(string(k)).append(": ");
            if (v == Math.rint(v) && Math.abs(v) < 1e15) {
                line.append(v.longValue());
            } else {
                line.append(v);
            }
        });
    }

    /** A JSON string. */
    static String string(String value) {
        StringBuilder s = new StringBuilder("\"");
        for (char c : value.toCharArray()) {
            switch (c) {
                case '"' -> s.append("\\\"");
                case '\\' -> s.append("\\\\");
                case '\n' -> s.append("\\n");
                case '\r' -> s.append("\\r");
                case '\t' -> s.append("\\t");
                default -> {
                    if (c < 0x20) {
                        s.append(String.format("\\u%04x", (int) c));
                    } else {
                        s.append(c);
                    }
                }
            }
        }
        return s.append('"').toString();
    }
}
