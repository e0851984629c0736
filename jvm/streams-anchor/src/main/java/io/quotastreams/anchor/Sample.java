package io.quotastreams.anchor;

import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;

/**
 * One request event as the windows need it, and its form on the repartition topic (the fields
 * the byte-rate windows read).
 */
public record Sample(long ts, int broker, String user, String clientId, String api, long bytes) {

    public byte[] toBytes() {
        byte[] u = user.getBytes(StandardCharsets.UTF_8);
        byte[] c = clientId.getBytes(StandardCharsets.UTF_8);
        byte[] a = api.getBytes(StandardCharsets.UTF_8);
        return ByteBuffer.allocate(20 + 12 + u.length + c.length + a.length)
                .putLong(ts).putInt(broker).putLong(bytes)
                .putInt(u.length).put(u).putInt(c.length).put(c).putInt(a.length).put(a)
                .array();
    }

    public static Sample fromBytes(byte[] data) {
        ByteBuffer in = ByteBuffer.wrap(data);
        long ts = in.getLong();
        int broker = in.getInt();
        long bytes = in.getLong();
        String user = text(in);
        String clientId = text(in);
        return new Sample(ts, broker, user, clientId, text(in), bytes);
    }

    private static String text(ByteBuffer in) {
        byte[] raw = new byte[in.getInt()];
        in.get(raw);
        return new String(raw, StandardCharsets.UTF_8);
    }
}
