package io.kvpool.examples.load;

import org.junit.jupiter.api.Test;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

class PercentilesTest {

    @Test
    void nearestRank() {
        final long[] v = new long[100];
        for (int i = 0; i < 100; i++) {
            v[i] = (100 - i) * 1_000_000L; // 1..100 ms, unsorted
        }
        final Percentiles p = new Percentiles(v);
        assertEquals(50_000_000L, p.percentile(50));
        assertEquals(90_000_000L, p.percentile(90));
        assertEquals(99_000_000L, p.percentile(99));
        assertEquals(100_000_000L, p.max());
        assertEquals(1_000_000L, p.percentile(0));
        assertEquals(100, p.count());
        assertTrue(p.row().contains("50.00") && p.row().contains("100.00"), p::row);
        assertEquals(7L, new Percentiles(new long[] {7}).percentile(99));
        assertEquals(-1L, new Percentiles(new long[0]).percentile(50));
        assertTrue(new Percentiles(new long[0]).row().contains("-"));
        assertEquals(2L, new Percentiles(new long[] {1, 2, 3}).percentile(50)); // ceil(1.5) = rank 2
    }
}
