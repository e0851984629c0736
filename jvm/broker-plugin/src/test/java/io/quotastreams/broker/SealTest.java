package io.quotastreams.broker;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;

import java.nio.charset.StandardCharsets;
import org.junit.jupiter.api.Test;

class SealTest {
    private static final String TOPIC = "quota.directives";
    private static final byte[] KEY = "producer_byte_rate|{\"user\":\"\",\"client_id\":\"c\"}".getBytes(StandardCharsets.UTF_8);
    private static final String PAYLOAD = "{\"v\":1,\"kind\":\"allocation\",\"quota\":\"producer_byte_rate\"}";
    // app.signing.Signing.parse("k1:0123456789abcdef-secret").seal(TOPIC, KEY, PAYLOAD) (and key None)
    private static final String SEALED = "{\"v\":1,\"kind\":\"allocation\",\"quota\":\"producer_byte_rate\","
            + "\"sig\":\"v2:k1:d75f926e30fe18153e776f7ebd0e2dbc9e0df28d0f38f4713771e6c47bf2e62c\"}";
    private static final String SEALED_NULL_KEY = "{\"v\":1,\"kind\":\"allocation\",\"quota\":\"producer_byte_rate\","
            + "\"sig\":\"v2:k1:4e3069ead6ecb08d9381782f2d23b464f9b6d13e1a1057a18c9474ae8f7b6956\"}";

    private static byte[] b(String s) {
        return s.getBytes(StandardCharsets.UTF_8);
    }

    private final Seal seal = Seal.parse("old:another-secret-16chars, k1:0123456789abcdef-secret");

    @Test
    void opensWhatThePythonWriterSealed() {
        Seal.Opened opened = seal.open(TOPIC, KEY, b(SEALED));
        assertNull(opened.refused());
        assertArrayEquals(b(PAYLOAD), opened.payload());
        assertArrayEquals(b(PAYLOAD), seal.open(TOPIC, null, b(SEALED_NULL_KEY)).payload());
    }

    @Test
    void refusesAnotherTopicKeyOrByte() {
        assertEquals("bad_signature", seal.open("quota.configs", KEY, b(SEALED)).refused());
        assertEquals("bad_signature", seal.open(TOPIC, b("other"), b(SEALED)).refused());
        assertEquals("bad_signature", seal.open(TOPIC, null, b(SEALED)).refused());
        assertEquals("bad_signature", seal.open(TOPIC, KEY, b(SEALED.replace("\"v\":1", "\"v\":2"))).refused());
        assertEquals("bad_signature", seal.open(TOPIC, KEY, b(SEALED.replace("v2:k1:d7", "v2:k1:d"))).refused());
        assertEquals("bad_signature", seal.open(TOPIC, KEY, b(SEALED.replace("v2:k1", "v1:k1"))).refused());
    }

    @Test
    void refusesUnsignedAndUnknownKeys() {
        assertEquals("unsigned", seal.open(TOPIC, KEY, b(PAYLOAD)).refused());
        assertEquals("unknown_signing_key", seal.open(TOPIC, KEY, b(SEALED.replace("v2:k1:", "v2:k9:"))).refused());
    }

    @Test
    void withoutKeysTheSealIsRemovedUnchecked() {
        Seal none = Seal.parse("");
        assertArrayEquals(b(PAYLOAD), none.open(TOPIC, KEY, b(SEALED.replace("v2:k1:", "v2:k9:"))).payload());
        assertArrayEquals(b(PAYLOAD), none.open(TOPIC, KEY, b(PAYLOAD)).payload());
    }

    @Test
    void badKeySettingsAreRefused() {
        assertThrows(IllegalArgumentException.class, () -> Seal.parse("k1:short"));
        assertThrows(IllegalArgumentException.class, () -> Seal.parse("k1"));
        assertThrows(IllegalArgumentException.class, () -> Seal.parse("a:0123456789abcdef,a:0123456789abcdef"));
    }
}
