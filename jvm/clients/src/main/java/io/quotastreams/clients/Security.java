package io.quotastreams.clients;

import java.util.Properties;

/**
 * The client security settings of a program's flags, as kafka-clients configs: the same four
 * protocols and three SASL mechanisms as the product's KAFKA_* settings (app/kafka/security.py),
 * TLS trusting a PEM CA file.
 */
public final class Security {

    private Security() {
    }

    public static Properties configs(Args args) {
        Properties props = new Properties();
        String protocol = args.text("security-protocol", "PLAINTEXT");
        switch (protocol) {
            case "PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL" -> { }
            default -> throw new IllegalArgumentException("--security-protocol must be PLAINTEXT, "
                    + "SSL, SASL_PLAINTEXT or SASL_SSL, got " + protocol);
        }
        props.put("security.protocol", protocol);
        String ca = args.text("ssl-cafile");
        if (protocol.endsWith("SSL") && ca != null && !ca.isEmpty()) {
            props.put("ssl.truststore.type", "PEM");
            props.put("ssl.truststore.location", ca);
        }
        if (protocol.startsWith("SASL_")) {
            String mechanism = args.text("sasl-mechanism", "PLAIN");
            String module = switch (mechanism) {
                case "PLAIN" -> "org.apache.kafka.common.security.plain.PlainLoginModule";
                case "SCRAM-SHA-256", "SCRAM-SHA-512" ->
                        "org.apache.kafka.common.security.scram.ScramLoginModule";
                default -> throw new IllegalArgumentException("--sasl-mechanism must be PLAIN, "
                        + "SCRAM-SHA-256 or SCRAM-SHA-512, got " + mechanism);
            };
            String user = args.text("sasl-username");
            String password = args.text("sasl-password");
            if (user == null || password == null) {
                throw new IllegalArgumentException(protocol + " needs --sasl-username and "
                        + "--sasl-password");
            }
            props.put("sasl.mechanism", mechanism);
            props.put("sasl.jaas.config", module + " required username=" + quoted(user)
                    + " password=" + quoted(password) + ";");
        }
        return props;
    }

    /** A JAAS option value: in double quotes, with quotes and backslashes escaped (JAAS
     *  reads {@code \"} as a quote and {@code \\} as a backslash). */
    static String quoted(String value) {
        return "\"" + value.replace("\\", "\\\\").replace("\"", "\\\"") + "\"";
    }
}
