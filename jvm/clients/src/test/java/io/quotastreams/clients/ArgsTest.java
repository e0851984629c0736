package io.quotastreams.clients;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;

import org.junit.jupiter.api.Test;

class ArgsTest {

    @Test
    void flagsAreReadAndDefaultsApply() {
        Args args = Args.parse(new String[] {"produce", "--bootstrap", "127.0.0.1:9092", "--topic",
            "t", "--client-id", "c", "--rate", "2000"});
        assertEquals("produce", args.program);
        assertEquals("127.0.0.1:9092", args.text("bootstrap"));
        assertEquals(2000.0, args.number("rate", 0, 0));
        assertEquals(1000.0, args.number("record-bytes", 1000, 1));
        assertEquals("client", args.text("name", "client"));
    }

    @Test
    void whatCannotWorkIsOneLine() {
        assertEquals("consume needs --group", assertThrows(IllegalArgumentException.class,
            () -> Args.parse(new String[] {"consume", "--bootstrap", "b:1", "--topic", "t",
                "--client-id", "c"})).getMessage());
        assertEquals("produce does not take --group", assertThrows(IllegalArgumentException.class,
            () -> Args.parse(new String[] {"produce", "--group", "g"})).getMessage());
        assertEquals("--rate needs a value", assertThrows(IllegalArgumentException.class,
            () -> Args.parse(new String[] {"produce", "--rate"})).getMessage());
        Args args = Args.parse(new String[] {"produce", "--bootstrap", "b:1", "--topic", "t",
            "--client-id", "c", "--rate", "fast"});
        assertEquals("--rate must be a number, got fast", assertThrows(
            IllegalArgumentException.class, () -> args.number("rate", 0, 0)).getMessage());
    }
}
