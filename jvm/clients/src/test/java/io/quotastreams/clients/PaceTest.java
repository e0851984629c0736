package io.quotastreams.clients;

import static org.junit.jupiter.api.Assertions.assertEquals;

import java.util.concurrent.atomic.AtomicLong;
import org.junit.jupiter.api.Test;

class PaceTest {

    @Test
    void offersTheRateAndSavesNoMoreThanTheBurst() {
        AtomicLong clock = new AtomicLong();
        Pace pace = new Pace(1000, 2000, clock::get);  // 1000 units/s, at most 2000 saved
        assertEquals(1.0, pace.take(1000), 1e-9);  // nothing saved yet: wait a second
        clock.addAndGet(1_000_000_000L);
        assertEquals(0.0, pace.take(1000));
        clock.addAndGet(60_000_000_000L);  // a minute idle saves only the burst
        assertEquals(0.0, pace.take(2000));
        assertEquals(0.5, pace.take(500), 1e-9);
    }
}
