package io.kvpool.examples.server.router;

import org.junit.jupiter.api.Test;

import java.util.SplittableRandom;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

/** The router's request ids: positive, exact in JSON, their epoch random per router (the ids of the wire: RequestIdsTest). */
class RouterIdsTest {

    @Test
    void routerIdsArePositiveExactInJsonAndStartAtARandomEpoch() {
        final SplittableRandom r = new SplittableRandom(5);
        final java.util.Set<Long> firsts = new java.util.HashSet<>();
        for (int i = 0; i < 1000; i++) {
            final long first = Router.firstId(r);
            assertTrue(first > 0 && first + (1L << Router.ID_COUNTER_BITS) - 1 <= Router.MAX_ID, () -> Long.toHexString(first));
            assertEquals(0, first & ((1L << Router.ID_COUNTER_BITS) - 1), "the counter starts at 0 in every epoch");
            firsts.add(first);
        }
        assertTrue(firsts.size() > 990, firsts.size() + " distinct epochs of 1000 draws");
        assertEquals(1L << Router.ID_COUNTER_BITS, Router.firstId(new java.util.random.RandomGenerator() {
            @Override
            public long nextLong() {
                return 0;
            }
        }), "the smallest epoch is 1, never 0");
    }
}
