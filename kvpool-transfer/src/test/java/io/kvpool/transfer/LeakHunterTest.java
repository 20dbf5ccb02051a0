package io.kvpool.transfer;

import org.junit.jupiter.api.Test;

import static org.junit.jupiter.api.Assertions.*;

class LeakHunterTest {

    @Test
    void smoke() {
        final LeakHunter.Config c = new LeakHunter.Config();
        c.transfers = 20_000;
        final long t0 = System.nanoTime();
        final LeakHunter.Report r = LeakHunter.hunt(c);
        System.out.println(r + " in " + (System.nanoTime() - t0) / 1_000_000 + " ms\n" + r.metrics);
        assertEquals(0, r.leaks, r::toString);
        assertEquals(0, r.corrupted, r::toString);
        assertTrue(r.balanced, r::toString);
    }
}
