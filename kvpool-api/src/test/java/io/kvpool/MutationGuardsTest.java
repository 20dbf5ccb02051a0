package io.kvpool;

import io.kvpool.PoolFaultPathsTest.CountingHookWords;
import io.kvpool.PoolFaultPathsTest.FailingCopyStorage;
import io.kvpool.storage.FillMode;

import org.junit.jupiter.api.Test;

import java.util.stream.IntStream;

import static org.junit.jupiter.api.Assertions.*;

/**
 * Safety checks that mutation testing (docs/testing.md) found untested: each test here fails when its check is
 * removed or inverted.
 */
class MutationGuardsTest {

    private static final int TPP = TestPools.SMALL.tokensPerPage();

    private static int[] ids(int n, int seed) {
        return IntStream.range(0, n).map(i -> seed * 1000 + i).toArray();
    }

    /** A sequence holding {@code ids}, every token written (so the canary check lets it publish). */
    private static Sequence written(KvPool pool, int[] ids, long salt) {
        final Sequence s = pool.admit(ids, 0, salt).sequence();
        final int attached = s.tokenCount();
        s.append(ids.length - attached);
        TokenTags.writeSequence(s, 1, attached, ids.length);
        return s;
    }

    // ---- publish ----

    @Test
    void aPageAPeerIsStillWritingIsNeverPublished() {
        try (KvPool pool = TestPools.pool(6)) {
            final int[] prompt = ids(2 * TPP + 1, 1);
            final Sequence s = written(pool, prompt, TestPools.SALT);
            final long receiving = s.pageHandle(1);
            pool.handles().pinWriter(receiving); // a peer writes page 1 (RECEIVING)
            final IllegalSlotTransitionException e = assertThrows(IllegalSlotTransitionException.class, () -> s.publish(prompt, TestPools.SALT));
            assertTrue(e.getMessage().contains("only OWNED pages can be published (page 1"), e.getMessage());
            assertEquals(0, pool.snapshot().publishedPrefixes(), "nothing is published, not even page 0");
            assertEquals(0, s.publishedPages());
            assertEquals(1, pool.refcountOfSlot(s.pageIndex(0)), "publish dropped the reference it took on page 0");
            assertEquals(1, pool.refcountOfSlot(s.pageIndex(1)));
            assertEquals(SlotState.RECEIVING, pool.stateOfSlot(s.pageIndex(1)));
            final Sequence other = pool.admit(prompt, 0, TestPools.SALT).sequence();
            assertEquals(0, other.tokenCount(), "another request attached a page a peer was still writing");
            other.close();
            pool.handles().commitReceive(receiving); // the peer is done
            s.publish(prompt, TestPools.SALT);
            assertEquals(2, s.publishedPages());
            assertEquals(2, pool.snapshot().publishedPrefixes());
            assertEquals(1, pool.refcountOfSlot(s.pageIndex(0)));
            final Sequence third = pool.admit(prompt, 0, TestPools.SALT).sequence();
            assertEquals(2 * TPP, third.tokenCount());
            third.close();
            s.close();
            final PoolSnapshot snap = pool.verifyAccounting();
            assertEquals(0, snap.inUse());
            assertEquals(2, snap.cachedFree());
        }
    }

    // ---- attach: revival ----

    @Test
    void aCachedPageThatRetiresWhenRevivedIsNeitherAttachedNorLeftInTheIndex() {
        try (KvPool pool = TestPools.pool(4)) {
            final int[] prompt = ids(2 * TPP + 1, 2);
            final Sequence a = written(pool, prompt, TestPools.SALT);
            a.publish(prompt, TestPools.SALT);
            final int first = a.pageIndex(0);
            a.close(); // both full pages cached, FREE
            assertEquals(2, pool.snapshot().cachedFree());
            pool.slotTable().forceGenerationOfFreeSlot(first, PageHandle.MAX_GENERATION); // its next tenancy cannot be tagged
            final Sequence b = pool.admit(prompt, 0, TestPools.SALT).sequence();
            assertEquals(0, b.tokenCount(), "a page that retired on revival was attached");
            assertEquals(0, b.pageCount());
            assertEquals(3, b.reservedPages(), "no reserved page was consumed");
            assertEquals(SlotState.RETIRED, pool.stateOfSlot(first));
            final PoolSnapshot s = pool.verifyAccounting();
            assertEquals(1, s.retired());
            assertEquals(1, s.publishedPrefixes(), "the retired page left the prefix index");
            assertEquals(0, s.prefixHits());
            b.append(prompt.length);
            assertTrue(IntStream.range(0, b.pageCount()).noneMatch(i -> b.pageIndex(i) == first));
            b.close();
            assertEquals(3, pool.verifyAccounting().free());
        }
    }

    @Test
    void aPublishedPageReleasedWhileAdmissionAttachesItIsRevivedNotMissed() {
        final CountingHookWords[] words = new CountingHookWords[1];
        final KvPoolBuilder builder = TestPools.builder(4);
        builder.slotWords = n -> words[0] = new CountingHookWords(n);
        try (KvPool pool = builder.build()) {
            final int[] prompt = ids(TPP + 1, 3);
            final Sequence a = written(pool, prompt, TestPools.SALT);
            a.publish(prompt, TestPools.SALT);
            final long shared = a.pageHandle(0);
            pool.retain(shared);
            a.close(); // page 0 is OWNED by the extra reference alone
            // admission reads page 0's word as OWNED; before its RETAIN the last reference goes (another thread, lock-free)
            words[0].arm(PageHandle.slot(shared), 0, () -> pool.release(shared));
            final Sequence b = pool.admit(prompt, 0, TestPools.SALT).sequence();
            assertEquals(TPP, b.tokenCount(), "the page, freed a moment ago, is on its way to the LRU: attach must take it in first");
            assertEquals(PageHandle.slot(shared), b.pageIndex(0));
            assertNotEquals(shared, b.pageHandle(0), "revived as a new tenancy");
            assertEquals(1, b.reservedPages(), "the revival consumed one of the two reserved pages");
            b.close();
            assertEquals(0, pool.verifyAccounting().inUse());
        }
    }

    @Test
    void aPublishedPageThatCannotTakeAnotherReferenceIsNotAttached() {
        final SlotWords[] words = new SlotWords[1];
        final KvPoolBuilder builder = TestPools.builder(4);
        builder.slotWords = n -> words[0] = SlotWords.ofArray(n);
        try (KvPool pool = builder.build()) {
            final int[] prompt = ids(TPP + 1, 8);
            final Sequence a = written(pool, prompt, TestPools.SALT);
            a.publish(prompt, TestPools.SALT);
            final int slot = a.pageIndex(0);
            final long one = words[0].getVolatile(slot);
            // page 0 is OWNED and published, but holds the most references a page can have: RETAIN fails, and
            // the page is in no free structure, so it cannot be revived either
            words[0].setRelease(slot, SlotStateMachine.word(PageHandle.generation(a.pageHandle(0)), SlotStateMachine.OWNED,
                SlotStateMachine.MAX_REFCOUNT));
            final Sequence b = pool.admit(prompt, 0, TestPools.SALT).sequence();
            assertEquals(0, b.tokenCount(), "a page that took no reference was attached");
            assertEquals(0, b.pageCount());
            assertEquals(2, b.reservedPages(), "no reserved page was used or given back");
            assertEquals(0, pool.snapshot().prefixHits());
            words[0].setRelease(slot, one);
            b.close();
            a.close();
            assertEquals(1, pool.verifyAccounting().cachedFree());
        }
    }

    @Test
    void anAllocationThatEvictsManyCachedPagesFillsEveryOneOfThem() {
        final int pages = 11;
        try (KvPool pool = TestPools.builder(pages).build()) { // CANARY
            final int[] prompt = ids((pages - 1) * TPP + 1, 9);
            final Sequence a = written(pool, prompt, TestPools.SALT);
            a.publish(prompt, TestPools.SALT);
            a.close(); // 10 pages cached (written, not filled), 1 plain
            assertEquals(pages - 1, pool.snapshot().cachedFree());
            final Sequence b = pool.admit(prompt.length, 0).sequence();
            b.append(prompt.length); // one allocation: the plain page, then 10 evictions
            assertEquals(pages - 1, pool.snapshot().evictions());
            for (int i = 0; i < b.pageCount(); i++) {
                assertEquals(0, pool.firstCanaryToken(b.pageHandle(i), 0, TPP), "page " + i + " still holds its last tenant's bytes");
            }
            b.close();
        }
    }

    @Test
    void theFreeGaugeCountsPagesStillOnTheReturnStack() {
        try (KvPool pool = TestPools.pool(3)) { // no allocator cache: a release goes to the return stack
            final long h = pool.tryAllocate();
            assertEquals(2, pool.metrics().free());
            pool.release(h); // not drained until the next locked operation needs it
            assertEquals(3, pool.metrics().free(), "the page on the return stack is free");
            assertEquals(3, pool.snapshot().free());
        }
    }

    @Test
    void aLooseAllocationDrainsTheReturnStackOnlyWhenThePlainPagesRunOut() {
        try (KvPool pool = TestPools.pool(3)) { // no allocator cache: every release goes to the return stack
            final long first = pool.tryAllocate();
            assertEquals(0, PageHandle.slot(first));
            pool.release(first);
            final long second = pool.tryAllocate();
            assertEquals(1, PageHandle.slot(second), "the plain stack's next page, while slot 0 waits to be drained");
            final long third = pool.tryAllocate();
            assertEquals(2, PageHandle.slot(third));
            final long fourth = pool.tryAllocate();
            assertEquals(0, PageHandle.slot(fourth), "the plain pages ran out: the return stack was drained");
            assertEquals(PageHandle.EXHAUSTED, pool.tryAllocate());
            for (long h : new long[] {second, third, fourth}) {
                pool.release(h);
            }
            assertEquals(3, pool.verifyAccounting().free());
        }
    }

    // ---- the return stack ----

    @Test
    void pagesFreedSinceTheLastAllocationAreTakenBeforeACachedPageIsEvicted() {
        try (KvPool pool = TestPools.pool(3)) {
            final int[] prompt = ids(TPP + 1, 4);
            final Sequence a = written(pool, prompt, TestPools.SALT);
            a.publish(prompt, TestPools.SALT);
            a.close(); // one page cached, one plain
            final long loose = pool.tryAllocate();
            final Sequence b = pool.admit(2 * TPP, 0).sequence(); // the plain page and the cached one
            pool.release(loose); // waits on the return stack
            b.append(2 * TPP);  // takes the last plain page, then the one just freed; no eviction
            final PoolSnapshot s = pool.snapshot();
            assertEquals(0, s.evictions(), "a cached prefix was evicted while a freed plain page waited");
            assertEquals(1, s.cachedFree());
            b.close();
            final Sequence c = pool.admit(prompt, 0, TestPools.SALT).sequence();
            assertEquals(TPP, c.tokenCount(), "the prefix is still cached");
            c.close();
        }
    }

    // ---- close ----

    @Test
    void everyPinnedStateKeepsTheStorageOfAClosedPoolUntilItsPinEnds() {
        for (int state = 0; state < 3; state++) {
            final KvPool pool = TestPools.pool(2);
            final long h = pool.tryAllocate();
            pool.handles().pinWriter(h);
            if (state >= 1) {
                pool.handles().beginDrain(h);
            }
            if (state == 2) {
                pool.handles().quarantine(h);
            }
            final SlotState pinned = pool.stateOfSlot(PageHandle.slot(h));
            pool.close();
            assertNotNull(pool.storage().hostPage(PageHandle.slot(h)), "closed with a " + pinned + " page: a peer may still write");
            assertEquals(1, pool.lifetime().pinnedAfterClose());
            switch (state) {
                case 0 -> pool.handles().commitReceive(h);
                case 1 -> pool.handles().drained(h);
                default -> pool.handles().releaseQuarantine(h);
            }
            assertThrows(IllegalStateException.class, () -> pool.storage().hostPage(0), "the last pin of " + pinned + " ended");
        }
    }

    @Test
    void aClosedPoolRefusesToValidateOrDescribeHandles() {
        final KvPool pool = TestPools.pool(4);
        final long h = pool.tryAllocate();
        final long toOpen = pool.tryReserve(1, 0);
        final long toCancel = pool.tryReserve(1, 0);
        assertTrue(toOpen > 0 && toCancel > 0);
        assertEquals(PageHandle.slot(h), pool.validate(h));
        assertEquals(SlotState.OWNED, pool.state(h));
        pool.close();
        assertThrows(IllegalStateException.class, () -> pool.validate(h));
        assertThrows(IllegalStateException.class, () -> pool.state(h));
        assertThrows(IllegalStateException.class, () -> pool.page(h));
        assertThrows(IllegalStateException.class, () -> pool.firstCanaryToken(h, 0, 1));
        assertThrows(IllegalStateException.class, () -> pool.retain(h));
        assertThrows(IllegalStateException.class, pool::flushAllocatorCache);
        assertThrows(IllegalStateException.class, () -> pool.tryReserve(1, 0));
        assertThrows(IllegalStateException.class, () -> pool.openSequence(toOpen));
        assertThrows(IllegalStateException.class, () -> pool.cancelReservation(toCancel));
        assertEquals(2, pool.snapshot().openReservations(), "a closed pool neither opens nor cancels a reservation");
        assertEquals(SlotState.OWNED, pool.stateOfSlot(PageHandle.slot(h)), "the monitoring views still answer");
        assertEquals(1, pool.refcountOfSlot(PageHandle.slot(h)));
    }

    @Test
    void aClosedPoolRefusesPageAccessEvenWhileAPinKeepsItsStorage() {
        final KvPool pool = TestPools.pool(4);
        final long owned = pool.tryAllocate();
        final long pinned = pool.tryAllocate();
        pool.handles().pinWriter(pinned);
        pool.close();
        assertNotNull(pool.storage().hostPage(PageHandle.slot(owned)), "the pin keeps the storage: only the pool's check refuses");
        assertThrows(IllegalStateException.class, () -> pool.page(owned));
        assertThrows(IllegalStateException.class, () -> pool.firstCanaryToken(owned, 0, 1));
        pool.handles().commitReceive(pinned);
    }

    @Test
    void aReservationIdThatWasNeverIssuedIsRefused() {
        try (KvPool pool = TestPools.pool(4)) {
            // index 1 and 2, generation 0: no reservation has used them yet
            assertThrows(IllegalArgumentException.class, () -> pool.cancelReservation(1));
            assertThrows(IllegalArgumentException.class, () -> pool.openSequence(2));
            final PoolSnapshot s = pool.verifyAccounting();
            assertEquals(0, s.openReservations());
            assertEquals(0, s.openSequences());
            assertEquals(0, s.reserved());
        }
    }

    @Test
    void anAppendRacingCloseThrowsInsteadOfAllocatingFromTheClosedPool() {
        final CountingHookWords[] words = new CountingHookWords[1];
        final KvPoolBuilder builder = TestPools.builder(4);
        builder.slotWords = n -> words[0] = new CountingHookWords(n);
        final KvPool pool = builder.build();
        final Sequence s = pool.admit(2 * TPP, 0).sequence();
        s.append(1);
        // append has checked that the pool is open; it reads its partial last page (copy-on-write?) and meanwhile the pool closes
        words[0].arm(s.pageIndex(0), 0, pool::close);
        assertThrows(IllegalStateException.class, () -> s.append(TPP));
        assertTrue(pool.isClosed());
        assertEquals(1, s.pageCount(), "no page was allocated from the closed pool");
        assertEquals(1, pool.verifyAccounting().owned());
    }

    @Test
    void aTruncateRacingCloseReservesNothingInTheClosedPool() {
        final CountingHookWords[] words = new CountingHookWords[1];
        final KvPoolBuilder builder = TestPools.builder(4);
        builder.slotWords = n -> words[0] = new CountingHookWords(n);
        final KvPool pool = builder.build();
        final Sequence s = pool.admit(2 * TPP, 0).sequence();
        s.append(2 * TPP); // nothing reserved any more
        // truncate has checked that the pool is open; it releases page 1 and meanwhile the pool closes
        words[0].arm(s.pageIndex(1), 0, pool::close);
        assertThrows(IllegalStateException.class, () -> s.truncate(TPP));
        assertTrue(pool.isClosed());
        assertEquals(0, s.reservedPages(), "the top-up reserved a page of the closed pool");
        assertEquals(0, pool.snapshot().reserved());
    }

    @Test
    void aPublishRacingCloseThrowsInsteadOfPublishingIntoTheClosedPool() {
        final CountingHookWords[] words = new CountingHookWords[1];
        final KvPoolBuilder builder = TestPools.builder(4);
        builder.slotWords = n -> words[0] = new CountingHookWords(n);
        final KvPool pool = builder.build();
        final long pinned = pool.tryAllocate();
        pool.handles().pinWriter(pinned); // keeps the storage after close, so the canary check still reads it
        final int[] prompt = ids(TPP + 1, 5);
        final Sequence s = written(pool, prompt, TestPools.SALT);
        // publish has checked that the pool is open; it checks page 0 for the canary and meanwhile the pool closes
        words[0].arm(s.pageIndex(0), 0, pool::close);
        assertThrows(IllegalStateException.class, () -> s.publish(prompt, TestPools.SALT));
        assertTrue(pool.isClosed());
        assertEquals(0, pool.snapshot().publishedPrefixes(), "nothing was published into the closed pool");
        pool.handles().commitReceive(pinned);
    }

    @Test
    void publishingAPageSomeoneElseFreedIsRefusedAndCountedAsStale() {
        try (KvPool pool = TestPools.builder(4).fillMode(FillMode.ZERO).build()) { // no canary check before publish
            final int[] prompt = ids(TPP + 1, 6);
            final Sequence s = pool.admit(prompt, 0, TestPools.SALT).sequence();
            s.append(prompt.length);
            pool.release(s.pageHandle(0)); // a stray release frees the sequence's page 0
            final StaleHandleException e = assertThrows(StaleHandleException.class, () -> s.publish(prompt, TestPools.SALT));
            assertTrue(e.getMessage().startsWith("RETAIN refused: stale handle "), e.getMessage());
            assertEquals(1, pool.snapshot().staleHandlesRefused());
            assertEquals(0, pool.snapshot().publishedPrefixes());
            assertThrows(StaleHandleException.class, s::close);
        }
    }

    @Test
    void aFailedCopyOnWriteGivesThePoolsReservedCountBackToo() {
        final FailingCopyStorage[] storage = new FailingCopyStorage[1];
        try (KvPool pool = TestPools.builder(8).storage((l, n) -> storage[0] = new FailingCopyStorage(l, n)).build()) {
            final Sequence parent = pool.admit(TPP + 1, TPP).sequence();
            parent.append(TPP + 1);
            final Sequence child = parent.fork();
            final PoolSnapshot before = pool.verifyAccounting();
            storage[0].failNextCopy = true;
            assertThrows(IllegalStateException.class, () -> child.append(1));
            final PoolSnapshot after = pool.verifyAccounting();
            assertEquals(before.reserved(), after.reserved(), "the allocation's reserved pages are reserved again");
            assertEquals(before.owned(), after.owned());
            child.append(1);
            child.close();
            parent.close();
        }
    }

    @Test
    void anAllocationThatFindsTooFewPagesAfterASlotRetiredAllocatesNothing() {
        try (KvPool pool = TestPools.pool(2)) {
            final Sequence s = pool.admit(2 * TPP, 0).sequence(); // both pages reserved
            pool.slotTable().forceGenerationOfFreeSlot(0, PageHandle.MAX_GENERATION); // slot 0 retires when taken
            final PoolExhaustedException e = assertThrows(PoolExhaustedException.class, () -> s.append(2 * TPP));
            assertEquals("sequence needs 2 more pages, 2 of them reserved; the pool has 0 free unreserved pages for the other 0"
                + " (capacity 2)", e.getMessage());
            assertEquals(0, s.pageCount());
            assertEquals(2, s.reservedPages());
            assertEquals(SlotState.RETIRED, pool.stateOfSlot(0));
            assertEquals(SlotState.FREE, pool.stateOfSlot(1), "the page taken before the shortfall is free again");
            final PoolSnapshot snap = pool.snapshot();
            assertEquals(0, snap.owned());
            assertEquals(1, snap.retired());
            assertEquals(1, snap.free());
            s.close();
            assertEquals(1, pool.verifyAccounting().free());
        }
    }

    @Test
    void aShortAllocationReleasesOnlyThePagesItTookAndTheReservationStillServes() {
        try (KvPool pool = TestPools.pool(4)) {
            final Sequence s = pool.admit(4 * TPP, 0).sequence(); // every page reserved
            s.append(2 * TPP);                                    // slots 0 and 1; the sequence reuses their handle array
            pool.slotTable().forceGenerationOfFreeSlot(2, PageHandle.MAX_GENERATION); // slot 2 retires when taken
            assertThrows(PoolExhaustedException.class, () -> s.append(2 * TPP)); // slot 2 retires, slot 3 is given back
            assertEquals(2, s.pageCount());
            assertEquals(SlotState.OWNED, pool.stateOfSlot(s.pageIndex(1)), "the undo released a page the sequence holds");
            assertEquals(1, pool.refcountOfSlot(s.pageIndex(1)));
            assertEquals(SlotState.RETIRED, pool.stateOfSlot(2));
            assertEquals(SlotState.FREE, pool.stateOfSlot(3));
            assertEquals(2, s.reservedPages(), "2 reserved, 1 page left in service");
            s.append(TPP); // from the reservation: the one page left is taken, not refused for want of unreserved pages
            assertEquals(3, s.pageCount());
            assertEquals(3, s.pageIndex(2));
            s.close();
            final PoolSnapshot snap = pool.verifyAccounting();
            assertEquals(3, snap.free());
            assertEquals(1, snap.retired());
            assertEquals(0, snap.reserved());
        }
    }

    /** Host storage that counts the fills of each page. */
    static final class CountingFillStorage extends ForwardingStorage {
        final int[] fills;

        CountingFillStorage(KvLayout layout, int pages) {
            super(layout, pages);
            fills = new int[pages];
        }

        @Override
        public void fill(int page, FillMode mode) {
            fills[page]++;
            d.fill(page, mode);
        }
    }

    @Test
    void aShortAllocationForgetsTheFillsOfThePagesItEvictedAndGaveBack() {
        final CountingFillStorage[] storage = new CountingFillStorage[1];
        try (KvPool pool = TestPools.builder(3).storage((l, n) -> storage[0] = new CountingFillStorage(l, n)).build()) {
            final int[] prompt = ids(TPP + 1, 10);
            final Sequence a = written(pool, prompt, TestPools.SALT);
            a.publish(prompt, TestPools.SALT);
            final int cached = a.pageIndex(0);
            final int plain = a.pageIndex(1);
            a.close(); // page 0 cached (not filled), page 1 plain (filled)
            pool.slotTable().forceGenerationOfFreeSlot(plain, PageHandle.MAX_GENERATION); // retires when taken
            final Sequence s = pool.admit(3 * TPP, 0).sequence();
            final int before = storage[0].fills[cached];
            // takes the third slot, retires `plain`, evicts `cached` (to be filled after the lock), then comes up short
            assertThrows(PoolExhaustedException.class, () -> s.append(3 * TPP));
            assertEquals(before + 1, storage[0].fills[cached], "given back unwritten: filled once, by the free path");
            s.append(TPP); // the next allocation fills only what it evicted itself: nothing
            assertEquals(before + 1, storage[0].fills[cached], "a fill left over from the failed allocation ran again");
            s.close();
            assertEquals(1, pool.verifyAccounting().retired());
        }
    }

    @Test
    void aLooseAllocationWhoseLastFreeSlotRetiresReturnsExhausted() {
        try (KvPool pool = TestPools.pool(1)) {
            pool.slotTable().forceGenerationOfFreeSlot(0, PageHandle.MAX_GENERATION); // retires when taken
            assertEquals(PageHandle.EXHAUSTED, pool.tryAllocate(), "one unreserved free page, and it retired when taken");
            assertEquals(SlotState.RETIRED, pool.stateOfSlot(0));
            assertEquals(PageHandle.EXHAUSTED, pool.tryAllocate());
        }
    }

    @Test
    void anAppendThatNeedsNoNewPageLeavesTheOwnersAllocatorCacheAlone() {
        try (KvPool pool = TestPools.builder(4).threadCache(2).build()) {
            final Sequence s = pool.admit(2 * TPP, 0).sequence();
            s.append(1);                      // this thread allocates first: it owns the cache
            pool.release(pool.tryAllocate()); // one page in its cache
            assertEquals(1, pool.allocator().cache().sizeQuiescent());
            s.append(TPP - 1);                // fills the last page: nothing to allocate, so no locked allocation either
            assertEquals(1, pool.allocator().cache().sizeQuiescent(), "an append of no page flushed the owner's cache");
            assertEquals(1, s.pageCount());
            s.close();
        }
    }

    @Test
    void aShortAllocationBeyondTheReservationSaysHowManyUnreservedPagesAreLeft() {
        try (KvPool pool = TestPools.pool(4)) {
            final Sequence s = pool.admit(TPP, 0).sequence();
            s.append(TPP);                                        // slot 0; nothing reserved any more
            pool.slotTable().forceGenerationOfFreeSlot(2, PageHandle.MAX_GENERATION);
            pool.slotTable().forceGenerationOfFreeSlot(3, PageHandle.MAX_GENERATION);
            final PoolExhaustedException e = assertThrows(PoolExhaustedException.class, () -> s.append(2 * TPP));
            assertEquals("sequence needs 2 more pages, 0 of them reserved; the pool has 1 free unreserved pages for the other 2"
                + " (capacity 4)", e.getMessage());
            assertEquals(1, s.pageCount());
            assertEquals(SlotState.FREE, pool.stateOfSlot(1), "the page taken before the shortfall is free again");
            s.close();
            assertEquals(2, pool.verifyAccounting().retired());
        }
    }

    // ---- admission ----

    @Test
    void aRequestOfExactlyTheMaxContextThatNoLongerFitsTheSlotsInServiceExceedsThePool() {
        try (KvPool pool = TestPools.pool(4)) { // max context 4 pages
            pool.slotTable().forceGenerationOfFreeSlot(0, PageHandle.MAX_GENERATION - 1);
            pool.release(pool.tryAllocate()); // slot 0's last tenancy: RETIRED, 3 pages in service
            final int max = (int) pool.maxContextTokens();
            final Admission a = pool.admit(max, 0);
            assertEquals(Admission.Decision.REJECTED_EXCEEDS_POOL, a.decision());
            assertEquals(Admission.EXCEEDS_POOL, pool.tryReserve(max, 0));
            assertEquals(Admission.CONTEXT_TOO_LONG, pool.tryReserve(max + 1, 0));
            assertEquals(2, pool.snapshot().rejectedExceedsPool());
        }
    }

    @Test
    void aReservationIdPastTheLastIndexIsRefusedAsUnknown() {
        try (KvPool pool = TestPools.builder(4).maxReservations(2).build()) {
            final long id = pool.tryReserve(1, 0);
            assertTrue(id > 0);
            final long pastTheEnd = (id & 0xFFFF_FFFF_0000_0000L) | 2;
            assertThrows(IllegalArgumentException.class, () -> pool.cancelReservation(pastTheEnd));
            assertThrows(IllegalArgumentException.class, () -> pool.openSequence(pastTheEnd));
            assertThrows(IllegalArgumentException.class, () -> pool.cancelReservation(id | 0xFFFF_FFFFL));
            pool.cancelReservation(id);
        }
    }

    @Test
    void withAdmissionRejectionOffAttachingMoreThanThePlaceholderReservedNeverGoesNegative() {
        try (KvPool pool = TestPools.builder(8).unsafeDisable(Safeguard.ADMISSION_REJECTION).build()) {
            final int[] prefix = ids(2 * TPP + 1, 7);
            final Sequence owner = written(pool, prefix, TestPools.SALT);
            owner.publish(prefix, TestPools.SALT); // two published pages, OWNED by owner
            final int[] tooLong = java.util.Arrays.copyOf(prefix, (int) pool.maxContextTokens() + TPP);
            final Sequence placeholder = pool.admit(tooLong, 0, TestPools.SALT).sequence(); // one page reserved, whatever it asked for
            assertEquals(2 * TPP, placeholder.tokenCount(), "both shared pages attached");
            assertEquals(0, placeholder.reservedPages());
            final PoolSnapshot s = pool.verifyAccounting();
            assertEquals(0, s.reserved(), "the second attached page had no reserved page left to give back");
            placeholder.close();
            owner.close();
        }
    }

    // ---- handle events ----

    @Test
    void aPageFreedWhilePinWriterChecksItIsRefusedAsStaleAndCounted() {
        final CountingHookWords[] words = new CountingHookWords[1];
        final KvPoolBuilder builder = TestPools.builder(2);
        builder.slotWords = n -> words[0] = new CountingHookWords(n);
        try (KvPool pool = builder.build()) {
            final long h = pool.tryAllocate();
            words[0].arm(PageHandle.slot(h), 0, () -> pool.release(h)); // between pinWriter's check and its transition
            assertThrows(StaleHandleException.class, () -> pool.handles().pinWriter(h));
            assertEquals(1, pool.snapshot().staleHandlesRefused());
            assertEquals(SlotState.FREE, pool.stateOfSlot(PageHandle.slot(h)));
        }
    }

    @Test
    void aPageWithTheMostReferencesRefusesAnotherAndSaysWhy() {
        final SlotWords[] words = new SlotWords[1];
        final KvPoolBuilder builder = TestPools.builder(2);
        builder.slotWords = n -> words[0] = SlotWords.ofArray(n);
        try (KvPool pool = builder.build()) {
            final long h = pool.tryAllocate();
            final int slot = PageHandle.slot(h);
            final long one = words[0].getVolatile(slot);
            words[0].setRelease(slot, SlotStateMachine.word(PageHandle.generation(h), SlotStateMachine.OWNED, SlotStateMachine.MAX_REFCOUNT));
            final IllegalStateException e = assertThrows(IllegalStateException.class, () -> pool.retain(h));
            assertEquals("RETAIN refused: " + PageHandle.toString(h) + " already has " + SlotStateMachine.MAX_REFCOUNT + " references",
                e.getMessage());
            words[0].setRelease(slot, one);
            assertTrue(pool.release(h));
        }
    }

    @Test
    void publishingAPageWithTheMostReferencesSaysWhyItIsRefused() {
        final SlotWords[] words = new SlotWords[1];
        final KvPoolBuilder builder = TestPools.builder(4).fillMode(FillMode.ZERO); // no canary check before publish
        builder.slotWords = n -> words[0] = SlotWords.ofArray(n);
        try (KvPool pool = builder.build()) {
            final Sequence s = pool.admit(4, 0).sequence();
            s.append(4);
            final long h = s.pageHandle(0);
            final int slot = PageHandle.slot(h);
            final long one = words[0].getVolatile(slot);
            words[0].setRelease(slot, SlotStateMachine.word(PageHandle.generation(h), SlotStateMachine.OWNED, SlotStateMachine.MAX_REFCOUNT));
            final IllegalStateException e = assertThrows(IllegalStateException.class, () -> s.publish(new int[] {1, 2, 3, 4}, TestPools.SALT));
            assertEquals("RETAIN refused: " + PageHandle.toString(h) + " already has " + SlotStateMachine.MAX_REFCOUNT + " references",
                e.getMessage(), "an OWNED page is not refused as if it were not OWNED");
            words[0].setRelease(slot, one);
            s.close();
        }
    }
}
