package io.kvpool;

import io.kvpool.storage.FillMode;

import org.junit.jupiter.api.Test;

import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.nio.ByteOrder;
import java.util.HashSet;
import java.util.Set;
import java.util.stream.IntStream;

import static org.junit.jupiter.api.Assertions.*;

/** What {@link Sequence}'s Javadoc promises beyond growing and shrinking: versions, block tables, messages, prefix chains. */
class SequenceContractTest {

    private static final int TPP = TestPools.SMALL.tokensPerPage();

    private static int[] ids(int n, int seed) {
        return IntStream.range(0, n).map(i -> seed * 1000 + i).toArray();
    }

    @Test
    void aCopyForcedByAnotherHoldersRetainComesFromUnreservedPagesAndTheAdmissionStaysCovered() {
        try (KvPool pool = TestPools.pool(4)) {
            final Sequence s = pool.admit(2, 6).sequence();              // 8 tokens: 2 pages reserved
            final Sequence other = pool.admit(2 * TPP, 0).sequence();    // the other 2: nothing unreserved is left
            s.append(2);                                                 // page 0 from the reservation, partial
            final long held = s.pageHandle(0);
            pool.retain(held);                                           // another holder: the next write must copy
            final PoolExhaustedException e = assertThrows(PoolExhaustedException.class, () -> s.append(1));
            assertTrue(e.getMessage().contains("0 of them reserved"), e.getMessage());
            assertEquals(1, s.reservedPages(), "the forced copy took the page the admitted tokens still need");
            assertEquals(-1, pool.appendEach(new Sequence[] {s}, 1, 1), "a batch step plans the copy the same way");
            assertEquals(1, s.reservedPages());
            pool.release(held);
            s.append(6);                                                 // every admitted token fits its reservation
            assertEquals(8, s.tokenCount());
            s.close();
            other.close();
        }
        try (KvPool pool = TestPools.pool(8)) { // the control: a fork's copy is covered by its credit
            final Sequence s = pool.admit(2, 6).sequence();
            s.append(2);
            final Sequence child = s.fork();
            final Sequence other = pool.admit((int) (pool.snapshot().free() - pool.snapshot().reserved()) * TPP, 0).sequence();
            s.append(1);                                                 // copy-on-write from the fork's credit
            s.append(5);
            assertEquals(8, s.tokenCount());
            child.close();
            s.close();
            other.close();
        }
    }

    @Test
    void theStructureVersionNeverRepeatsAfterAPageIsReplacedOrRemoved() {
        try (KvPool pool = TestPools.pool(8)) {
            final Sequence s = pool.admit(TPP + 2, 2 * TPP).sequence();
            s.append(TPP + 2);
            final Set<Long> seen = new HashSet<>();
            seen.add(s.structureVersion());
            final Sequence child = s.fork();
            s.append(1); // copy-on-write of the shared partial page 1: replaced
            assertTrue(seen.add(s.structureVersion()), "a replaced page must change the version");
            s.truncate(TPP); // page 1 removed
            assertTrue(seen.add(s.structureVersion()), "a removed page must change the version to a new value");
            final long afterTruncate = s.structureVersion();
            s.append(TPP + 1); // appends only: 9 tokens, 3 pages
            s.append(2);
            assertEquals(afterTruncate, s.structureVersion(), "appends leave the version unchanged");
            s.truncate(2 * TPP + 2); // within the last page: nothing removed or replaced
            assertEquals(afterTruncate, s.structureVersion());
            s.truncate(TPP);
            assertTrue(seen.add(s.structureVersion()));
            child.close();
            s.close();
        }
    }

    @Test
    void theBlockTableIsWrittenAsLittleEndianInt32s() {
        try (KvPool pool = TestPools.pool(8); Arena arena = Arena.ofConfined()) {
            final long loose = pool.tryAllocate(); // slot 0: the sequence's slots are not 0, 1, 2
            final Sequence s = pool.admit(3 * TPP, 0).sequence();
            s.append(3 * TPP);
            final MemorySegment table = arena.allocate(4 * 5);
            assertEquals(3, s.writeBlockTable(table, 4));
            for (int i = 0; i < 3; i++) {
                assertEquals(s.pageIndex(i), table.get(ValueLayout.JAVA_INT_UNALIGNED.withOrder(ByteOrder.LITTLE_ENDIAN), 4 + 4L * i));
            }
            final int[] copy = new int[5];
            assertEquals(3, s.copyBlockTable(copy, 1));
            assertArrayEquals(new int[] {0, s.pageIndex(0), s.pageIndex(1), s.pageIndex(2), 0}, copy);
            s.close();
            pool.release(loose);
        }
    }

    @Test
    void anAppendBeyondTheReservationNamesThePagesItLacks() {
        try (KvPool pool = TestPools.pool(4)) {
            final Sequence s = pool.admit(TPP, 0).sequence();       // 1 reserved
            final Sequence other = pool.admit(2 * TPP, 0).sequence(); // 2 reserved: 1 free page is unreserved
            final PoolExhaustedException e = assertThrows(PoolExhaustedException.class, () -> s.append(3 * TPP));
            assertEquals("sequence needs 3 more pages, 1 of them reserved; the pool has 1 free unreserved pages for the other 2"
                + " (capacity 4)", e.getMessage());
            assertEquals(0, s.pageCount());
            assertEquals(1, s.reservedPages());
            s.close();
            other.close();
        }
    }

    @Test
    void aForkThatCannotReserveNamesWhatItNeedsAndWhatIsFree() {
        try (KvPool pool = TestPools.pool(4)) {
            final Sequence s = pool.admit(TPP + 1, 0).sequence();
            s.append(TPP + 1);                                      // 2 pages, the last partial
            final Sequence other = pool.admit(TPP, 0).sequence();  // 1 of the 2 free pages reserved
            assertNull(s.tryFork());
            final PoolExhaustedException e = assertThrows(PoolExhaustedException.class, s::fork);
            // the child's copy of the shared last page, and this sequence's own: 2 needed, 1 free
            assertEquals("fork needs 2 pages reserved: 1 for the child (1 of them for copy-on-write of the shared last page) "
                + "and 1 for this sequence's own copy of it; 1 are free and unreserved", e.getMessage());
            other.close();
            s.fork().close();
            s.close();
        }
    }

    @Test
    void pagesAForkPublishesChainOntoItsParentsPrefix() {
        try (KvPool pool = TestPools.pool(16)) {
            final int[] prompt = ids(3 * TPP + 1, 1);
            final Sequence parent = pool.admit(prompt, 0, 5).sequence();
            parent.append(TPP);
            TokenTags.writeSequence(parent, 1, 0, TPP);
            parent.publish(prompt, 5);
            final Sequence child = parent.fork();
            child.append(prompt.length - TPP);
            TokenTags.writeSequence(child, 1, TPP, prompt.length);
            child.publish(prompt, 5); // pages 1 and 2, chained from page 0's hash and digest, copied from the parent
            assertEquals(3, child.publishedPages());
            final Sequence again = pool.admit(prompt, 0, 5).sequence();
            assertEquals(3 * TPP, again.tokenCount(), "the request sees the whole prefix the parent and the fork published");
            again.close();
            child.close();
            parent.close();
        }
    }

    @Test
    void pagesPublishedAfterAnAttachedPrefixChainOntoIt() {
        try (KvPool pool = TestPools.pool(16)) {
            final int[] prompt = ids(3 * TPP + 1, 2);
            final Sequence first = pool.admit(prompt, 0, TestPools.SALT).sequence();
            first.append(TPP);
            TokenTags.writeSequence(first, 1, 0, TPP);
            first.publish(prompt, TestPools.SALT);
            final Sequence second = pool.admit(prompt, 0, TestPools.SALT).sequence();
            assertEquals(TPP, second.tokenCount(), "page 0 attached");
            second.append(prompt.length - TPP);
            TokenTags.writeSequence(second, 1, TPP, prompt.length);
            second.publish(prompt, TestPools.SALT); // pages 1 and 2, chained from the attached page 0
            final Sequence third = pool.admit(prompt, 0, TestPools.SALT).sequence();
            assertEquals(3 * TPP, third.tokenCount());
            third.close();
            second.close();
            first.close();
        }
    }

    @Test
    void publishingWithTooFewTokenIdsIsRefused() {
        try (KvPool pool = TestPools.pool(4)) {
            final int[] prompt = ids(2 * TPP, 3);
            final Sequence s = pool.admit(prompt, 0, TestPools.SALT).sequence();
            s.append(2 * TPP);
            TokenTags.writeSequence(s, 1, 0, 2 * TPP);
            final IllegalArgumentException e = assertThrows(IllegalArgumentException.class,
                () -> s.publish(java.util.Arrays.copyOf(prompt, 2 * TPP - 1), TestPools.SALT));
            assertEquals("need token ids for 8 tokens (2 full pages), got 7", e.getMessage());
            assertEquals(0, pool.snapshot().publishedPrefixes());
            s.close();
        }
    }

    @Test
    void closeReleasesEveryPageAndThrowsTheFirstFailure() {
        try (KvPool pool = TestPools.builder(4).fillMode(FillMode.ZERO).build()) {
            final Sequence s = pool.admit(2 * TPP, 0).sequence();
            s.append(2 * TPP);
            final long first = s.pageHandle(0);
            final long last = s.pageHandle(1);
            pool.release(first); // stray releases: someone else dropped the sequence's references
            pool.release(last);
            final StaleHandleException e = assertThrows(StaleHandleException.class, s::close);
            assertTrue(e.getMessage().contains(PageHandle.toString(last)), "the last page is released first: " + e.getMessage());
            assertTrue(s.isClosed());
            final PoolSnapshot snap = pool.verifyAccounting();
            assertEquals(0, snap.openSequences());
            assertEquals(2, snap.staleHandlesRefused());
        }
    }

    @Test
    void aSequenceDescribesItself() {
        try (KvPool pool = TestPools.pool(4)) {
            final Sequence s = pool.admit(TPP + 1, TPP).sequence();
            s.append(TPP + 1);
            assertEquals("Sequence[tokens=5, pages=2, reserved=1]", s.toString());
            s.close();
            assertEquals("Sequence[tokens=0, pages=0, reserved=0, closed]", s.toString());
        }
    }
}
