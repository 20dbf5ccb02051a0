package io.kvpool;

import org.junit.jupiter.api.Test;

import static org.junit.jupiter.api.Assertions.*;

/**
 * A sequence whose partial last page was released behind its back (a stray release) holds a stale handle to it. Once
 * the slot belongs to another request, which published it, the sequence's next append finds the page "shared" and
 * copies it: the copy must refuse the stale handle instead of copying the other request's KV into a fresh page that the
 * sequence then holds under a current handle, where every check passes. A truncate whose new partial last page is
 * such a page must refuse it too, rather than take the other request's published page out of the prefix cache.
 */
class StaleLastPageCopyTest {

    private static final long A = 1, B = 2;
    private static final int[] B_PROMPT = {11, 12, 13, 14};

    /**
     * A pool of 3 pages: A's partial page is slot 0, loose pages take slots 1 and 2, A's page 0 is released behind its
     * back and B (which publishes it) gets slot 0; then slot 2 is freed for the copy-on-write.
     *
     * @return {A, B}
     */
    private static Sequence[] aStaleAndBsPublishedPageInItsSlot(KvPool pool) {
        final Sequence a = pool.admit(2, 0).sequence();
        a.append(2);
        TokenTags.writeSequence(a, A, 0, 2);
        final long loose = pool.tryAllocate(), spare = pool.tryAllocate();
        assertTrue(loose >= 0 && spare >= 0);
        pool.release(a.pageHandle(0)); // a stray release: A's reference, dropped by someone else
        final Sequence b = pool.admit(B_PROMPT, 0, TestPools.SALT).sequence();
        b.append(4);
        assertEquals(a.pageIndex(0), b.pageIndex(0), "precondition: B got the slot A's stale handle names");
        TokenTags.writeSequence(b, B, 0, 4);
        b.publish(B_PROMPT, TestPools.SALT);
        pool.release(spare); // the page a copy-on-write of A's last page takes
        return new Sequence[] {a, b};
    }

    /** @return whether any page of {@code s} that its handle still names holds one of B's tokens among s's tokens */
    private static boolean holdsBsKv(KvPool pool, Sequence s) {
        final int tpp = pool.layout().tokensPerPage();
        for (int t = 0; t < s.tokenCount(); t++) {
            final long h = s.pageHandle(t / tpp);
            if (pool.state(h) == null) {
                continue; // stale: every read through it is refused
            }
            final long tag = TokenTags.read(pool.page(h), pool.layout(), t % tpp);
            for (int bt = 0; bt < 4; bt++) {
                if (tag == TokenTags.tag(B, bt)) {
                    return true;
                }
            }
        }
        return false;
    }

    @Test
    void anAppendNeverCopiesAnotherRequestsPageThroughAStaleLastPageHandle() {
        try (KvPool pool = TestPools.builder(3).build()) {
            final Sequence[] ab = aStaleAndBsPublishedPageInItsSlot(pool);
            final Sequence a = ab[0];
            final long stale = a.pageHandle(0);
            assertThrows(StaleHandleException.class, () -> a.append(1));
            assertFalse(holdsBsKv(pool, a), "A must not read B's KV under a current handle");
            assertEquals(2, a.tokenCount(), "a refused append changes nothing");
            assertEquals(stale, a.pageHandle(0));
            assertEquals(1, pool.metrics().free(), "the copy's page went back");
        }
    }

    @Test
    void withTheGenerationCheckOffTheCopyHandsBsKvToA() {
        // the control: the check above is what stops the leak, and this test's reading of A's pages sees it when it happens
        try (KvPool pool = TestPools.builder(3).unsafeDisable(Safeguard.GENERATION_CHECK).build()) {
            final Sequence[] ab = aStaleAndBsPublishedPageInItsSlot(pool);
            final Sequence a = ab[0];
            final long stale = a.pageHandle(0);
            a.append(1);
            assertNotEquals(stale, a.pageHandle(0), "A's last page was copied");
            assertNotEquals(ab[1].pageIndex(0), a.pageIndex(0), "into a page of its own");
            assertTrue(holdsBsKv(pool, a), "with generations unchecked, A's copy of its last page is B's KV");
        }
    }

    @Test
    void aBatchStepNeverCopiesAnotherRequestsPageThroughAStaleLastPageHandle() {
        try (KvPool pool = TestPools.builder(3).build()) {
            final Sequence[] ab = aStaleAndBsPublishedPageInItsSlot(pool);
            final Sequence a = ab[0];
            final long stale = a.pageHandle(0);
            assertThrows(StaleHandleException.class, () -> pool.appendEach(new Sequence[] {a}, 1, 1));
            assertFalse(holdsBsKv(pool, a), "A must not read B's KV under a current handle");
            assertEquals(2, a.tokenCount(), "a refused step changes nothing");
            assertEquals(stale, a.pageHandle(0));
            assertEquals(1, pool.metrics().free(), "the copy's page went back");
        }
    }

    /**
     * A pool of 4 pages: A holds slots 0 (full) and 1 (partial), loose pages take slots 2 and 3, A's page 0 is released
     * behind its back and B takes slot 0 and publishes it; the loose pages go back.
     *
     * @return {A, B}
     */
    private static Sequence[] aStaleFirstPageAndBsPublishedPageInItsSlot(KvPool pool) {
        final int tpp = pool.layout().tokensPerPage();
        final Sequence a = pool.admit(tpp + 2, 0).sequence();
        a.append(tpp + 2);
        final long loose = pool.tryAllocate(), spare = pool.tryAllocate();
        assertTrue(loose >= 0 && spare >= 0);
        pool.release(a.pageHandle(0)); // a stray release
        final Sequence b = pool.admit(B_PROMPT, 0, TestPools.SALT).sequence();
        b.append(4);
        assertEquals(a.pageIndex(0), b.pageIndex(0), "precondition: B got the slot A's stale handle names");
        TokenTags.writeSequence(b, B, 0, 4);
        b.publish(B_PROMPT, TestPools.SALT);
        pool.release(loose);
        pool.release(spare);
        return new Sequence[] {a, b};
    }

    /** @return tokens a new request of B's prompt (and one more token) attaches from the cache */
    private static int cachedForBsPrompt(KvPool pool) {
        try (Sequence probe = pool.admit(new int[] {11, 12, 13, 14, 15}, 0, TestPools.SALT).sequence()) {
            return probe.tokenCount();
        }
    }

    @Test
    void aTruncateThroughAStaleLastPageHandleLeavesAnotherRequestsPublishedPageInTheCache() {
        try (KvPool pool = TestPools.builder(4).build()) {
            final Sequence a = aStaleFirstPageAndBsPublishedPageInItsSlot(pool)[0];
            final int tokens = a.tokenCount();
            assertEquals(4, cachedForBsPrompt(pool), "precondition: B's page is in the cache");
            final StaleHandleException e = assertThrows(StaleHandleException.class, () -> a.truncate(2));
            assertTrue(e.getMessage().contains("truncate to 2 tokens"), e::getMessage);
            assertEquals(tokens, a.tokenCount(), "a refused truncate changes nothing");
            assertEquals(2, a.pageCount());
            assertEquals(4, cachedForBsPrompt(pool), "B's published page stays in the cache");
        }
    }

    @Test
    void withTheGenerationCheckOffATruncateTakesAnotherRequestsPageOutOfTheCache() {
        // the control: the check above is what keeps B's page cached, and the probe sees it when it is lost
        try (KvPool pool = TestPools.builder(4).unsafeDisable(Safeguard.GENERATION_CHECK).build()) {
            final Sequence a = aStaleFirstPageAndBsPublishedPageInItsSlot(pool)[0];
            assertEquals(4, cachedForBsPrompt(pool), "precondition: B's page is in the cache");
            a.truncate(2);
            assertEquals(0, cachedForBsPrompt(pool), "with generations unchecked, A's truncate unpublished B's page");
        }
    }

    @Test
    void aLastPageHandleOutsideThePoolIsRefusedAsStaleNotAsAnIndexError() throws Exception {
        // the refusal names the slot's state: a handle whose slot this pool lacks (INVALID, or FOREIGN from a larger
        // pool) must still get the StaleHandleException copyLastPageInto documents, not the state lookup's exception
        try (KvPool pool = TestPools.builder(3).build()) {
            final Sequence a = pool.admit(2, 0).sequence();
            a.append(2);
            final Sequence beam = a.tryFork(); // the partial last page is shared: the next append copies it
            assertNotNull(beam);
            final java.lang.reflect.Field f = Sequence.class.getDeclaredField("handles");
            f.setAccessible(true);
            final long[] handles = (long[]) f.get(a);
            final long real = handles[0];
            handles[0] = PageHandle.of(pool.poolId(), pool.capacity() + 5, PageHandle.generation(real));
            try {
                final StaleHandleException e = assertThrows(StaleHandleException.class, () -> a.append(1));
                assertEquals(StaleHandleException.Refusal.INVALID, e.refusal(), e::getMessage);
                assertTrue(e.getMessage().contains(Integer.toString(pool.capacity() + 5)), e::getMessage);
                assertEquals(2, a.tokenCount(), "a refused append changes nothing");
            } finally {
                handles[0] = real;
            }
            beam.close();
            a.close();
            assertTrue(pool.verifyAccounting().idle(), pool.snapshot()::toString);
        }
    }
}
