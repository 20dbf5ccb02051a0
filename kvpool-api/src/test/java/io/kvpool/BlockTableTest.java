package io.kvpool;

import io.kvpool.storage.FillMode;
import org.junit.jupiter.api.Test;

import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.lang.management.ManagementFactory;
import java.nio.ByteOrder;
import java.util.SplittableRandom;

import static org.junit.jupiter.api.Assertions.*;

/** The batch block table: always what a rebuild from scratch would write, while writing only what changed. */
class BlockTableTest {

    private static final ValueLayout.OfInt INT_LE = ValueLayout.JAVA_INT_UNALIGNED.withOrder(ByteOrder.LITTLE_ENDIAN);
    static final KvLayout LAYOUT = TestPools.SMALL; // 4 tokens/page

    static KvPool pool(int pages) {
        return KvPool.builder(LAYOUT).pages(pages).maxContextTokens((long) pages * LAYOUT.tokensPerPage()).fillMode(FillMode.NONE).build();
    }

    static int entry(MemorySegment table, int maxPages, int row, int i) {
        return table.get(INT_LE, 4L * ((long) row * maxPages + i));
    }

    /** Asserts the segments hold what the rows' sequences say, computed from the sequences alone. */
    static void assertCurrent(BlockTable bt, MemorySegment table, MemorySegment lengths, String when) {
        for (int r = 0; r < bt.rows(); r++) {
            final Sequence s = bt.sequence(r);
            final int pages = s == null ? 0 : s.pageCount();
            assertEquals(s == null ? 0 : s.tokenCount(), lengths.get(INT_LE, 4L * r), when + ": length of row " + r);
            for (int i = 0; i < bt.maxPages(); i++) {
                assertEquals(i < pages ? s.pageIndex(i) : BlockTable.PAD, entry(table, bt.maxPages(), r, i), when + ": row " + r + " entry " + i);
            }
        }
    }

    @Test
    void afterRandomAppendsTruncatesForksAndClosesTheTableEqualsARebuild() {
        final int rows = 6;
        final int maxPages = 10; // each request is admitted for 40 tokens = 10 pages
        final int[] ids = new int[40];
        for (int i = 0; i < ids.length; i++) {
            ids[i] = 1000 + i;
        }
        for (long seed = 1; seed <= 3; seed++) {
            final SplittableRandom r = new SplittableRandom(seed);
            try (KvPool pool = pool(256); Arena arena = Arena.ofConfined()) {
                final MemorySegment table = arena.allocate(BlockTable.tableBytes(rows, maxPages));
                final MemorySegment lengths = arena.allocate(BlockTable.lengthsBytes(rows));
                final BlockTable bt = new BlockTable(rows, maxPages, table, lengths);
                final Sequence[] live = new Sequence[rows];
                long entries = 0;
                long versionChanges = 0;
                final int steps = 1500;
                for (int step = 0; step < steps; step++) {
                    final int row = r.nextInt(rows);
                    final Sequence s = live[row];
                    final long versionBefore = s == null ? 0 : s.structureVersion();
                    switch (r.nextInt(6)) {
                        case 0, 1 -> { // grow (or start a request)
                            if (s == null || s.isClosed()) {
                                final Admission a = pool.admit(1, 39);
                                if (a.admitted()) {
                                    live[row] = a.sequence();
                                    live[row].append(1 + r.nextInt(8));
                                    bt.set(row, live[row]);
                                }
                            } else if (s.tokenCount() < 40) {
                                s.append(1 + r.nextInt(Math.min(9, 40 - s.tokenCount())));
                            }
                        }
                        case 2 -> {
                            if (s != null && !s.isClosed()) {
                                s.truncate(r.nextInt(s.tokenCount() + 1));
                            }
                        }
                        case 3 -> { // fork into another row
                            final int to = r.nextInt(rows);
                            if (s != null && !s.isClosed() && to != row) {
                                try {
                                    final Sequence child = s.fork();
                                    if (live[to] != null) {
                                        live[to].close();
                                    }
                                    live[to] = child;
                                    bt.set(to, child);
                                } catch (PoolExhaustedException e) {
                                    // no room for the child's reservation: nothing changed
                                }
                            }
                        }
                        case 4 -> { // close; sometimes the row keeps the closed sequence
                            if (s != null && !s.isClosed()) {
                                s.close();
                                if (r.nextBoolean()) {
                                    bt.set(row, null);
                                    live[row] = null;
                                }
                            }
                        }
                        default -> { // publish its full pages (an append into a truncated published page then copies it)
                            if (s != null && !s.isClosed()) {
                                s.publish(ids, 5);
                            }
                        }
                    }
                    if (s != null && s.structureVersion() != versionBefore) {
                        versionChanges++;
                    }
                    entries += bt.refresh();
                    assertCurrent(bt, table, lengths, "seed " + seed + " step " + step);
                    // a table built from scratch over fresh memory holds the same bytes
                    final MemorySegment t2 = arena.allocate(table.byteSize());
                    final MemorySegment l2 = arena.allocate(lengths.byteSize());
                    t2.fill((byte) 0x5a);
                    final BlockTable fresh = new BlockTable(rows, maxPages, t2, l2);
                    for (int i = 0; i < rows; i++) {
                        fresh.set(i, bt.sequence(i));
                    }
                    fresh.refresh();
                    assertEquals(-1, table.mismatch(t2), "seed " + seed + " step " + step + ": table differs from a rebuild");
                    assertEquals(-1, lengths.mismatch(l2), "seed " + seed + " step " + step + ": lengths differ from a rebuild");
                }
                assertTrue(versionChanges > steps / 20, "the walk replaced or removed pages only " + versionChanges + " times");
                assertTrue(entries < (long) steps * rows * maxPages / 10,
                    entries + " entries written in " + steps + " refreshes; rewriting every row would be " + (long) steps * rows * maxPages);
                for (Sequence s : live) {
                    if (s != null) {
                        s.close();
                    }
                }
            }
        }
    }

    @Test
    void refreshWritesOnlyNewPagesWhileTheVersionIsUnchangedAndTheWholeRowWhenItChanged() {
        final int poison = 0x5eed_5eed;
        try (KvPool pool = pool(32); Arena arena = Arena.ofConfined()) {
            final int maxPages = 8;
            final MemorySegment table = arena.allocate(BlockTable.tableBytes(2, maxPages));
            final MemorySegment lengths = arena.allocate(BlockTable.lengthsBytes(2));
            final BlockTable bt = new BlockTable(2, maxPages, table, lengths);
            final Sequence s = pool.admit(1, 31).sequence();
            s.append(8);
            bt.set(0, s);
            bt.refresh();
            table.set(INT_LE, 0, poison); // entry (0, 0), already written

            final long v = s.structureVersion();
            s.append(4); // a third page; nothing already in the table changed
            assertEquals(v, s.structureVersion());
            assertEquals(1, bt.refresh(), "one new page, one entry");
            assertEquals(poison, entry(table, maxPages, 0, 0), "an entry already written is not written again");
            assertEquals(s.pageIndex(2), entry(table, maxPages, 0, 2));
            assertEquals(12, lengths.get(INT_LE, 0));

            s.truncate(5); // page 2 removed: the version changes
            assertNotEquals(v, s.structureVersion());
            assertEquals(3, bt.refresh(), "the row again: two pages and the one entry of padding where page 2 was");
            assertEquals(s.pageIndex(0), entry(table, maxPages, 0, 0), "rewritten");
            assertEquals(BlockTable.PAD, entry(table, maxPages, 0, 2));

            table.set(INT_LE, 4, poison); // entry (0, 1)
            final Sequence child = s.fork(); // page 1 (partial) shared
            final int sharedSlot = s.pageIndex(1);
            s.append(1); // copy-on-write replaces page 1: the version changes
            assertNotEquals(sharedSlot, s.pageIndex(1));
            bt.refresh();
            assertEquals(s.pageIndex(1), entry(table, maxPages, 0, 1), "the copied page's slot, not the old one (or the poison)");
            assertEquals(6, lengths.get(INT_LE, 0));
            child.close();
            s.close();
        }
    }

    @Test
    void aClosedSequencesRowBecomesEmptyAndAnEmptiedRowIsPadded() {
        try (KvPool pool = pool(32); Arena arena = Arena.ofConfined()) {
            final MemorySegment table = arena.allocate(BlockTable.tableBytes(2, 4));
            final MemorySegment lengths = arena.allocate(BlockTable.lengthsBytes(2));
            final BlockTable bt = new BlockTable(2, 4, table, lengths);
            final Sequence a = pool.admit(10, 0).sequence();
            a.append(10);
            final Sequence b = pool.admit(7, 0).sequence();
            b.append(7);
            bt.set(0, a);
            bt.set(1, b);
            bt.refresh();
            assertCurrent(bt, table, lengths, "both rows");
            a.close(); // its pages go back to the pool: the table must not name them
            bt.set(1, null);
            bt.refresh();
            for (int i = 0; i < 4; i++) {
                assertEquals(BlockTable.PAD, entry(table, 4, 0, i));
                assertEquals(BlockTable.PAD, entry(table, 4, 1, i));
            }
            assertEquals(0, lengths.get(INT_LE, 0));
            assertEquals(0, lengths.get(INT_LE, 4));
            assertNull(bt.sequence(1));
            b.close();
        }
    }

    @Test
    void aRowWithMorePagesThanTheTableHoldsIsRefusedBeforeAnythingIsWritten() {
        try (KvPool pool = pool(32); Arena arena = Arena.ofConfined()) {
            final MemorySegment table = arena.allocate(BlockTable.tableBytes(2, 3));
            final MemorySegment lengths = arena.allocate(BlockTable.lengthsBytes(2));
            table.fill((byte) 0x77);
            lengths.fill((byte) 0x77);
            final BlockTable bt = new BlockTable(2, 3, table, lengths);
            final Sequence small = pool.admit(4, 0).sequence();
            small.append(4);
            final Sequence big = pool.admit(13, 0).sequence();
            big.append(13); // 4 pages
            bt.set(0, small);
            bt.set(1, big);
            final IllegalStateException e = assertThrows(IllegalStateException.class, bt::refresh);
            assertTrue(e.getMessage().contains("row 1") && e.getMessage().contains("4 pages") && e.getMessage().contains("3 pages per row"),
                e.getMessage());
            for (long o = 0; o < table.byteSize(); o++) {
                assertEquals((byte) 0x77, table.get(ValueLayout.JAVA_BYTE, o), "table byte " + o);
            }
            assertEquals(0x77777777, lengths.get(INT_LE, 0));
            big.truncate(12);
            bt.refresh();
            assertCurrent(bt, table, lengths, "after the truncate");
            small.close();
            big.close();
        }
    }

    @Test
    void entriesAreLittleEndianInt32() {
        try (KvPool pool = pool(300); Arena arena = Arena.ofConfined()) {
            final Sequence s = pool.admit(1100, 0).sequence();
            s.append(1100); // 275 pages: slots past 255 need two bytes
            final MemorySegment table = arena.allocate(BlockTable.tableBytes(1, 275));
            final MemorySegment lengths = arena.allocate(BlockTable.lengthsBytes(1));
            final BlockTable bt = new BlockTable(1, 275, table, lengths);
            bt.set(0, s);
            bt.refresh();
            for (int i = 0; i < 275; i++) {
                final int slot = s.pageIndex(i);
                for (int b = 0; b < 4; b++) {
                    assertEquals((byte) (slot >>> (8 * b)), table.get(ValueLayout.JAVA_BYTE, 4L * i + b), "page " + i + " byte " + b);
                }
            }
            assertEquals((byte) (1100 & 0xff), lengths.get(ValueLayout.JAVA_BYTE, 0));
            assertEquals((byte) (1100 >>> 8), lengths.get(ValueLayout.JAVA_BYTE, 1));
            s.close();
        }
    }

    @Test
    void refreshAllocatesNothing() {
        final com.sun.management.ThreadMXBean threads = (com.sun.management.ThreadMXBean) ManagementFactory.getThreadMXBean();
        final int rows = 8;
        final int maxPages = 64;
        try (KvPool pool = pool(1024); Arena arena = Arena.ofConfined()) {
            final BlockTable bt = new BlockTable(rows, maxPages, arena.allocate(BlockTable.tableBytes(rows, maxPages)),
                arena.allocate(BlockTable.lengthsBytes(rows)));
            final Sequence[] seqs = new Sequence[rows];
            for (int i = 0; i < rows; i++) {
                seqs[i] = pool.admit(1, 255).sequence();
                bt.set(i, seqs[i]);
            }
            final SplittableRandom r = new SplittableRandom(1);
            long allocated = 0;
            final int iterations = 30_000;
            final int warmup = 20_000;
            threads.getCurrentThreadAllocatedBytes();
            for (int it = 0; it < iterations; it++) {
                final Sequence s = seqs[r.nextInt(rows)];
                if (s.tokenCount() < 256) {
                    s.append(1 + r.nextInt(Math.min(5, 256 - s.tokenCount()))); // mostly appends: the incremental path
                }
                if (r.nextInt(10) == 0) {
                    s.truncate(r.nextInt(s.tokenCount() + 1)); // and whole-row rewrites
                }
                final long before = threads.getCurrentThreadAllocatedBytes();
                bt.refresh();
                if (it >= warmup) {
                    allocated += threads.getCurrentThreadAllocatedBytes() - before;
                }
            }
            assertTrue(allocated < iterations - warmup, allocated + " bytes allocated by " + (iterations - warmup) + " refreshes");
            for (Sequence s : seqs) {
                s.close();
            }
        }
    }

    @Test
    void segmentsTooSmallOrReadOnlyAreRefused() {
        try (Arena arena = Arena.ofConfined()) {
            final MemorySegment t = arena.allocate(BlockTable.tableBytes(3, 4));
            final MemorySegment l = arena.allocate(BlockTable.lengthsBytes(3));
            assertThrows(IllegalArgumentException.class, () -> new BlockTable(3, 4, t.asSlice(1), l));
            assertThrows(IllegalArgumentException.class, () -> new BlockTable(3, 4, t, l.asSlice(1)));
            assertThrows(IllegalArgumentException.class, () -> new BlockTable(3, 4, t.asReadOnly(), l));
            assertThrows(IllegalArgumentException.class, () -> new BlockTable(3, 0, t, l));
            assertThrows(IllegalArgumentException.class, () -> new BlockTable(-1, 4, t, l));
            final BlockTable bt = new BlockTable(3, 4, t, l);
            assertThrows(IndexOutOfBoundsException.class, () -> bt.set(3, null));
        }
    }

    @Test
    void aSequenceClosedAfterItsPoolLeavesAnEmptyRow() {
        // a shutdown with a request still running: the pool first, then the sequence
        try (Arena arena = Arena.ofConfined()) {
            final MemorySegment table = arena.allocate(BlockTable.tableBytes(1, 4));
            final MemorySegment lengths = arena.allocate(BlockTable.lengthsBytes(1));
            final BlockTable bt = new BlockTable(1, 4, table, lengths);
            final KvPool pool = TestPools.pool(32);
            final Sequence a = pool.admit(10, 0).sequence();
            a.append(10);
            bt.set(0, a);
            bt.refresh();
            pool.close();
            a.close();
            bt.refresh();
            assertEquals(0, lengths.get(INT_LE, 0), "a closed sequence's row has length 0");
            for (int i = 0; i < 4; i++) {
                assertEquals(BlockTable.PAD, table.get(INT_LE, 4L * i), "entry " + i + " of a closed sequence's row");
            }
        }
    }
}
