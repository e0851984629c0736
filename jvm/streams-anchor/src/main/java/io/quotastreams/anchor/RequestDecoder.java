package io.quotastreams.anchor;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.atomic.LongAdder;

/**
 * The request topic's record values (docs/contract.md): a JSON event, a JSON batch of events, or
 * a columnar batch (magic {@code QSCB}, version 1). Only request events become samples; any
 * other event kind is skipped. A value that cannot be read, or an event missing a field the
 * windows need, is dropped and counted: the anchor has no dead-letter topic.
 */
public final class RequestDecoder {

    private static final byte[] MAGIC = "QSCB".getBytes(StandardCharsets.US_ASCII);
    private static final ObjectMapper JSON = new ObjectMapper();

    private RequestDecoder() {
    }

    /** The samples of one record value; {@code dropped} counts what gave none. */
    public static List<Sample> decode(byte[] value, LongAdder dropped) {
        List<Sample> out = new ArrayList<>();
        try {
            if (isColumnar(value)) {
                columnar(value, out);
            } else {
                json(JSON.readTree(value), out, dropped);
            }
        } catch (IOException | RuntimeException e) {
            dropped.increment();
            out.clear();
        }
        return out;
    }

    static boolean isColumnar(byte[] value) {
        if (value == null || value.length < MAGIC.length) {
            return false;
        }
        for (int i = 0; i < MAGIC.length; i++) {
            if (value[i] != MAGIC[i]) {
                return false;
            }
        }
        return true;
    }

    private static void json(JsonNode node, List<Sample> out, LongAdder dropped) {
        if ("batch".equals(node.path("type").asText())) {
            JsonNode broker = node.get("broker");
            for (JsonNode event : node.path("events")) {
                event(event, broker, out, dropped);
            }
        } else {
            event(node, null, out, dropped);
        }
    }

    /** {@code batchBroker}: the batch's {@code broker}, for an event that names none. */
    private static void event(JsonNode e, JsonNode batchBroker, List<Sample> out, LongAdder dropped) {
        if (!"request".equals(e.path("type").asText())) {
            return;
        }
        JsonNode ts = e.get("ts");
        JsonNode user = e.get("user");
        JsonNode client = e.get("client_id");
        JsonNode api = e.get("api");
        JsonNode broker = e.has("broker") ? e.get("broker") : batchBroker;
        if (broker == null || !broker.canConvertToInt() || ts == null || !ts.canConvertToLong()
                || user == null || !user.isTextual() || client == null || !client.isTextual()
                || api == null || !api.isTextual()) {
            dropped.increment();
            return;
        }
        out.add(new Sample(ts.asLong(), broker.asInt(), user.asText(), client.asText(), api.asText(),
                e.path("bytes").asLong(0)));
    }

    /** The columnar layout of docs/contract.md; the columns the windows do not read are skipped. */
    private static void columnar(byte[] value, List<Sample> out) {
        ByteBuffer in = ByteBuffer.wrap(value).order(ByteOrder.LITTLE_ENDIAN);
        in.position(4);
        if (in.get() != 1) {
            throw new IllegalArgumentException("columnar version");
        }
        if ((in.get() & 1) != 0) {
            throw new IllegalArgumentException("an internal record on an event topic");
        }
        in.position(8);
        int rows = in.getInt();
        int nameCount = in.getInt();
        if (rows < 0 || rows > 100_000 || nameCount < 0) {
            throw new IllegalArgumentException("columnar counts");
        }
        int[] lengths = new int[nameCount];
        for (int i = 0; i < nameCount; i++) {
            lengths[i] = in.getInt();
        }
        String[] names = new String[nameCount];
        for (int i = 0; i < nameCount; i++) {
            names[i] = new String(value, in.position(), lengths[i], StandardCharsets.UTF_8);
            in.position(in.position() + lengths[i]);
        }
        int tsAt = in.position();
        int brokerAt = tsAt + rows * 8;
        int userAt = tsAt + rows * (8 + 4 + 4 + 4);  // past ts, broker, gateway, listener
        int clientAt = userAt + rows * 4;
        int apiAt = clientAt + rows * 4 * 2;  // past client_id, ip
        int bytesAt = apiAt + rows * 4;
        int end = bytesAt + rows * 8 * 4 + rows;  // bytes, thread_ns, network_ns, count, exempt
        if (end != value.length) {
            throw new IllegalArgumentException("columnar length");
        }
        for (int r = 0; r < rows; r++) {
            out.add(new Sample(in.getLong(tsAt + 8 * r), in.getInt(brokerAt + 4 * r), names[in.getInt(userAt + 4 * r)],
                    names[in.getInt(clientAt + 4 * r)], names[in.getInt(apiAt + 4 * r)],
                    in.getLong(bytesAt + 8 * r)));
        }
    }
}
