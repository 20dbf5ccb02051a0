package io.kvpool;

import org.junit.jupiter.api.Test;

import java.util.function.Consumer;
import java.util.stream.IntStream;

import static org.junit.jupiter.api.Assertions.*;

/**
 * {@link KvPool#verifyAccounting()} is what the stress, property and isolation tests rest on: each test here
 * corrupts one piece of the pool's bookkeeping through its package-private parts and shows that the check
 * names that imbalance. A check that passed everything would fail every one of these tests.
 */
class AccountingCheckTest {

    private static final int TPP = TestPools.SMALL.tokensPerPage();

    /** Corrupts a healthy pool (a few pages in use, one cached prefix page, reservations) and expects the check to fail. */
    /**
     * The free count comes from the free structures' sizes, so a page added to or lost from them is caught
     * first by the comparison of the counts with the scan (with both sets of numbers), before the per-slot check.
     */
    private static boolean caughtByCounts(String message) {
        return message.contains("incremental page counts disagree with a scan");
    }

    private static int firstOwned(KvPool pool) {
        for (int s = 0; s < pool.capacity(); s++) {
            if (pool.stateOfSlot(s) == SlotState.OWNED) {
                return s;
            }
        }
        throw new AssertionError("no OWNED slot");
    }

    private static String violation(Consumer<KvPool> corrupt) {
        try (KvPool pool = TestPools.pool(8)) {
            final Busy busy = Busy.on(pool);
            assertDoesNotThrow(pool::verifyAccounting, "the pool is healthy before the corruption");
            corrupt.accept(pool);
            final IllegalStateException e = assertThrows(IllegalStateException.class, pool::verifyAccounting);
            busy.hashCode(); // kept alive until here
            return e.getMessage();
        }
    }

    /** A pool in a typical state: one open sequence with a page and a reservation, one loose page, one cached prefix page. */
    private record Busy(Sequence open, long loose, int cachedSlot) {
        static Busy on(KvPool pool) {
            final int[] ids = IntStream.range(0, TPP + 1).toArray();
            final Sequence publisher = pool.admit(ids, 0, TestPools.SALT).sequence();
            publisher.append(ids.length);
            TokenTags.writeSequence(publisher, 1, 0, ids.length);
            publisher.publish(ids, TestPools.SALT);
            final int cachedSlot = publisher.pageIndex(0);
            publisher.close(); // page 0 stays cached, page 1 goes back plain
            final Sequence open = pool.admit(TPP, 2 * TPP).sequence();
            open.append(TPP);
            final long loose = pool.tryAllocate();
            final PoolSnapshot s = pool.snapshot();
            assertEquals(2, s.owned());
            assertEquals(1, s.cachedFree());
            assertEquals(2, s.reserved());
            return new Busy(open, loose, cachedSlot);
        }

        /** @return the one slot in the pool's cached-free LRU */
        static int cachedSlotOf(KvPool pool) {
            final int[] cached = IntStream.range(0, pool.capacity()).filter(pool.allocator().freePages()::isCached).toArray();
            assertEquals(1, cached.length);
            return cached[0];
        }
    }

    @Test
    void aHealthyPoolPassesAndTheScanEqualsTheCounts() {
        try (KvPool pool = TestPools.pool(8)) {
            Busy.on(pool);
            final PoolSnapshot counted = pool.snapshot();
            final PoolSnapshot scanned = pool.verifyAccounting();
            assertEquals(counted, scanned);
            assertEquals(new PoolSnapshot(8, 6, 2, 0, 0, 0, 0, 2, 1, 1, 1, 0, counted.allocations(), 0, 0, 0, 0, 0, 0, 0, 0),
                scanned);
        }
    }

    @Test
    void aLeakedPageKeepsThePoolBalancedButNotIdle() {
        try (KvPool pool = TestPools.pool(8)) {
            assertTrue(pool.snapshot().idle(), "a new pool");
            final Sequence s = pool.admit(2 * TPP, 0).sequence();
            s.append(2 * TPP);
            assertFalse(pool.snapshot().idle(), "an open sequence");
            final long h = s.pageHandle(0);
            pool.retain(h);
            s.close();
            final PoolSnapshot leaked = pool.verifyAccounting();
            assertTrue(leaked.balanced(), "the counts add up with a leak too");
            assertFalse(leaked.idle(), "a page retained and never released: " + leaked);
            pool.release(h);
            assertTrue(pool.verifyAccounting().idle());
            final long r = pool.tryReserve(TPP, 0);
            assertFalse(pool.snapshot().idle(), "a reservation");
            pool.cancelReservation(r);
            assertTrue(pool.snapshot().idle());
        }
    }

    @Test
    void verifyAccountingCatchesACountedStateTheScanDoesNotFind() {
        assertTrue(violation(p -> p.slotTable().counts().receiving.increment()).contains("incremental page counts disagree"));
        assertTrue(violation(p -> p.slotTable().counts().draining.increment()).contains("incremental page counts disagree"));
        assertTrue(violation(p -> p.slotTable().counts().quarantined.increment()).contains("incremental page counts disagree"));
        assertTrue(violation(p -> p.slotTable().counts().retired.increment()).contains("incremental page counts disagree"));
        // an OWNED page pushed onto the free stack: the free count (from the free structures) runs ahead of the scan
        final String lostEnd = violation(p -> p.allocator().freePages().pushPlain(firstOwned(p)));
        assertTrue(lostEnd.contains("incremental page counts disagree") && lostEnd.contains("counted free=7 owned=1")
            && lostEnd.contains("scanned free=6 owned=2"), lostEnd);
    }

    @Test
    void verifyAccountingCatchesReservationsBeyondTheFreePages() {
        final String tooMany = violation(p -> p.reservations().add(p.snapshot().free() - p.snapshot().reserved() + 1));
        assertTrue(tooMany.contains("does not balance"), tooMany);
        final String negative = violation(p -> p.reservations().remove(p.snapshot().reserved() + 1));
        assertTrue(negative.contains("does not balance") && negative.contains("reserved=-1"), negative);
    }

    @Test
    void reservingExactlyEveryFreePageStillBalances() {
        try (KvPool pool = TestPools.pool(8)) {
            Busy.on(pool);
            pool.reservations().add(pool.snapshot().free() - pool.snapshot().reserved());
            final PoolSnapshot s = pool.verifyAccounting();
            assertEquals(s.free(), s.reserved());
            pool.reservations().remove(s.reserved());
            assertEquals(0, pool.verifyAccounting().reserved());
        }
    }

    @Test
    void verifyAccountingCatchesAPageInTwoFreeStructures() {
        // a double free the structures absorbed: the slot is pushed onto the free stack a second time
        final String twice = violation(p -> {
            final int free = p.allocator().freePages().popPlain();
            p.allocator().freePages().pushPlain(free);
            p.allocator().onBecameFree(free, false);
        });
        assertTrue(twice.contains("appears 2 times in the free structures") || caughtByCounts(twice), twice);
    }

    @Test
    void verifyAccountingCatchesAFreePageInNoFreeStructure() {
        final int[] lost = new int[1];
        final String message = violation(p -> lost[0] = p.allocator().freePages().popPlain());
        assertTrue(message.contains("slot " + lost[0] + " is FREE") && message.contains("appears 0 times") || caughtByCounts(message), message);
    }

    @Test
    void verifyAccountingCatchesAPageInUseOnTheFreeStack() {
        final long[] inUse = new long[1];
        final String message = violation(p -> {
            inUse[0] = p.tryAllocate();
            p.allocator().freePages().pushPlain(PageHandle.slot(inUse[0]));
        });
        assertTrue(message.contains("slot " + PageHandle.slot(inUse[0]) + " is OWNED") && message.contains("appears 1 times") || caughtByCounts(message), message);
    }

    @Test
    void verifyAccountingCatchesAnInUsePageSwappedForAFreeOneOnTheFreeStack() {
        // every count and every size still agrees: only the per-slot check sees the two wrong slots
        final int[] swapped = new int[2];
        final String message = violation(p -> {
            swapped[0] = p.allocator().freePages().popPlain();
            swapped[1] = firstOwned(p);
            p.allocator().freePages().pushPlain(swapped[1]);
        });
        final int first = Math.min(swapped[0], swapped[1]);
        final String expected = first == swapped[0] ? "slot " + first + " is FREE" : "slot " + first + " is OWNED";
        assertTrue(message.contains(expected) && message.contains("times in the free structures"), message);
    }

    @Test
    void verifyAccountingCatchesACachedFreePageWithoutAPublishedPrefix() {
        final String message = violation(p -> p.allocator().freePages().pushCached(p.allocator().freePages().popPlain()));
        assertTrue(message.contains("holds no published prefix"), message);
    }

    @Test
    void verifyAccountingCatchesACachedPageCountedButNotInTheLru() {
        // the LRU entry moves to the plain stack: every FREE slot is still in exactly one structure, but the
        // pages counted as holding a prefix are no longer where eviction and revival look for them
        final String message = violation(p -> {
            final int cached = Busy.cachedSlotOf(p);
            p.allocator().freePages().removeCached(cached);
            p.allocator().freePages().pushPlain(cached);
        });
        assertTrue(message.contains("cached free pages are counted 1 but the LRU holds 0"), message);
    }

    @Test
    void verifyAccountingCatchesACachedPageReturnedTwice() {
        // a second free of a cached prefix page: counted twice and linked into the LRU twice; each slot still
        // appears once, but the free structures now hold one page more than there are FREE slots
        final String message = violation(p -> {
            p.allocator().onBecameFree(Busy.cachedSlotOf(p), false);
            p.snapshot(); // takes the returned page into the LRU
        });
        assertTrue(message.contains("free structures hold 7 pages and the allocator cache 0 but 6 slots are FREE") || caughtByCounts(message), message);
    }

    @Test
    void verifyAccountingCountsTheAllocatorCacheAsAFreeStructure() {
        try (KvPool pool = TestPools.builder(6).threadCache(4).build()) {
            final long[] h = new long[4];
            for (int i = 0; i < h.length; i++) {
                h[i] = pool.tryAllocate(); // this thread owns the cache
            }
            for (long x : h) {
                pool.release(x);           // into the owner's cache
            }
            assertEquals(4, pool.allocator().cache().sizeQuiescent());
            final PoolSnapshot s = pool.verifyAccounting(); // from the owner: the cache is flushed first
            assertEquals(6, s.free());
            final long again = pool.tryAllocate();
            pool.release(again);           // one page in the cache again
            final Throwable[] failure = new Throwable[1];
            final Thread other = Thread.ofPlatform().start(() -> {
                try {
                    assertEquals(1, pool.allocator().cache().sizeQuiescent());
                    assertEquals(6, pool.verifyAccounting().free(), "a live owner's cached page is free and counted once");
                    pool.allocator().cache().forEachQuiescent(s2 -> pool.allocator().freePages().pushPlain(s2));
                    final IllegalStateException e = assertThrows(IllegalStateException.class, pool::verifyAccounting);
                    assertTrue(e.getMessage().contains("appears 2 times") || caughtByCounts(e.getMessage()), e.getMessage());
                    pool.allocator().freePages().popPlain(); // undone: the owner's flush at close needs the room
                } catch (Throwable t) {
                    failure[0] = t;
                }
            });
            assertDoesNotThrow(() -> other.join());
            assertNull(failure[0]);
        }
    }

    // ---- PoolSnapshot.balanced(), the invariant itself ----

    private static PoolSnapshot snap(long capacity, long free, long owned, long receiving, long draining, long quarantined,
                                     long retired, long reserved) {
        return new PoolSnapshot(capacity, free, owned, receiving, draining, quarantined, retired, reserved, 0, 0, 0, 0, 0, 0, 0,
            0, 0, 0, 0, 0, 0);
    }

    @Test
    void balancedNeedsEveryStateToAddUpToTheCapacity() {
        assertTrue(snap(21, 1, 2, 3, 4, 5, 6, 0).balanced());
        assertFalse(snap(22, 1, 2, 3, 4, 5, 6, 0).balanced(), "a page missing from every state");
        assertFalse(snap(20, 1, 2, 3, 4, 5, 6, 0).balanced(), "a page counted in two states");
        // each state counts: one page moved out of it (and not into another) unbalances
        assertFalse(snap(21, 0, 2, 3, 4, 5, 6, 0).balanced());
        assertFalse(snap(21, 1, 1, 3, 4, 5, 6, 0).balanced());
        assertFalse(snap(21, 1, 2, 2, 4, 5, 6, 0).balanced());
        assertFalse(snap(21, 1, 2, 3, 3, 5, 6, 0).balanced());
        assertFalse(snap(21, 1, 2, 3, 4, 4, 6, 0).balanced());
        assertFalse(snap(21, 1, 2, 3, 4, 5, 5, 0).balanced());
    }

    @Test
    void balancedNeedsTheReservationBetweenZeroAndTheFreePages() {
        assertTrue(snap(10, 4, 6, 0, 0, 0, 0, 0).balanced());
        assertTrue(snap(10, 4, 6, 0, 0, 0, 0, 4).balanced(), "every free page reserved");
        assertFalse(snap(10, 4, 6, 0, 0, 0, 0, 5).balanced(), "more reserved than free");
        assertFalse(snap(10, 4, 6, 0, 0, 0, 0, -1).balanced(), "a negative reservation");
    }

    @Test
    void theSnapshotsDerivedCountsAndReport() {
        final PoolSnapshot s = new PoolSnapshot(20, 5, 6, 3, 2, 1, 3, 4, 2, 7, 1, 2, 40, 9, 8, 11, 12, 13, 14, 15, 16);
        assertEquals(12, s.inUse());
        assertEquals(28, s.pagesFreed());
        final String report = s.outstandingReport();
        assertTrue(report.contains("12 of 20 in use (owned 6, receiving 3, draining 2, quarantined 1), 1 open sequences, "
            + "2 open reservations, 4 pages reserved; 6 pages are pinned"), report);
        assertEquals("free=5 owned=6 receiving=3 draining=2 quarantined=1 retired=3", s.pageCountsString());
        assertEquals("capacity=20 free=5 (cached 2) owned=6 receiving=3 draining=2 quarantined=1 retired=3 reserved=4"
            + " publishedPrefixes=7 sequences=1 reservations=2 | allocations=40 prefixHits=9 evictions=8 rejected{contextTooLong=11, exceedsPool=12,"
            + " retryLater=13} staleRefused=14 foreignRefused=15 quarantineEvents=16", s.toString());
        assertEquals(new PoolSnapshot(20, 1, 2, 3, 4, 5, 6, 4, 2, 7, 1, 2, 40, 9, 8, 11, 12, 13, 14, 15, 16),
            s.withPageCounts(1, 2, 3, 4, 5, 6), "only the page counts are replaced");
    }

    @Test
    void theCloseReportNamesEachKindOfOutstandingWork() {
        assertNull(snap(4, 4, 0, 0, 0, 0, 0, 0).outstandingReport());
        assertNull(snap(4, 3, 0, 0, 0, 0, 1, 0).outstandingReport(), "retired pages are not outstanding");
        final String owned = snap(4, 3, 1, 0, 0, 0, 0, 0).outstandingReport();
        assertTrue(owned.contains("1 of 4 in use") && !owned.contains("pinned"), owned);
        for (int pinned = 0; pinned < 3; pinned++) {
            final PoolSnapshot s = snap(4, 3, 0, pinned == 0 ? 1 : 0, pinned == 1 ? 1 : 0, pinned == 2 ? 1 : 0, 0, 0);
            assertTrue(s.outstandingReport().contains("1 pages are pinned for remote writes"), s.outstandingReport());
        }
        final PoolSnapshot sequence = new PoolSnapshot(4, 4, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0);
        assertTrue(sequence.outstandingReport().contains("1 open sequences"));
        final PoolSnapshot reservation = new PoolSnapshot(4, 4, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0);
        assertTrue(reservation.outstandingReport().contains("1 open reservations"));
    }
}
