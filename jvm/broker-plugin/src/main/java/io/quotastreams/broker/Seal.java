package io.quotastreams.broker;

import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.security.GeneralSecurityException;
import java.security.MessageDigest;
import java.util.Arrays;
import java.util.LinkedHashMap;
import java.util.Map;
import javax.crypto.Mac;
import javax.crypto.spec.SecretKeySpec;

/**
 * Opens sealed control records, byte for byte as app/signing.py seals them (docs/contract.md,
 * "Seal"): the last member {@code ,"sig":"v2:<key id>:<64 hex>"} is an HMAC-SHA256 of the
 * version, the topic and the key (each after its big-endian i32 length, -1 for a null key) and
 * the record without the seal. Without keys a seal is removed unchecked, as the Python readers do.
 */
public final class Seal {
    static final String VERSION = "v2";
    private static final byte[] MARK = ",\"sig\":\"".getBytes(StandardCharsets.US_ASCII);
    private static final int MAC_HEX = 64;

    /** The record without its seal, or why it is refused (one of the Python readers' reasons). */
    public record Opened(byte[] payload, String refused) {}

    private final Map<String, byte[]> keys;

    private Seal(Map<String, byte[]> keys) {
        this.keys = keys;
    }

    /** {@code id:secret[,id:secret...]} as QS_SIGNING_KEYS; empty or null: no verification. */
    public static Seal parse(String text) {
        Map<String, byte[]> keys = new LinkedHashMap<>();
        for (String part : (text == null ? "" : text).split(",")) {
            String item = part.strip();
            if (item.isEmpty()) {
                continue;
            }
            int colon = item.indexOf(':');
            if (colon <= 0 || colon == item.length() - 1) {
                throw new IllegalArgumentException("each signing key is id:secret (comma-separated)");
            }
            String id = item.substring(0, colon);
            String secret = item.substring(colon + 1);
            if (!id.replace("-", "").replace("_", "").chars().allMatch(Character::isLetterOrDigit)) {
                throw new IllegalArgumentException("signing key id " + id + ": use letters, digits, - and _");
            }
            if (secret.length() < 16) {
                throw new IllegalArgumentException("signing key " + id + ": the secret must be at least 16 characters");
            }
            if (keys.putIfAbsent(id, secret.getBytes(StandardCharsets.UTF_8)) != null) {
                throw new IllegalArgumentException("signing key id " + id + " is listed twice");
            }
        }
        return new Seal(keys);
    }

    public boolean enabled() {
        return !keys.isEmpty();
    }

    /** What the MAC covers (app.signing.mac_input). */
    static byte[] macInput(String topic, byte[] key, byte[] payload) {
        byte[] name = topic.getBytes(StandardCharsets.UTF_8);
        int keyLength = key == null ? 0 : key.length;
        ByteBuffer out = ByteBuffer.allocate(2 + 4 + name.length + 4 + keyLength + payload.length);
        out.put(VERSION.getBytes(StandardCharsets.US_ASCII)).putInt(name.length).put(name);
        out.putInt(key == null ? -1 : key.length);
        if (key != null) {
            out.put(key);
        }
        return out.put(payload).array();
    }

    static String hmacHex(byte[] secret, byte[] input) {
        try {
            Mac mac = Mac.getInstance("HmacSHA256");
            mac.init(new SecretKeySpec(secret, "HmacSHA256"));
            StringBuilder hex = new StringBuilder(MAC_HEX);
            for (byte b : mac.doFinal(input)) {
                hex.append(Character.forDigit((b >> 4) & 0xf, 16)).append(Character.forDigit(b & 0xf, 16));
            }
            return hex.toString();
        } catch (GeneralSecurityException e) {
            throw new IllegalStateException("HmacSHA256 is not available", e);
        }
    }

    /** Verify and strip the seal of a record read from {@code topic} with {@code key}. */
    public Opened open(String topic, byte[] key, byte[] value) {
        int at = lastIndexOf(value, MARK);
        boolean sealed = at > 0 && value.length >= 2 && value[value.length - 2] == '"'
                && value[value.length - 1] == '}';
        byte[] payload = value;
        if (sealed) {
            payload = Arrays.copyOf(value, at + 1);
            payload[at] = '}';
        }
        if (keys.isEmpty()) {
            return new Opened(payload, null);
        }
        if (!sealed) {
            return new Opened(null, "unsigned");
        }
        byte[] fieldBytes = Arrays.copyOfRange(value, at + MARK.length, Math.max(at + MARK.length, value.length - 2));
        for (byte b : fieldBytes) {
            if (b < 0) {
                return new Opened(null, "bad_signature");
            }
        }
        String[] fields = new String(fieldBytes, StandardCharsets.US_ASCII).split(":", -1);
        if (fields.length != 3 || !fields[0].equals(VERSION)) {
            return new Opened(null, "bad_signature");
        }
        byte[] secret = keys.get(fields[1]);
        if (secret == null) {
            return new Opened(null, "unknown_signing_key");
        }
        byte[] expected = hmacHex(secret, macInput(topic, key, payload)).getBytes(StandardCharsets.US_ASCII);
        if (fields[2].length() != MAC_HEX
                || !MessageDigest.isEqual(expected, fields[2].getBytes(StandardCharsets.US_ASCII))) {
            return new Opened(null, "bad_signature");
        }
        return new Opened(payload, null);
    }

    private static int lastIndexOf(byte[] haystack, byte[] needle) {
        for (int i = haystack.length - needle.length; i >= 0; i--) {
            int j = 0;
            while (j < needle.length && haystack[i + j] == needle[j]) {
                j++;
            }
            if (j == needle.length) {
                return i;
            }
        }
        return -1;
    }
}
