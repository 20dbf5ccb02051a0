package io.kvpool;

import io.kvpool.PoolHarness.Admit;
import io.kvpool.PoolHarness.Append;
import io.kvpool.PoolHarness.Close;
import io.kvpool.PoolHarness.Fork;
import io.kvpool.PoolHarness.Publish;
import io.kvpool.PoolHarness.Truncate;
import io.kvpool.PoolHarness.Violation;
import net.jqwik.api.Example;
import net.jqwik.api.ForAll;
import net.jqwik.api.Property;
import net.jqwik.api.constraints.IntRange;
import net.jqwik.api.lifecycle.AddLifecycleHook;

import java.lang.foreign.MemorySegment;

import static org.junit.jupiter.api.Assertions.assertEquals;

/**
 * Minimal cases for the prefix cache and copy-on-write, each stated as the behaviour the API documents:
 * copy-on-write is decided at write time, and returned pages are drained oldest first.
 */
@AddLifecycleHook(PropsTries.class)
class PrefixCacheProperties {

    private static final long SALT = 0x7E11A17L;
    private static final int TPP = TestPools.SMALL.tokensPerPage();

    /**
     * A fork truncates into a full page it shares, its parent then publishes that page and goes away: the fork's next
     * append copies the published page instead of writing into it (the case
     * {@link KvPoolStatefulProperties#randomOperationsKeepPoolAndModelInStep} shrank to).
     */
    @Example
    void aForkThatTruncatedIntoASharedPageCopiesItOnceTheParentPublishesIt() {
        final Violation v = KvPoolStatefulProperties.run(KvPoolStatefulProperties.harness(TestPools.builder(3).maxContextTokens(4).build()),
            new Admit(0, 1, 0, 0, true),     // s1: 1 prompt token, salt of tenant 0
            new Append(0, 3, false),         // s1: 4 tokens, page 0 full
            new Fork(0),                     // s2 shares page 0
            new Truncate(1, 250),            // s2: 1 token, its last page (page 0) partial and shared; not published yet
            new Publish(0, 0, true),         // s1 publishes page 0
            new Close(0),                    // s1 goes: s2 is the only holder of the published page
            new Append(0, 1, false));        // s2 appends token 1: must copy the published page first
        if (v != null) {
            throw v;
        }
    }

    /**
     * Sequence.append: "if the last page is partially filled and shared (by a fork, or because it holds a
     * published prefix) it is copied first". The same case through the public API, showing the harm: a
     * later request that attaches the cached prefix reads KV that another request wrote.
     */
    @Example
    void aPublishedPageIsNeverWrittenInPlace_evenIfTheWriterTruncatedIntoItBeforeItWasPublished() {
        try (KvPool pool = TestPools.pool(4)) {
            final Sequence s1 = pool.admit(4, 0).sequence();
            s1.append(4);
            TokenTags.writeSequence(s1, 1, 0, 4); // every vector written, so publish accepts the page
            for (int t = 0; t < TPP; t++) {
                mark(s1.page(0), t, 0x10 + t); // s1's KV for tokens 0..3
            }
            final Sequence s2 = s1.fork();
            s2.truncate(1);                    // page 0 partial for s2, still shared, not published yet
            s1.publish(new int[] {1, 2, 3, 4}, SALT);
            final int publishedSlot = s1.pageIndex(0);
            s1.close();
            s2.append(1);
            mark(s2.page(0), 1, 0x77);         // s2's KV for its token 1
            final Sequence s3 = pool.admit(new int[] {1, 2, 3, 4, 5}, 0, SALT).sequence();
            final int attached = s3.tokenCount();
            final int read = markOf(s3.page(0), 1);
            final String where = "slot " + publishedSlot + " was published, s3 attached slot " + s3.pageIndex(0) + ", s2 appended into slot "
                + s2.pageIndex(0);
            s2.close();
            s3.close();
            assertEquals(TPP, attached, "s3 attaches the published page");
            assertEquals(0x11, read, "token 1 of the cached prefix must hold the publisher's KV (0x11), not the KV s2 appended after "
                + "publication (0x77); " + where);
        }
    }

    /**
     * Sequence.close: "Releases every page reference (last page first, so the tail of a cached prefix is
     * evicted before its head)". So after a closed sequence's published prefix of {@code pages} pages loses
     * {@code evicted} of them to eviction, its first {@code pages − evicted} pages are still attachable.
     */
    @Property(tries = 20)
    void evictionTakesTheTailOfAClosedSequencesCachedPrefixBeforeItsHead(@ForAll @IntRange(min = 2, max = 5) int pages,
                                                                         @ForAll @IntRange(min = 1, max = 4) int evicted) {
        net.jqwik.api.Assume.that(evicted < pages);
        final int prompt = pages * TPP + 1; // `pages` full pages and one partial page
        final int[] ids = new int[prompt];
        for (int i = 0; i < prompt; i++) {
            ids[i] = 100 + i;
        }
        try (KvPool pool = TestPools.pool(pages + 1)) {
            final Sequence s = pool.admit(ids, 0, SALT).sequence();
            s.append(prompt);
            TokenTags.writeSequence(s, 1, 0, prompt);
            s.publish(ids, SALT);
            s.close();                            // `pages` cached free pages, one plain free page
            final long[] loose = new long[evicted + 1];
            for (int i = 0; i < loose.length; i++) {
                loose[i] = pool.tryAllocate();    // the plain page, then `evicted` cached pages
            }
            for (long h : loose) {
                pool.release(h);
            }
            final Sequence again = pool.admit(ids, 0, SALT).sequence();
            final int attached = again.tokenCount();
            again.close();
            assertEquals((pages - evicted) * TPP, attached, "tokens attached from the cache after evicting " + evicted + " of "
                + pages + " cached pages (the evicted ones should be the tail)");
        }
    }

    /**
     * Sequence.append copies the partial last page only when it is shared or published. Here it is
     * neither (a fresh page, after the sequence truncated to zero) but append copies it anyway: a stale
     * "last page immutable" flag, set when the sequence truncated into its published page and not
     * cleared by the later truncation to a page boundary. Wastes a page and a copy (and truncate reserves
     * a page for it).
     */
    @Example
    void appendDoesNotCopyAPageThatIsNeitherSharedNorPublished() {
        try (KvPool pool = TestPools.pool(8)) {
            final Sequence s = pool.admit(6, 0).sequence();
            s.append(6);
            TokenTags.writeSequence(s, 1, 0, 6);
            s.publish(new int[] {1, 2, 3, 4, 5, 6}, SALT);
            s.truncate(2);  // into the published page: the next append must copy it
            s.truncate(0);  // ... but now that page is gone
            s.append(2);    // a fresh page, neither shared nor published
            final int slot = s.pageIndex(0);
            final boolean published = pool.allocations().mustCopyBeforeWrite(slot); // shared or published
            final int refcount = pool.refcountOfSlot(slot);
            s.append(1);
            final int after = s.pageIndex(0);
            s.close();
            assertEquals(slot, after, "append copied page 0 (slot " + slot + ", refcount " + refcount + ", published " + published + ") to slot " + after);
        }
    }

    private static void mark(MemorySegment page, int token, int value) {
        page.asSlice(TestPools.SMALL.offset(0, 0, token), TestPools.SMALL.bytesPerTokenVector()).fill((byte) value);
    }

    private static int markOf(MemorySegment page, int token) {
        return page.get(java.lang.foreign.ValueLayout.JAVA_BYTE, TestPools.SMALL.offset(0, 0, token)) & 0xFF;
    }
}
