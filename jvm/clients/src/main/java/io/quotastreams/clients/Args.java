package io.quotastreams.clients;

import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;

/**
 * The command line of a client program: {@code produce|consume --flag value ...}, the flags of
 * {@code python -m app.clients} (which passes them on). Every flag takes one value; an unknown
 * flag, a missing value or a missing required flag is an {@link IllegalArgumentException} whose
 * message is the one line the program prints.
 */
public final class Args {

    /** Flags each program accepts, and which of them it requires. */
    static final Set<String> SECURITY = Set.of("security-protocol", "sasl-mechanism",
            "sasl-username", "sasl-password", "ssl-cafile");
    static final Map<String, Set<String>> ACCEPTED = Map.of(
            "produce", Set.of("name", "seconds", "epoch", "bootstrap", "topic", "client-id",
                    "rate", "record-bytes", "window"),
            "consume", Set.of("name", "seconds", "epoch", "bootstrap", "topic", "client-id",
                    "group", "fetch-bytes"));
    static final Map<String, List<String>> REQUIRED = Map.of(
            "produce", List.of("bootstrap", "topic", "client-id", "rate"),
            "consume", List.of("bootstrap", "topic", "client-id", "group"));

    public final String program;
    private final Map<String, String> values;

    private Args(String program, Map<String, String> values) {
        this.program = program;
        this.values = values;
    }

    public static Args parse(String[] argv) {
        if (argv.length == 0 || !ACCEPTED.containsKey(argv[0])) {
            throw new IllegalArgumentException("usage: produce|consume --bootstrap HOST:PORT ...");
        }
        String program = argv[0];
        Map<String, String> values = new LinkedHashMap<>();
        for (int i = 1; i < argv.length; i += 2) {
            String flag = argv[i];
            if (!flag.startsWith("--")) {
                throw new IllegalArgumentException("expected a --flag, got " + flag);
            }
            String name = flag.substring(2);
            if (!ACCEPTED.get(program).contains(name) && !SECURITY.contains(name)) {
                throw new IllegalArgumentException(program + " does not take " + flag);
            }
            if (i + 1 >= argv.length) {
                throw new IllegalArgumentException(flag + " needs a value");
            }
            values.put(name, argv[i + 1]);
        }
        for (String name : REQUIRED.get(program)) {
            if (!values.containsKey(name)) {
                throw new IllegalArgumentException(program + " needs --" + name);
            }
        }
        return new Args(program, values);
    }

    public String text(String name, String fallback) {
        return values.getOrDefault(name, fallback);
    }

    public String text(String name) {
        return values.get(name);
    }

    /** A number of at least {@code min}. */
    public double number(String name, double fallback, double min) {
        String raw = values.get(name);
        if (raw == null) {
            return fallback;
        }
        double value;
        try {
            value = Double.parseDouble(raw);
        } catch (NumberFormatException e) {
            throw new IllegalArgumentException("--" + name + " must be a number, got " + raw);
        }
        if (!(value >= min)) {
            throw new IllegalArgumentException("--" + name + " must be >= " + min + ", got " + raw);
        }
        return value;
    }
}
