package io.kvpool.transfer;

import org.junit.jupiter.api.Test;

import static org.junit.jupiter.api.Assertions.*;

/** How a transfer's pages are split among its senders. */
class TransferPlanTest {

    static void checkPartition(int pages, int senders) {
        final String what = pages + " pages over " + senders + " senders";
        assertEquals(0, TransferPlan.firstPage(pages, senders, 0), what);
        assertEquals(pages, TransferPlan.firstPage(pages, senders, senders), what);
        int min = Integer.MAX_VALUE;
        int max = Integer.MIN_VALUE;
        long covered = 0;
        for (int r = 0; r < senders; r++) {
            final int from = TransferPlan.firstPage(pages, senders, r);
            final int to = TransferPlan.firstPage(pages, senders, r + 1);
            assertTrue(from <= to, what + ": rank " + r + " has [" + from + ", " + to + ")");
            final int size = to - from;
            // the documented split: the first pages % senders ranks get one page more
            assertEquals(pages / senders + (r < pages % senders ? 1 : 0), size, what + ": rank " + r);
            min = Math.min(min, size);
            max = Math.max(max, size);
            covered += size;
        }
        assertEquals(pages, covered, what);
        assertTrue(max - min <= 1, what + ": sizes " + min + ".." + max);
    }

    @Test
    void rangesPartitionThePagesEvenly() {
        for (int pages = 0; pages <= 300; pages++) {
            for (int senders = 1; senders <= 20; senders++) {
                checkPartition(pages, senders);
            }
        }
        checkPartition(5, 64); // more senders than pages: some get nothing
        checkPartition(65_536, 7);
        checkPartition(Integer.MAX_VALUE, 1);
        checkPartition(Integer.MAX_VALUE, 3);
        checkPartition(Integer.MAX_VALUE, 1000);
        // as many senders as int allows: spot checks (no overflow in rank * base), not a 2^31-rank loop
        final int m = Integer.MAX_VALUE;
        assertEquals(1, TransferPlan.firstPage(m - 1, m, 1));
        assertEquals(m - 1, TransferPlan.firstPage(m - 1, m, m - 1));
        assertEquals(m - 1, TransferPlan.firstPage(m - 1, m, m));
        assertEquals(m / 2 + 1, TransferPlan.firstPage(m, 2, 1));
    }

    @Test
    void pagesAreCoveredOnceInRankOrder() {
        for (int senders = 1; senders <= 9; senders++) {
            final int pages = 23;
            final int[] owner = new int[pages];
            java.util.Arrays.fill(owner, -1);
            for (int r = 0; r < senders; r++) {
                for (int p = TransferPlan.firstPage(pages, senders, r); p < TransferPlan.firstPage(pages, senders, r + 1); p++) {
                    assertEquals(-1, owner[p], "page " + p + " written by ranks " + owner[p] + " and " + r);
                    owner[p] = r;
                }
            }
            for (int p = 1; p < pages; p++) {
                assertTrue(owner[p - 1] <= owner[p] && owner[p] >= 0, "page " + p);
            }
        }
    }

    @Test
    void badArgumentsAreRefusedWithTheirValues() {
        final int[][] bad = {
            {10, 0, 0}, {10, -1, 0}, {10, Integer.MIN_VALUE, 0},
            {10, 3, -1}, {10, 3, 4}, {10, 3, Integer.MAX_VALUE}, {10, 3, Integer.MIN_VALUE},
            {-1, 3, 0}, {Integer.MIN_VALUE, 1, 1},
        };
        for (int[] a : bad) {
            final IllegalArgumentException e = assertThrows(IllegalArgumentException.class,
                () -> TransferPlan.firstPage(a[0], a[1], a[2]), () -> java.util.Arrays.toString(a));
            assertTrue(e.getMessage().contains("pages=" + a[0]) && e.getMessage().contains("senders=" + a[1])
                && e.getMessage().contains("rank=" + a[2]), e.getMessage());
        }
    }
}
