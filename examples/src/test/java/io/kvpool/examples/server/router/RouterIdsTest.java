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

    @Test
    void theIdsTheDocsShowAreIdsARouterCanIssue() throws java.io.IOException {
        final java.nio.file.Path doc = java.nio.file.Path.of("..", "docs", "example-server.md");
        final String text = java.nio.file.Files.readString(doc);
        final java.util.regex.Matcher m = java.util.regex.Pattern.compile("\"request_id\":(\\d+)|cmpl-(\\d+)").matcher(text);
        int n = 0;
        while (m.find()) {
            final String digits = m.group(1) != null ? m.group(1) : m.group(2);
            final java.math.BigInteger id = new java.math.BigInteger(digits);
            assertTrue(id.signum() > 0 && id.compareTo(java.math.BigInteger.valueOf(Router.MAX_ID)) <= 0
                && id.longValueExact() >>> Router.ID_COUNTER_BITS != 0, doc + " shows request id " + digits
                + ", which no router issues (1 ≤ epoch, id ≤ " + Router.MAX_ID + ")");
            n++;
        }
        assertTrue(n >= 4, "found only " + n + " request ids in " + doc.toAbsolutePath());
    }
}

