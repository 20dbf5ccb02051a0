package io.kvpool;

import io.kvpool.ApiReviewRegressionTest.CountingHookWords;

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
            final Sequence s = written(pool, prompt, 0);
            final long receiving = s.pageHandle(1);
            pool.handles().pinWriter(receiving); // a peer writes page 1 (RECEIVING)
            final IllegalSlotTransitionException e = assertThrows(IllegalSlotTransitionException.class, () -> s.publish(prompt, 0));
            assertTrue(e.getMessage().contains("only OWNED pages can be published (page 1"), e.getMessage());
            assertEquals(0, pool.snapshot().publishedPrefixes(), "nothing is published, not even page 0");
            assertEquals(0, s.publishedPages());
            assertEquals(1, pool.refcountOfSlot(s.pageIndex(0)), "publish dropped the reference it took on page 0");
            assertEquals(1, pool.refcountOfSlot(s.pageIndex(1)));
            assertEquals(SlotState.RECEIVING, pool.stateOfSlot(s.pageIndex(1)));
            final Sequence other = pool.admit(prompt, 0, 0).sequence();
            assertEquals(0, other.tokenCount(), "another request attached a page a peer was still writing");
            other.close();
            pool.handles().commitReceive(receiving); // the peer is done
            s.publish(prompt, 0);
            assertEquals(2, s.publishedPages());
            assertEquals(2, pool.snapshot().publishedPrefixes());
            assertEquals(1, pool.refcountOfSlot(s.pageIndex(0)));
            final Sequence third = pool.admit(prompt, 0, 0).sequence();
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
            final Sequence a = written(pool, prompt, 0);
            a.publish(prompt, 0);
            final int first = a.pageIndex(0);
            a.close(); // both full pages cached, FREE
            assertEquals(2, pool.snapshot().cachedFree());
            pool.slotTable().forceGenerationOfFreeSlot(first, PageHandle.MAX_GENERATION); // its next tenancy cannot be tagged
            final Sequence b = pool.admit(prompt, 0, 0).sequence();
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
        final KvPool.Builder builder = TestPools.builder(4);
        builder.slotWords = n -> words[0] = new CountingHookWords(n);
        try (KvPool pool = builder.build()) {
            final int[] prompt = ids(TPP + 1, 3);
            final Sequence a = written(pool, prompt, 0);
            a.publish(prompt, 0);
            final long shared = a.pageHandle(0);
            pool.retain(shared);
            a.close(); // page 0 is OWNED by the extra reference alone
            // admission reads page 0's word as OWNED; before its RETAIN the last reference goes (another thread, lock-free)
            words[0].arm(PageHandle.slot(shared), 0, () -> pool.release(shared));
            final Sequence b = pool.admit(prompt, 0, 0).sequence();
            assertEquals(TPP, b.tokenCount(), "the page, freed a moment ago, is on its way to the LRU: attach must take it in first");
            assertEquals(PageHandle.slot(shared), b.pageIndex(0));
            assertNotEquals(shared, b.pageHandle(0), "revived as a new tenancy");
            assertEquals(1, b.reservedPages(), "the revival consumed one of the two reserved pages");
            b.close();
            assertEquals(0, pool.verifyAccounting().inUse());
        }
    }

    // ---- the return stack ----

    @Test
    void pagesFreedSinceTheLastAllocationAreTakenBeforeACachedPageIsEvicted() {
        try (KvPool pool = TestPools.pool(3)) {
            final int[] prompt = ids(TPP + 1, 4);
            final Sequence a = written(pool, prompt, 0);
            a.publish(prompt, 0);
            a.close(); // one page cached, one plain
            final long loose = pool.tryAllocate();
            final Sequence b = pool.admit(2 * TPP, 0).sequence(); // the plain page and the cached one
            pool.release(loose); // waits on the return stack
            b.append(2 * TPP);  // takes the last plain page, then the one just freed; no eviction
            final PoolSnapshot s = pool.snapshot();
            assertEquals(0, s.evictions(), "a cached prefix was evicted while a freed plain page waited");
            assertEquals(1, s.cachedFree());
            b.close();
            final Sequence c = pool.admit(prompt, 0, 0).sequence();
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
        final KvPool pool = TestPools.pool(2);
        final long h = pool.tryAllocate();
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
        assertEquals(SlotState.OWNED, pool.stateOfSlot(PageHandle.slot(h)), "the monitoring views still answer");
        assertEquals(1, pool.refcountOfSlot(PageHandle.slot(h)));
    }
}
