package io.kvpool;

import org.junit.jupiter.api.Test;

import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;

import static io.kvpool.TokenTags.readSequence;
import static io.kvpool.TokenTags.tag;
import static io.kvpool.TokenTags.writeSequence;
import static org.junit.jupiter.api.Assertions.*;

/** Block tables, append/truncate, fork with copy-on-write, and misuse. */
class SequenceTest {

    @Test
    void appendAllocatesPagesAsTokensCrossPageBoundaries() {
        try (KvPool pool = TestPools.pool(8)) {
            final Sequence s = pool.admit(9, 7).sequence();
            s.append(0);
            assertEquals(0, s.pageCount());
            s.append(1);
            assertEquals(1, s.pageCount());
            s.append(3);
            assertEquals(1, s.pageCount());
            s.append(1);
            assertEquals(2, s.pageCount());
            s.append(11);
            assertEquals(16, s.tokenCount());
            assertEquals(4, s.pageCount());
            final int[] table = new int[6];
            assertEquals(4, s.copyBlockTable(table, 2));
            for (int i = 0; i < 4; i++) {
                assertEquals(s.pageIndex(i), table[2 + i]);
                assertEquals(PageHandle.slot(s.pageHandle(i)), s.pageIndex(i));
            }
            try (Arena arena = Arena.ofConfined()) {
                final MemorySegment kernelTable = arena.allocate(4 * 4);
                s.writeBlockTable(kernelTable, 0);
                for (int i = 0; i < 4; i++) {
                    assertEquals(s.pageIndex(i), kernelTable.getAtIndex(ValueLayout.JAVA_INT, i));
                }
            }
            assertThrows(IndexOutOfBoundsException.class, () -> s.pageIndex(4));
            s.close();
            pool.verifyAccounting();
        }
    }

    @Test
    void truncateReleasesTrailingPagesAndKeepsTheGrowthGuarantee() {
        try (KvPool pool = TestPools.pool(8)) {
            final Sequence s = pool.admit(16, 0).sequence();
            s.append(16);
            assertEquals(0, s.reservedPages());
            s.truncate(5);
            assertEquals(2, s.pageCount());
            assertEquals(5, s.tokenCount());
            assertEquals(2, s.reservedPages(), "released pages are re-reserved for regrowth");
            assertEquals(6, pool.snapshot().free());
            s.append(11);
            assertEquals(4, s.pageCount());
            assertThrows(IllegalArgumentException.class, () -> s.truncate(17));
            assertThrows(IllegalArgumentException.class, () -> s.truncate(-1));
            assertThrows(IllegalArgumentException.class, () -> s.append(-1));
            s.truncate(0);
            assertEquals(0, s.pageCount());
            s.close();
            final PoolSnapshot snap = pool.verifyAccounting();
            assertEquals(8, snap.free());
            assertEquals(0, snap.reserved());
        }
    }

    @Test
    void appendBeyondTheMaxContextIsRefused() {
        try (KvPool pool = TestPools.pool(4)) { // 16 tokens
            final Sequence s = pool.admit(10, 6).sequence();
            s.append(16);
            final IllegalArgumentException e = assertThrows(IllegalArgumentException.class, () -> s.append(1));
            assertTrue(e.getMessage().contains("16"), e.getMessage());
            s.close();
        }
    }

    @Test
    void forkSharesPagesAndCopiesTheSharedPartialPageOnWrite() {
        try (KvPool pool = TestPools.pool(16)) {
            final Sequence parent = pool.admit(6, 10).sequence();
            parent.append(6); // pages: [0..3] full, [4..5] partial
            writeSequence(parent, 1, 0, 6);
            final Sequence child = parent.fork();
            assertEquals(parent.pageIndex(0), child.pageIndex(0));
            assertEquals(parent.pageIndex(1), child.pageIndex(1));
            assertEquals(2, pool.refcountOfSlot(parent.pageIndex(0)));
            assertEquals(2, pool.refcountOfSlot(parent.pageIndex(1)));

            child.append(2); // writes into the shared partial page → copy first
            assertNotEquals(parent.pageIndex(1), child.pageIndex(1), "copy-on-write");
            assertEquals(parent.pageIndex(0), child.pageIndex(0), "full pages stay shared");
            assertEquals(1, pool.refcountOfSlot(parent.pageIndex(1)));
            for (int t = 0; t < 6; t++) {
                assertEquals(tag(1, t), readSequence(child, t), "the copy carries the parent's tokens");
            }
            writeSequence(child, 2, 6, 8);
            writeSequence(child, 2, 4, 5); // overwrite a copied token in the child
            parent.append(2);
            assertEquals(parent.pageIndex(1), parent.pageIndex(1));
            writeSequence(parent, 1, 6, 8);
            for (int t = 0; t < 8; t++) {
                assertEquals(tag(1, t), readSequence(parent, t), "the child's writes never reach the parent, token " + t);
            }
            assertEquals(tag(2, 4), readSequence(child, 4));
            assertEquals(tag(1, 5), readSequence(child, 5));
            assertEquals(tag(2, 7), readSequence(child, 7));
            parent.close();
            for (int t = 0; t < 4; t++) {
                assertEquals(tag(1, t), readSequence(child, t), "shared pages survive the parent's close");
            }
            child.close();
            final PoolSnapshot s = pool.verifyAccounting();
            assertEquals(16, s.free());
            assertEquals(0, s.reserved());
        }
    }

    @Test
    void aForkReservesItsOwnGrowthOrFails() {
        try (KvPool pool = TestPools.pool(6)) {
            final Sequence parent = pool.admit(6, 6).sequence(); // 3 pages reserved
            parent.append(6); // 2 used, 1 reserved; 3 free unreserved
            final Sequence child = parent.fork(); // child: growth 1 + cow 1; parent: cow 1 → 3
            assertEquals(2, child.reservedPages());
            assertEquals(2, parent.reservedPages());
            assertEquals(0, pool.snapshot().free() - pool.snapshot().reserved());
            final PoolExhaustedException e = assertThrows(PoolExhaustedException.class, parent::fork);
            assertTrue(e.getMessage().contains("2 pages reserved"), "the parent already holds its copy credit: " + e.getMessage());
            child.append(6);
            parent.append(6);
            assertEquals(12, child.tokenCount());
            assertEquals(12, parent.tokenCount());
            child.close();
            parent.close();
            pool.verifyAccounting();
        }
    }

    @Test
    void misuseOfAClosedSequenceIsRefused() {
        try (KvPool pool = TestPools.pool(4)) {
            final Sequence s = pool.admit(4, 0).sequence();
            s.append(4);
            s.close();
            s.close();
            assertThrows(IllegalStateException.class, s::fork);
            assertThrows(IllegalStateException.class, () -> s.append(1));
            assertThrows(IllegalStateException.class, () -> s.truncate(0));
            assertThrows(IllegalStateException.class, () -> s.publish(new int[4], TestPools.SALT));
            assertEquals(4, pool.verifyAccounting().free());
        }
    }

    @Test
    void forkOfASequenceWithAPagePinnedForReceivingIsRefusedCleanly() {
        try (KvPool pool = TestPools.pool(8)) {
            final Sequence s = pool.admit(7, 0).sequence();
            s.append(7); // the last page is partial, so a fork reserves a copy-on-write page for the parent
            pool.handles().pinWriter(s.pageHandle(1));
            assertThrows(IllegalSlotTransitionException.class, s::fork);
            assertEquals(1, pool.refcountOfSlot(s.pageIndex(0)), "the retain of page 0 was rolled back");
            assertEquals(0, s.reservedPages(), "the copy-on-write page reserved for the parent was given back");
            assertEquals(0, pool.snapshot().reserved());
            assertEquals(1, pool.snapshot().openSequences());
            pool.handles().commitReceive(s.pageHandle(1));
            s.close();
            final PoolSnapshot snap = pool.verifyAccounting();
            assertEquals(0, snap.reserved());
            assertEquals(8, snap.free());
        }
    }
}
