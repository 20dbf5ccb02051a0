package io.kvpool;

import org.junit.jupiter.api.Test;

import java.util.stream.IntStream;

import static io.kvpool.TokenTags.readSequence;
import static io.kvpool.TokenTags.tag;
import static io.kvpool.TokenTags.writeSequence;
import static org.junit.jupiter.api.Assertions.*;

/** Publishing, attaching, tenant separation by salt, LRU eviction, collision safety. */
class PrefixCacheTest {

    private static int[] tokens(int n, int seed) {
        return IntStream.range(0, n).map(i -> seed * 1000 + i).toArray();
    }

    private static Sequence prefill(KvPool pool, int[] prompt, long salt, long owner) {
        final Sequence s = pool.admit(prompt, 0, salt).sequence();
        final int cached = s.tokenCount();
        s.append(prompt.length - cached);
        writeSequence(s, owner, cached, prompt.length);
        s.publish(prompt, salt);
        return s;
    }

    @Test
    void anErrorWhileAttachingAPrefixLeavesNoReservationNorReference() {
        final PoolFaultPathsTest.CountingHookWords[] words = new PoolFaultPathsTest.CountingHookWords[1];
        final KvPoolBuilder b = TestPools.builder(16);
        b.slotWords = n -> words[0] = new PoolFaultPathsTest.CountingHookWords(n);
        try (KvPool pool = b.build()) {
            final int[] prompt = tokens(10, 1); // 2 full pages + 2 tokens
            final Sequence a = prefill(pool, prompt, 7, 1);
            final int first = a.pageIndex(0);
            final int refsBefore = pool.refcountOfSlot(first);
            words[0].arm(a.pageIndex(1), 0, () -> { // the first page attaches, the second one's read throws
                throw new OutOfMemoryError("injected: an Error while a prefix page is attached");
            });
            assertThrows(OutOfMemoryError.class, () -> pool.admit(prompt, 4, 7));
            final PoolSnapshot after = pool.snapshot();
            assertEquals(0, after.reserved(), "the failed admission's reservation is given back: " + after);
            assertEquals(1, after.openSequences(), "only the prefill's sequence is open: " + after);
            assertEquals(refsBefore, pool.refcountOfSlot(first), "the attached page's reference is dropped");
            a.close();
            assertTrue(pool.verifyAccounting().balanced());
        }
    }

    @Test
    void aSecondRequestWithTheSamePrefixAttachesItsFullPages() {
        try (KvPool pool = TestPools.pool(16)) {
            final int[] prompt = tokens(10, 1); // 2 full pages + 2 tokens
            final Sequence a = prefill(pool, prompt, 7, 1);
            assertEquals(2, a.publishedPages());
            final Sequence b = pool.admit(prompt, 4, 7).sequence();
            assertEquals(8, b.tokenCount(), "two full pages attached");
            assertEquals(a.pageIndex(0), b.pageIndex(0));
            assertEquals(a.pageIndex(1), b.pageIndex(1));
            for (int t = 0; t < 8; t++) {
                assertEquals(tag(1, t), readSequence(b, t));
            }
            assertEquals(2, pool.snapshot().prefixHits());
            // reservation: 4 pages for 14 tokens, two shared → 2 left
            assertEquals(2, b.reservedPages());
            a.close();
            b.close();
            pool.verifyAccounting();
        }
    }

    @Test
    void theLastPromptTokenIsNeverTakenFromTheCache() {
        try (KvPool pool = TestPools.pool(16)) {
            final int[] prompt = tokens(8, 2); // exactly 2 pages
            prefill(pool, prompt, TestPools.SALT, 1).close();
            final Sequence b = pool.admit(prompt, 0, TestPools.SALT).sequence();
            assertEquals(4, b.tokenCount(), "only (8 - 1) / 4 = 1 page attached");
            b.close();
        }
    }

    @Test
    void tenantsWithDifferentSaltsNeverShare() {
        try (KvPool pool = TestPools.pool(16)) {
            final int[] prompt = tokens(9, 3);
            final Sequence a = prefill(pool, prompt, 100, 1);
            final Sequence b = pool.admit(prompt, 0, 200).sequence();
            assertEquals(0, b.tokenCount());
            final Sequence c = pool.admit(prompt, 0, 100).sequence();
            assertEquals(8, c.tokenCount());
            assertThrows(IllegalArgumentException.class, () -> c.publish(prompt, 200), "a sequence keeps its salt");
            a.close();
            b.close();
            c.close();
        }
    }

    @Test
    void unreferencedCachedPagesAreRevivedWithANewGeneration() {
        try (KvPool pool = TestPools.pool(16)) {
            final int[] prompt = tokens(9, 4);
            final Sequence a = prefill(pool, prompt, TestPools.SALT, 1);
            final long oldHandle = a.pageHandle(0);
            a.close();
            PoolSnapshot s = pool.verifyAccounting();
            assertEquals(2, s.cachedFree());
            assertEquals(16, s.free());
            final Sequence b = pool.admit(prompt, 0, TestPools.SALT).sequence();
            assertEquals(8, b.tokenCount());
            assertEquals(PageHandle.slot(oldHandle), b.pageIndex(0));
            assertNotEquals(oldHandle, b.pageHandle(0), "revival is a new tenancy");
            assertThrows(StaleHandleException.class, () -> pool.release(oldHandle));
            assertEquals(tag(1, 3), readSequence(b, 3), "cached content survived while free");
            b.close();
            pool.verifyAccounting();
        }
    }

    @Test
    void cachedPagesAreEvictedLeastRecentlyUsedFirstAndOnlyWhenNeeded() {
        try (KvPool pool = TestPools.pool(4)) {
            final int[] p1 = tokens(5, 5);
            final int[] p2 = tokens(5, 6);
            prefill(pool, p1, TestPools.SALT, 1).close(); // cached page A (older)
            prefill(pool, p2, TestPools.SALT, 2).close(); // cached page B (newer)
            assertEquals(2, pool.snapshot().cachedFree());
            final Sequence filler = pool.admit(8, 0).sequence();
            filler.append(8); // 2 plain free pages were available: no eviction yet
            assertEquals(0, pool.snapshot().evictions());
            assertEquals(2, pool.snapshot().cachedFree());
            filler.close();
            final Sequence big = pool.admit(12, 0).sequence();
            big.append(12); // needs 3 pages: 2 plain, then evicts the LRU cached page (p1's)
            assertEquals(1, pool.snapshot().evictions());
            big.close();
            final Sequence again1 = pool.admit(p1, 0, TestPools.SALT).sequence();
            assertEquals(0, again1.tokenCount(), "p1's page, the least recently used, was evicted");
            again1.close();
            final Sequence again2 = pool.admit(p2, 0, TestPools.SALT).sequence();
            assertEquals(4, again2.tokenCount(), "p2's page is still cached");
            again2.close();
            pool.verifyAccounting();
        }
    }

    @Test
    void anEvictedPageIsFilledBeforeItsNextTenantSeesIt() {
        try (KvPool pool = TestPools.pool(2)) {
            final int[] p = tokens(5, 7);
            final Sequence a = pool.admit(p, 0, TestPools.SALT).sequence();
            a.append(5);
            writeSequence(a, 1, 0, 5);
            a.publish(p, TestPools.SALT);
            final int cachedSlot = a.pageIndex(0);
            a.close();
            final long plain = pool.tryAllocate();
            assertNotEquals(cachedSlot, PageHandle.slot(plain), "plain free pages go first");
            assertEquals(0, pool.snapshot().evictions());
            final long h = pool.tryAllocate();
            assertEquals(cachedSlot, PageHandle.slot(h));
            assertEquals(1, pool.snapshot().evictions());
            assertEquals(0, pool.firstCanaryToken(h, 0, 4), "evicted cached KV was overwritten with the canary");
            pool.release(h);
            pool.release(plain);
        }
    }

    @Test
    void aKeyCollisionNeverSharesDifferentContent() {
        final PrefixCache cache = new PrefixCache(4, 2);
        final int[] a = {1, 2};
        final int[] b = {3, 4};
        final PrefixDigest own = cache.digest(PrefixDigest.ROOT, 9, a, 0);
        final long rh = PrefixDigest.ROOT.hi();
        final long rl = PrefixDigest.ROOT.lo();
        cache.publish(0, own, PrefixDigest.ROOT, 9, a, 0);
        assertEquals(0, cache.lookup(own, new PrefixDigest(rh, rl), 9, a, 0));
        // pretend b's digest matched a's in the 64 bits the index keys by: the stored key (tokens, salt, prefix
        // before) must still refuse it
        assertEquals(-1, cache.lookup(own, new PrefixDigest(rh, rl), 9, b, 0));
        assertEquals(-1, cache.lookup(own, new PrefixDigest(rh, rl), 10, a, 0));
        assertEquals(-1, cache.lookup(own, new PrefixDigest(rh + 1, rl), 9, a, 0), "another prefix before the page (digest high half)");
        assertEquals(-1, cache.lookup(own, new PrefixDigest(rh, rl + 1), 9, a, 0), "another prefix before the page (digest low half)");
        cache.unpublish(0);
        assertEquals(-1, cache.lookup(own, new PrefixDigest(rh, rl), 9, a, 0));
    }

    @Test
    void pagesWithOneChainHashAreIndexedApartAndLeaveApart() {
        final PrefixCache cache = new PrefixCache(4, 4);
        final int[] genuine = {11, 12, 13, 14};
        final int[] forged = PoolFaultPathsTest.secondPreimage(genuine, PrefixHash.SHARED_SALT);
        final PrefixDigest g = cache.digest(PrefixDigest.ROOT, PrefixHash.SHARED_SALT, genuine, 0);
        final PrefixDigest f = cache.digest(PrefixDigest.ROOT, PrefixHash.SHARED_SALT, forged, 0);
        cache.publish(1, f, PrefixDigest.ROOT, PrefixHash.SHARED_SALT, forged, 0);
        cache.publish(2, g, PrefixDigest.ROOT, PrefixHash.SHARED_SALT, genuine, 0);
        assertEquals(2, cache.size());
        cache.unpublish(1); // the forged page is evicted: the genuine one stays findable
        assertEquals(2, cache.lookup(g, PrefixDigest.ROOT, PrefixHash.SHARED_SALT, genuine, 0));
        assertEquals(-1, cache.lookup(f, PrefixDigest.ROOT, PrefixHash.SHARED_SALT, forged, 0));
        assertEquals(1, cache.size());
    }

    @Test
    void thePrefixDigestIsTruncatedSha256OfTheDocumentedBytes() throws Exception {
        final PrefixCache cache = new PrefixCache(1, 2);
        final PrefixDigest got = cache.digest(new PrefixDigest(0x1122334455667788L, -2L), 42, new int[] {7, 5, 6}, 1);
        final java.nio.ByteBuffer in = java.nio.ByteBuffer.allocate(32).order(java.nio.ByteOrder.LITTLE_ENDIAN)
            .putLong(0x1122334455667788L).putLong(-2L).putLong(42).putInt(5).putInt(6);
        final java.nio.ByteBuffer d = java.nio.ByteBuffer.wrap(java.security.MessageDigest.getInstance("SHA-256").digest(in.array()))
            .order(java.nio.ByteOrder.LITTLE_ENDIAN);
        assertEquals(d.getLong(0), got.hi());
        assertEquals(d.getLong(8), got.lo());
        final PrefixDigest swapped = cache.digest(new PrefixDigest(0x1122334455667788L, -2L), 42, new int[] {7, 6, 5}, 1);
        assertNotEquals(d.getLong(0), swapped.hi(), "order matters");
    }

    @Test
    void aPageLargerThanTheDigestBufferHashesTheSameDocumentedBytes() throws Exception {
        for (int tokensPerPage : new int[] {PrefixCache.DIGEST_CHUNK_TOKENS - 6, PrefixCache.DIGEST_CHUNK_TOKENS,
            PrefixCache.DIGEST_CHUNK_TOKENS + 1, 3 * PrefixCache.DIGEST_CHUNK_TOKENS + 17}) {
            final int[] ids = new java.util.Random(tokensPerPage).ints(tokensPerPage + 3).toArray();
            final PrefixDigest got = new PrefixCache(1, tokensPerPage).digest(new PrefixDigest(9, -9), 77, ids, 3);
            final java.nio.ByteBuffer in = java.nio.ByteBuffer.allocate(24 + 4 * tokensPerPage).order(java.nio.ByteOrder.LITTLE_ENDIAN)
                .putLong(9).putLong(-9).putLong(77);
            for (int i = 0; i < tokensPerPage; i++) {
                in.putInt(ids[3 + i]);
            }
            final java.nio.ByteBuffer d = java.nio.ByteBuffer.wrap(java.security.MessageDigest.getInstance("SHA-256").digest(in.array()))
                .order(java.nio.ByteOrder.LITTLE_ENDIAN);
            assertEquals(d.getLong(0), got.hi(), "tokensPerPage " + tokensPerPage);
            assertEquals(d.getLong(8), got.lo(), "tokensPerPage " + tokensPerPage);
        }
    }

    @Test
    void aPoolOfHugePagesBuildsWithoutAPageSizedDigestBuffer() {
        // 2^29 tokens of 2 bytes: a legal 1 GiB page; a digest buffer of 4 bytes a token would overflow an int
        final KvLayout huge = new KvLayout(1, 1, 1, DType.FP8, 1 << 29);
        assertDoesNotThrow(() -> KvPool.builder(huge).pages(1).maxContextTokens(1)
            .storage(PoolFaultPathsTest.NoBytes::new).build().close());
    }

    @Test
    void theHashIsTheDocumentedChain() {
        final int[] t = {5, 6, 7};
        long h = PrefixHash.fmix64(PrefixHash.ROOT ^ 0x9E3779B97F4A7C15L);
        h = PrefixHash.fmix64(h ^ 42);
        for (int i = 0; i < 3; i++) {
            h = PrefixHash.fmix64(h ^ (((long) i << 32) | t[i]));
        }
        assertEquals(h, PrefixHash.of(PrefixHash.ROOT, 42, t, 0, 3));
        assertNotEquals(PrefixHash.of(PrefixHash.ROOT, 42, new int[] {6, 5, 7}, 0, 3), h, "order matters");
        assertNotEquals(PrefixHash.of(1, 42, t, 0, 3), h, "parent matters");
    }

    @Test
    void truncatingIntoAPublishedPageCopiesItBeforeTheNextWriteWhenSharedAndUnpublishesItWhenNot() {
        try (KvPool pool = TestPools.pool(8)) {
            final int[] p = tokens(8, 8);
            final Sequence a = pool.admit(p, 4, TestPools.SALT).sequence();
            a.append(8);
            writeSequence(a, 1, 0, 8);
            a.publish(p, TestPools.SALT);
            final Sequence holder = pool.admit(tokens(9, 8), 0, TestPools.SALT).sequence(); // attaches both pages: page 1 is shared
            assertEquals(8, holder.tokenCount());
            final int publishedSlot = a.pageIndex(1);
            a.truncate(6); // page 1 becomes partial but holds a published prefix someone else holds too
            a.append(1);
            assertNotEquals(publishedSlot, a.pageIndex(1), "copy-on-write of an immutable, shared page");
            writeSequence(a, 9, 6, 7);
            holder.close();
            final Sequence b = pool.admit(tokens(9, 8), 0, TestPools.SALT).sequence();
            assertEquals(8, b.tokenCount());
            for (int t = 0; t < 8; t++) {
                assertEquals(tag(1, t), readSequence(b, t), "the cache still serves the original prefix, token " + t);
            }
            b.close();
            a.close();
            pool.verifyAccounting();
        }
        try (KvPool pool = TestPools.pool(8)) {
            final int[] p = tokens(8, 8);
            final Sequence a = pool.admit(p, 4, TestPools.SALT).sequence();
            a.append(8);
            writeSequence(a, 1, 0, 8);
            a.publish(p, TestPools.SALT);
            final int publishedSlot = a.pageIndex(1);
            a.truncate(6); // only a holds page 1: it leaves the cache and is written in place
            a.append(1);
            assertEquals(publishedSlot, a.pageIndex(1), "no copy for a page only this sequence holds");
            writeSequence(a, 9, 6, 7);
            final Sequence b = pool.admit(tokens(9, 8), 0, TestPools.SALT).sequence();
            assertEquals(4, b.tokenCount(), "only the first page is still a cached prefix; the changed one is not served");
            assertEquals(tag(1, 3), readSequence(b, 3));
            b.close();
            a.close();
            pool.verifyAccounting();
        }
    }

    @Test
    void aSaltThatWasNeverSetIsRefusedAndChangesNothing() {
        // 0 is what an unset long holds: taken as a salt, it would put every such tenant in one namespace
        try (KvPool pool = TestPools.pool(8)) {
            final int[] prompt = tokens(9, 8);
            final IllegalArgumentException admit = assertThrows(IllegalArgumentException.class, () -> pool.admit(prompt, 0, 0));
            assertTrue(admit.getMessage().contains("salt 0") && admit.getMessage().contains("SHARED_SALT"), admit::getMessage);
            assertEquals(0, pool.snapshot().openSequences());
            assertEquals(0, pool.snapshot().reserved());

            final Sequence s = prefill(pool, prompt, PrefixHash.SHARED_SALT, 1); // the shared namespace is named, not 0
            assertEquals(2, s.publishedPages());
            try (Sequence unsalted = pool.admit(prompt.length, 0).sequence()) {
                unsalted.append(prompt.length);
                TokenTags.writeSequence(unsalted, 2, 0, prompt.length);
                assertThrows(IllegalArgumentException.class, () -> unsalted.publish(prompt, 0));
                assertEquals(0, unsalted.publishedPages());
            }
            s.close();
            assertNotEquals(0, PrefixHash.SHARED_SALT);
            pool.verifyAccounting();
        }
    }
}
