package io.kvpool;

import org.junit.jupiter.api.Test;

import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.util.ArrayList;
import java.util.List;
import java.util.SplittableRandom;

import static org.junit.jupiter.api.Assertions.*;

/**
 * {@link BlockTable#appendEach}: one pass that is {@link KvPool#appendEach} over the rows and then {@link BlockTable#refresh()},
 * all or nothing, allocation-free.
 */
class BlockTableAppendEachTest {

    private static final int TPP = TestPools.SMALL.tokensPerPage();
    private static final int ROWS = 6;
    private static final int MAX_PAGES = 12;

    /** A table over fresh native memory, every byte set to 0x5A so that a byte never written shows. */
    private record Table(BlockTable table, MemorySegment entries, MemorySegment lengths) {
        static Table over(Arena arena) {
            final MemorySegment t = arena.allocate(BlockTable.tableBytes(ROWS, MAX_PAGES)).fill((byte) 0x5A);
            final MemorySegment l = arena.allocate(BlockTable.lengthsBytes(ROWS)).fill((byte) 0x5A);
            return new Table(new BlockTable(ROWS, MAX_PAGES, t, l), t, l);
        }

        byte[] bytes() {
            final byte[] a = entries.toArray(ValueLayout.JAVA_BYTE);
            final byte[] b = lengths.toArray(ValueLayout.JAVA_BYTE);
            final byte[] out = java.util.Arrays.copyOf(a, a.length + b.length);
            System.arraycopy(b, 0, out, a.length, b.length);
            return out;
        }
    }

    private static List<Integer> counts(Sequence[] seqs) {
        final List<Integer> out = new ArrayList<>();
        for (Sequence s : seqs) {
            out.add(s == null ? -1 : s.tokenCount());
            out.add(s == null ? -1 : s.pageCount());
            out.add(s == null ? -1 : s.reservedPages());
        }
        return out;
    }

    @Test
    void oneStepLeavesTheTableAndTheSequencesAsAppendEachThenRefreshWould() {
        for (long seed = 1; seed <= 25; seed++) {
            final SplittableRandom rnd = new SplittableRandom(seed);
            try (KvPool fused = TestPools.builder(96).build(); KvPool twoPass = TestPools.builder(96).build();
                 Arena arena = Arena.ofConfined()) {
                final Table tf = Table.over(arena);
                final Table tt = Table.over(arena);
                final Sequence[] sf = new Sequence[ROWS];
                final Sequence[] st = new Sequence[ROWS];
                for (int step = 0; step < 40; step++) {
                    for (int r = 0; r < ROWS; r++) { // the scheduler's changes between steps, the same on both sides
                        final int what = rnd.nextInt(12);
                        if (sf[r] == null && what < 8) {
                            final int prompt = rnd.nextInt(1, 2 * TPP);
                            final int max = rnd.nextInt(0, 5 * TPP);
                            if (r > 0 && sf[r - 1] != null && what == 0) {
                                sf[r] = sf[r - 1].fork();
                                st[r] = st[r - 1].fork();
                            } else {
                                sf[r] = fused.admit(prompt, max).sequence();
                                st[r] = twoPass.admit(prompt, max).sequence();
                                sf[r].append(prompt);
                                st[r].append(prompt);
                            }
                            tf.table().set(r, sf[r]);
                            tt.table().set(r, st[r]);
                        } else if (sf[r] != null && (what == 9 || sf[r].tokenCount() + 3 > sf[r].admittedTokens())) {
                            sf[r].close();
                            st[r].close();
                            if (rnd.nextBoolean()) { // a closed sequence left in its row: the row empties
                                tf.table().set(r, null);
                                tt.table().set(r, null);
                            }
                            sf[r] = null;
                            st[r] = null;
                        } else if (sf[r] != null && what == 10) {
                            final int keep = rnd.nextInt(sf[r].tokenCount() + 1);
                            sf[r].truncate(keep);
                            st[r].truncate(keep);
                        }
                    }
                    final int tokens = rnd.nextInt(0, 3);
                    final int got = tf.table().appendEach(fused, tokens);
                    int expected = 0;
                    final Sequence[] batch = new Sequence[ROWS];
                    int n = 0;
                    for (int r = 0; r < ROWS; r++) {
                        final Sequence s = tt.table().sequence(r);
                        if (s != null && !s.isClosed()) {
                            batch[n++] = s;
                        }
                    }
                    expected = twoPass.appendEach(batch, n, tokens);
                    tt.table().refresh();
                    assertEquals(expected, got, "seed " + seed + " step " + step + ": pages allocated");
                    assertEquals(counts(st), counts(sf), "seed " + seed + " step " + step);
                    assertArrayEquals(tt.bytes(), tf.bytes(), "seed " + seed + " step " + step + ": the table's memory");
                }
                for (int r = 0; r < ROWS; r++) {
                    if (sf[r] != null) {
                        sf[r].close();
                        st[r].close();
                    }
                }
                assertEquals(96, fused.verifyAccounting().free());
            }
        }
    }

    @Test
    void aStepThatCannotBeTakenChangesNoSequenceAndNoByteOfTheTable() {
        try (KvPool pool = TestPools.builder(8).build(); KvPool other = TestPools.builder(8).build(); Arena arena = Arena.ofConfined()) {
            final Table t = Table.over(arena);
            final Sequence a = pool.admit(TPP, 0).sequence();
            final Sequence b = pool.admit(TPP, 0).sequence();
            final Sequence big = pool.admit(5 * TPP, 0).sequence(); // 7 of 8 pages reserved: 1 unreserved
            a.append(TPP); // full last pages: the next token needs a page beyond each reservation
            b.append(TPP);
            big.append(5 * TPP - 1); // room for one more token
            t.table().set(0, b);
            t.table().set(1, big);
            t.table().set(2, a);
            t.table().refresh();
            final Sequence[] seqs = {a, b, big};
            final List<Integer> before = counts(seqs);
            final byte[] memory = t.bytes();

            assertEquals(-1, t.table().appendEach(pool, 1), "two pages beyond the reservations, one free");
            assertEquals(before, counts(seqs), "big's token, counted in the pass, was taken back");
            assertArrayEquals(memory, t.bytes(), "a step that came up short wrote to the table");

            final Sequence foreign = other.admit(1, 0).sequence();
            t.table().set(3, foreign);
            assertThrows(IllegalArgumentException.class, () -> t.table().appendEach(pool, 1), "another pool's sequence");
            t.table().set(3, a);
            assertThrows(IllegalArgumentException.class, () -> t.table().appendEach(pool, 1), "one sequence in two rows");
            t.table().set(3, null);
            assertThrows(IllegalArgumentException.class, () -> t.table().appendEach(pool, -1));
            assertEquals(before, counts(seqs));
            assertArrayEquals(memory, t.bytes());

            foreign.close();
            big.close();
            t.table().set(1, null);
            assertEquals(2, t.table().appendEach(pool, 1), "with big's pages back the step fits");
            assertEquals(TPP + 1, a.tokenCount());
            a.close();
            b.close();
        }
    }

    @Test
    void aRowThatWouldOutgrowTheTableIsRefusedBeforeAnythingChanges() {
        try (KvPool pool = TestPools.builder(64).build(); Arena arena = Arena.ofConfined()) {
            final Table t = Table.over(arena);
            final Sequence small = pool.admit(1, TPP).sequence();
            final Sequence full = pool.admit(MAX_PAGES * TPP, 2 * TPP).sequence();
            small.append(1);
            full.append(MAX_PAGES * TPP); // exactly maxPages pages, the last one full
            t.table().set(0, small);
            t.table().set(1, full);
            t.table().refresh();
            final byte[] memory = t.bytes();
            final IllegalStateException e = assertThrows(IllegalStateException.class, () -> t.table().appendEach(pool, 1));
            assertTrue(e.getMessage().contains("row 1") && e.getMessage().contains("13 pages"), e.getMessage());
            assertEquals(1, small.tokenCount(), "row 0's token was taken back");
            assertEquals(MAX_PAGES * TPP, full.tokenCount());
            assertArrayEquals(memory, t.bytes());
            small.close();
            full.close();
        }
    }

    @Test
    void stepsAllocateNothing() {
        final com.sun.management.ThreadMXBean threads =
            (com.sun.management.ThreadMXBean) java.lang.management.ManagementFactory.getThreadMXBean();
        try (KvPool pool = TestPools.builder(ROWS * MAX_PAGES + 4).build(); Arena arena = Arena.ofConfined()) {
            final Table t = Table.over(arena);
            for (int r = 0; r < ROWS; r++) {
                final Sequence s = pool.admit(1 + r, MAX_PAGES * TPP - 1 - r).sequence();
                s.append(1 + r);
                t.table().set(r, s);
            }
            final int steps = 20_000, warmup = 15_000;
            long allocated = 0;
            threads.getCurrentThreadAllocatedBytes();
            for (int step = 0; step < steps; step++) {
                for (int r = 0; r < ROWS; r++) {
                    if (t.table().sequence(r).tokenCount() == MAX_PAGES * TPP) {
                        t.table().sequence(r).truncate(0);
                    }
                }
                final long before = threads.getCurrentThreadAllocatedBytes();
                assertTrue(t.table().appendEach(pool, 1) >= 0);
                if (step >= warmup) {
                    allocated += threads.getCurrentThreadAllocatedBytes() - before;
                }
            }
            assertTrue(allocated < steps - warmup, allocated + " bytes allocated by " + (steps - warmup) + " steps");
            for (int r = 0; r < ROWS; r++) {
                t.table().sequence(r).close();
            }
        }
    }
}
