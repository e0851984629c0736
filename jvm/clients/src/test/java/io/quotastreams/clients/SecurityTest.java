package io.quotastreams.clients;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;

import java.util.Properties;
import org.junit.jupiter.api.Test;

class SecurityTest {

    private static Args args(String... security) {
        String[] base = {"consume", "--bootstrap", "b:1", "--topic", "t", "--client-id", "c",
            "--group", "g"};
        String[] all = new String[base.length + security.length];
        System.arraycopy(base, 0, all, 0, base.length);
        System.arraycopy(security, 0, all, base.length, security.length);
        return Args.parse(all);
    }

    @Test
    void plaintextByDefault() {
        Properties props = Security.configs(args());
        assertEquals("PLAINTEXT", props.get("security.protocol"));
        assertFalse(props.containsKey("sasl.jaas.config"));
    }

    @Test
    void scramOverTlsWithAPemCa() {
        Properties props = Security.configs(args("--security-protocol", "SASL_SSL",
            "--sasl-mechanism", "SCRAM-SHA-512", "--sasl-username", "alice",
            "--sasl-password", "s3cret", "--ssl-cafile", "/ca.pem"));
        assertEquals("SCRAM-SHA-512", props.get("sasl.mechanism"));
        assertEquals("org.apache.kafka.common.security.scram.ScramLoginModule required "
            + "username=\"alice\" password=\"s3cret\";", props.get("sasl.jaas.config"));
        assertEquals("PEM", props.get("ssl.truststore.type"));
        assertEquals("/ca.pem", props.get("ssl.truststore.location"));
    }

    @Test
    void aPasswordWithQuotesAndBackslashesStaysOneJaasValue() {
        Properties props = Security.configs(args("--security-protocol", "SASL_PLAINTEXT",
            "--sasl-username", "bob", "--sasl-password", "a\"b\\c; x=y"));
        assertEquals("org.apache.kafka.common.security.plain.PlainLoginModule required "
            + "username=\"bob\" password=\"a\\\"b\\\\c; x=y\";", props.get("sasl.jaas.config"));
    }

    @Test
    void saslWithoutCredentialsOrAnUnknownMechanismIsRefused() {
        assertEquals("SASL_PLAINTEXT needs --sasl-username and --sasl-password",
            assertThrows(IllegalArgumentException.class, () -> Security.configs(
                args("--security-protocol", "SASL_PLAINTEXT", "--sasl-username", "a")))
                .getMessage());
        assertThrows(IllegalArgumentException.class, () -> Security.configs(args(
            "--security-protocol", "SASL_SSL", "--sasl-mechanism", "GSSAPI",
            "--sasl-username", "a", "--sasl-password", "p")));
    }
}
