package io.kvpool;

import org.junit.jupiter.api.Test;

import java.lang.foreign.MemorySegment;
import java.util.HashMap;
import java.util.Map;

import static org.junit.jupiter.api.Assertions.*;

/**
 * The pool's failure paths: a fill, a copy or an Error in the middle of an operation (copy-on-write append, batch
 * append, fork, free) changes nothing it did not finish, reservation included, and loses no page; a closed pool keeps
 * its read-only views and its storage while pins remain; a prefix page is never shared across a differing prefix.
 * Each test states the guarantee it checks. The failing storages and hooked words here serve other tests too.
 */
class PoolFaultPathsTest {

    // ---------------------------------------------------------------------------------------------
    // Forged prefix chains. fmix64 is a bijection, so a second preimage of a page's 64-bit PrefixHash is a
    // meet-in-the-middle search of ~2^17 fmix64 calls (milliseconds). The prefix cache must neither attach a
    // page whose KV was computed after another prefix (comparing the parent's chain hash would) nor let a
    // forged page keep the genuine one out of its index (keying the index by the chain hash would).

    private static final long M32 = 0xFFFFFFFFL;

    private static long inverse(long c) { // c odd: inverse mod 2^64 by Newton
        long x = c;
        for (int i = 0; i < 6; i++) {
            x *= 2 - c * x;
        }
        return x;
    }

    private static final long INV1 = inverse(0xff51afd7ed558ccdL);
    private static final long INV2 = inverse(0xc4ceb9fe1a85ec53L);

    static long unfmix64(long k) { // x ^= x >>> 33 is its own inverse (shift >= 32)
        k ^= k >>> 33;
        k *= INV2;
        k ^= k >>> 33;
        k *= INV1;
        k ^= k >>> 33;
        return k;
    }

    /** @return four token ids, different from {@code page}, whose chain hash after ROOT under {@code salt} equals page's */
    static int[] secondPreimage(int[] page, long salt) {
        assertEquals(4, page.length);
        final long target = PrefixHash.of(PrefixHash.ROOT, salt, page, 0, 4);
        final long start = PrefixHash.fmix64(PrefixHash.fmix64(PrefixHash.ROOT ^ 0x9E3779B97F4A7C15L) ^ salt);
        final Map<Integer, Integer> forward = new HashMap<>();
        for (int a0 = 1_000_000; a0 < 1_000_000 + (1 << 18); a0++) {
            final long s0 = PrefixHash.fmix64(start ^ (a0 & M32));
            forward.put((int) (s0 >>> 32), a0);
        }
        for (int a3 = 0; a3 < (1 << 24); a3++) {
            final long s2 = unfmix64(target) ^ ((3L << 32) | (a3 & M32));
            final int a2 = 77;
            final long s1 = unfmix64(s2) ^ ((2L << 32) | (a2 & M32));
            final long r = unfmix64(s1);
            final Integer a0 = forward.get((int) (r >>> 32) ^ 1);
            if (a0 != null) {
                final long s0 = PrefixHash.fmix64(start ^ (a0 & M32));
                final int a1 = (int) ((r ^ s0) & M32);
                final int[] forged = {a0, a1, a2, a3};
                assertEquals(target, PrefixHash.of(PrefixHash.ROOT, salt, forged, 0, 4), "collision search is wrong");
                assertFalse(java.util.Arrays.equals(forged, page));
                return forged;
            }
        }
        throw new AssertionError("no second preimage found");
    }

    private static int[] concat(int[]... parts) {
        return java.util.Arrays.stream(parts).flatMapToInt(java.util.Arrays::stream).toArray();
    }

    private static Sequence prefill(KvPool pool, int[] prompt, long salt, long owner) {
        final Sequence s = pool.admit(prompt, 0, salt).sequence();
        final int cached = s.tokenCount();
        s.append(prompt.length - cached);
        TokenTags.writeSequence(s, owner, cached, prompt.length);
        s.publish(prompt, salt);
        return s;
    }

    @Test
    void aPageIsNeverSharedWithARequestWhosePrefixBeforeItDiffers() {
        final long salt = PrefixHash.SHARED_SALT; // tenants opted in to share a public system prompt
        final int[] system = {11, 12, 13, 14};      // public first page
        final int[] forged = secondPreimage(system, salt);
        final int[] common = {21, 22, 23, 24};      // a continuation many requests share
        try (KvPool pool = TestPools.pool(16)) {
            final Sequence genuine = prefill(pool, concat(system, new int[] {99}), salt, 1); // indexes page "system"
            final Sequence adversary = prefill(pool, concat(forged, common, new int[] {98}), salt, 666);
            // the adversary's page 1 holds KV computed after `forged`, not after `system`
            final Sequence victim = pool.admit(concat(system, common, new int[] {97}), 4, salt).sequence();
            final boolean poisoned = victim.pageCount() >= 2 && victim.pageIndex(1) == adversary.pageIndex(1);
            assertFalse(poisoned, () -> "victim (prompt system+common) attached the adversary's page 1, whose KV was computed after "
                + java.util.Arrays.toString(forged) + " instead of " + java.util.Arrays.toString(system)
                + "; victim token 4 reads tag " + Long.toHexString(TokenTags.readSequence(victim, 4))
                + " = adversary's " + Long.toHexString(TokenTags.tag(666, 4)));
            // the genuine sharing of the public first page still works
            assertEquals(4, victim.tokenCount(), "the public first page is shared");
            assertEquals(genuine.pageIndex(0), victim.pageIndex(0));
            // the victim's own page 1 (KV computed after `system`) is indexed apart from the adversary's, under its
            // own digest: a later equal request shares it, and still never the adversary's
            victim.append(5);
            TokenTags.writeSequence(victim, 7, 4, 9);
            victim.publish(concat(system, common, new int[] {97}), salt);
            final Sequence next = pool.admit(concat(system, common, new int[] {96}), 4, salt).sequence();
            assertEquals(8, next.tokenCount());
            assertEquals(victim.pageIndex(1), next.pageIndex(1));
            assertNotEquals(adversary.pageIndex(1), next.pageIndex(1));
            next.append(1);
            next.close();
            victim.close();
            adversary.close();
            genuine.close();
        }
    }

    @Test
    void aForgedChainHashDoesNotKeepTheGenuinePageOutOfTheCache() {
        // The adversary publishes first a page whose 64-bit chain hash equals the public page's (a second preimage,
        // milliseconds of work). Keyed by that hash, the index kept the forged page and refused the genuine one, so
        // no tenant ever shared the public page again: every request recomputed it (lost sharing for all of them).
        final long salt = PrefixHash.SHARED_SALT;
        final int[] system = {11, 12, 13, 14};
        final int[] forged = secondPreimage(system, salt);
        try (KvPool pool = TestPools.pool(16)) {
            final Sequence adversary = prefill(pool, concat(forged, new int[] {98}), salt, 666);
            final Sequence genuine = prefill(pool, concat(system, new int[] {99}), salt, 1);
            assertEquals(2, pool.snapshot().publishedPrefixes(), "both full first pages are in the index: "
                + pool.snapshot());
            final long hitsBefore = pool.snapshot().prefixHits();
            final Sequence next = pool.admit(concat(system, new int[] {97}), 4, salt).sequence();
            assertEquals(4, next.tokenCount(), "the public page is shared despite the forged page under its chain hash");
            assertEquals(genuine.pageIndex(0), next.pageIndex(0));
            assertEquals(hitsBefore + 1, pool.snapshot().prefixHits());
            final Sequence again = pool.admit(concat(forged, new int[] {96}), 4, salt).sequence();
            assertEquals(adversary.pageIndex(0), again.pageIndex(0), "the forged page is still found by its own content");
            again.close();
            next.close();
            genuine.close();
            adversary.close();
        }
    }

    // ---------------------------------------------------------------------------------------------
    // Sequence.append promises "All or nothing: on an exception nothing changed": when the copy-on-write copy
    // fails, the fresh pages go back and so does the reservation they consumed.

    /** Host storage whose next copyPages throws (a device copy failing, say). */
    static final class FailingCopyStorage implements io.kvpool.storage.PageStorage {
        final io.kvpool.storage.HostPageStorage d;
        volatile boolean failNextCopy;

        FailingCopyStorage(KvLayout layout, int pages) {
            d = io.kvpool.storage.HostPageStorage.allocate(layout, pages);
        }

        public KvLayout layout() { return d.layout(); }
        public int pageCount() { return d.pageCount(); }
        public boolean isHostAccessible() { return true; }
        public java.lang.foreign.MemorySegment hostPage(int page) { return d.hostPage(page); }
        public long address(int page, int layer, int kv) { return d.address(page, layer, kv); }
        volatile boolean failNextFill;
        /** Runs at the start of the next fill, once (a test's way into the window between allocation and fill). */
        volatile Runnable beforeNextFill;

        /** Every page a fill was asked for, in order. */
        final java.util.List<Integer> fills = new java.util.concurrent.CopyOnWriteArrayList<>();

        public void fill(int page, io.kvpool.storage.FillMode mode) {
            fills.add(page);
            final Runnable before = beforeNextFill;
            if (before != null) {
                beforeNextFill = null;
                before.run();
            }
            if (failNextFill) {
                failNextFill = false;
                throw new IllegalStateException("injected fill failure");
            }
            d.fill(page, mode);
        }

        public int firstCanaryToken(int page, int from, int to) { return d.firstCanaryToken(page, from, to); }
        /** How many times the pool closed it. */
        final java.util.concurrent.atomic.AtomicInteger closes = new java.util.concurrent.atomic.AtomicInteger();
        public void close() { closes.incrementAndGet(); d.close(); }

        /** Runs at the start of the next copy, once. */
        volatile Runnable beforeNextCopy;

        public void copyPages(int[] src, int srcOff, int[] dst, int dstOff, int count) {
            final Runnable before = beforeNextCopy;
            if (before != null) {
                beforeNextCopy = null;
                before.run();
            }
            if (failNextCopy) {
                failNextCopy = false;
                throw new IllegalStateException("injected copy failure");
            }
            d.copyPages(src, srcOff, dst, dstOff, count);
        }
    }

    @Test
    void aFailedCopyOnWriteAppendChangesNothingNotEvenTheReservation() {
        final FailingCopyStorage[] storage = new FailingCopyStorage[1];
        try (KvPool pool = TestPools.builder(6).storage((l, n) -> storage[0] = new FailingCopyStorage(l, n)).build()) {
            final Sequence parent = pool.admit(6, 6).sequence(); // 12 tokens: 3 pages reserved
            parent.append(6);                                    // 2 pages, the last one partial; 1 reserved
            final Sequence child = parent.fork();                // parent: +1 copy-on-write credit -> 2 reserved
            final int reservedBefore = parent.reservedPages();
            final long poolReservedBefore = pool.snapshot().reserved();
            storage[0].failNextCopy = true;
            assertThrows(IllegalStateException.class, () -> parent.append(1)); // copy of the shared last page fails
            assertEquals(6, parent.tokenCount());
            assertEquals(reservedBefore, parent.reservedPages(),
                "append threw, so nothing may have changed; the pool's reserved went " + poolReservedBefore + " -> "
                    + pool.snapshot().reserved());
            child.close();
            parent.close();
        }
    }

    /**
     * A copy-on-write append fails in its copy, and the undo's release of the copy's target throws an Error from the
     * fill: the undo still gives back the step's other page and the reservation, and then throws that Error.
     */
    @Test
    void anErrorFillingAPageDuringTheUndoOfAFailedAppendLosesNeitherPagesNorReservation() {
        final FailingCopyStorage[] storage = new FailingCopyStorage[1];
        try (KvPool pool = TestPools.builder(16).storage((l, n) -> storage[0] = new FailingCopyStorage(l, n)).build()) {
            final int pp = pool.layout().tokensPerPage();
            final Sequence parent = pool.admit(pp + pp / 2, 3 * pp).sequence(); // 5 pages admitted
            parent.append(pp + pp / 2);                                       // 2 pages, the last one partial
            final Sequence child = parent.fork();                             // shares both: the next append copies
            final int reservedBefore = parent.reservedPages();
            final long poolReservedBefore = pool.snapshot().reserved();
            storage[0].failNextCopy = true; // the copy of the shared last page fails ...
            storage[0].beforeNextFill = () -> { // ... and the undo's fill of the copy's target, as it is freed
                throw new OutOfMemoryError("injected: no memory for the fill");
            };
            final OutOfMemoryError e = assertThrows(OutOfMemoryError.class, () -> parent.append(pp)); // a copy + 1 new page
            assertEquals("injected copy failure", e.getSuppressed()[0].getMessage(), "the copy's failure rides along");
            assertEquals(pp + pp / 2, parent.tokenCount());
            assertEquals(reservedBefore, parent.reservedPages(), "the step's reservation is the sequence's again");
            assertEquals(poolReservedBefore, pool.snapshot().reserved());
            child.close();
            parent.close();
            final PoolSnapshot after = pool.snapshot();
            assertEquals(16, after.free(), after::toString);
            assertEquals(0, after.reserved(), after::toString);
            assertTrue(pool.verifyAccounting().balanced());
        }
    }

    /**
     * During a copy-on-write append the page's other holder lets go, so the append's release of the replaced page
     * frees it, and that page's fill throws an Error: the append has taken effect whole (its new page is in the table),
     * and every page comes back when the sequence closes.
     */
    @Test
    void anErrorFreeingThePageACopyReplacedLeavesTheAppendWhole() {
        final FailingCopyStorage[] storage = new FailingCopyStorage[1];
        try (KvPool pool = TestPools.builder(16).storage((l, n) -> storage[0] = new FailingCopyStorage(l, n)).build()) {
            final int pp = pool.layout().tokensPerPage();
            final Sequence parent = pool.admit(pp + pp / 2, 3 * pp).sequence();
            parent.append(pp + pp / 2);
            final Sequence child = parent.fork();
            storage[0].beforeNextCopy = () -> { // the other holder lets go while the copy runs
                child.close();
                storage[0].beforeNextFill = () -> {
                    throw new OutOfMemoryError("injected: no memory for the fill");
                };
            };
            assertThrows(OutOfMemoryError.class, () -> parent.append(pp)); // a copy + 1 new page
            assertEquals(2 * pp + pp / 2, parent.tokenCount(), "the append took effect");
            assertEquals(3, parent.pageCount());
            parent.close();
            final PoolSnapshot after = pool.snapshot();
            assertEquals(16, after.free(), after::toString);
            assertEquals(0, after.reserved(), after::toString);
            assertTrue(pool.verifyAccounting().balanced());
        }
    }

    /**
     * The same in a batch step: the first sequence's replaced page fails its fill; the second copying sequence and one
     * that needed no page (its tokens fit its last page) are still appended to.
     */
    @Test
    void anErrorFreeingOnePageABatchCopyReplacedLeavesEverySequenceWhole() {
        final FailingCopyStorage[] storage = new FailingCopyStorage[1];
        try (KvPool pool = TestPools.builder(24).storage((l, n) -> storage[0] = new FailingCopyStorage(l, n)).build()) {
            final int pp = pool.layout().tokensPerPage();
            final int step = pp / 2;
            final Sequence[] batch = new Sequence[3];
            final Sequence[] children = new Sequence[2];
            for (int i = 0; i < 2; i++) {
                batch[i] = pool.admit(pp + step, 3 * pp).sequence();
                batch[i].append(pp + step); // the last page half full and shared below: the step copies it
                children[i] = batch[i].fork();
            }
            batch[2] = pool.admit(1, 3 * pp).sequence();
            batch[2].append(1); // room for the step in its last page: no page, only tokens
            storage[0].beforeNextCopy = () -> {
                children[0].close();
                children[1].close();
                storage[0].beforeNextFill = () -> {
                    throw new OutOfMemoryError("injected: no memory for the fill");
                };
            };
            assertThrows(OutOfMemoryError.class, () -> pool.appendEach(batch, 3, step));
            for (int i = 0; i < 2; i++) {
                assertEquals(pp + 2 * step, batch[i].tokenCount(), "copying sequence " + i + ": the step took effect");
                assertEquals(2, batch[i].pageCount());
            }
            assertEquals(1 + step, batch[2].tokenCount(), "the sequence that needed no page keeps its tokens too");
            for (Sequence seq : batch) {
                seq.close();
            }
            final PoolSnapshot after = pool.snapshot();
            assertEquals(24, after.free(), after::toString);
            assertEquals(0, after.reserved(), after::toString);
            assertTrue(pool.verifyAccounting().balanced());
        }
    }

    /** Storage with no bytes (large pages without memory). */
    static final class NoBytes implements io.kvpool.storage.PageStorage {
        final KvLayout layout;
        final int pages;

        NoBytes(KvLayout layout, int pages) {
            this.layout = layout;
            this.pages = pages;
        }

        public KvLayout layout() { return layout; }
        public int pageCount() { return pages; }
        public boolean isHostAccessible() { return false; }
        public java.lang.foreign.MemorySegment hostPage(int page) { throw new UnsupportedOperationException(); }
        public long address(int page, int layer, int kv) { return 0; }
        public void fill(int page, io.kvpool.storage.FillMode mode) { }
        public int firstCanaryToken(int page, int from, int to) { return -1; }
        public void copyPages(int[] src, int srcOff, int[] dst, int dstOff, int count) { }
        public void close() { }
    }

    @Test
    void aContextBeyondWhatASequenceCanCountIsRefusedAtBuild() {
        // accepting it would let a sequence's int tokenCount wrap negative past Integer.MAX_VALUE tokens
        final KvLayout big = new KvLayout(1, 1, 1, DType.FP8, 1 << 20);
        final KvPoolBuilder b = KvPool.builder(big).pages(2049).maxContextTokens(2049L << 20).storage(NoBytes::new);
        final PoolCapacityException e = assertThrows(PoolCapacityException.class, b::build);
        assertTrue(e.getMessage().contains("2,148,532,224") && e.getMessage().contains("2,147,483,647"), e.getMessage());
        assertEquals(Integer.MAX_VALUE, e.poolTokens(), "one request is one sequence: the largest safe context");
        try (KvPool pool = KvPool.builder(big).pages(2049).maxContextTokens(Integer.MAX_VALUE).storage(NoBytes::new).build()) {
            assertEquals(Integer.MAX_VALUE, pool.maxContextTokens());
        }
    }

    // ---------------------------------------------------------------------------------------------
    // close() counts the pinned pages slot by slot (snapshotLocked), then sets pinnedAfterClose. An unpin whose
    // CAS lands after the scan read its slot and before the set must not make the count run BEHIND by one: the
    // last real unpin would leave it at 1, no scan would run, and the storage kept at close would never go.
    // (afterCloseTransition's Javadoc: "the count can run ahead, never behind, and the last unpin always
    // triggers the scan".)

    private static long pinnedAfterClose(KvPool pool) throws Exception {
        return pool.lifetime().pinnedAfterClose();
    }

    @Test
    void afterCloseReleasesAndPinStepsAreAcceptedWhileAPinKeepsTheStorageAndNothingIsAfter() {
        // what KvPool.close documents: while a pin keeps the storage, the transport finishes and references go;
        // no new reference or pin is taken; once the storage is released, only the read-only views work
        final KvPool pool = TestPools.pool(4);
        final long pinned = pool.tryAllocate(), owned = pool.tryAllocate(), other = pool.tryAllocate();
        pool.handles().pinWriter(pinned);
        pool.close();
        assertThrows(IllegalStateException.class, () -> pool.retain(owned));
        assertThrows(IllegalStateException.class, () -> pool.handles().pinWriter(other));
        pool.release(owned);                   // a reference released after close
        pool.handles().beginDrain(pinned);     // a pin moved
        assertEquals(SlotState.DRAINING, pool.stateOfSlot(PageHandle.slot(pinned)));
        pool.handles().drained(pinned);        // the last pin ends: the storage goes
        assertThrows(IllegalStateException.class, () -> pool.release(other));
        assertEquals(SlotState.OWNED, pool.stateOfSlot(PageHandle.slot(other)), "a read-only view still works");
    }

    @Test
    void closeCountsAPageMovingBetweenPinnedPhasesOnceAndStillReleasesTheStorage() throws Exception {
        // a transport ends its receives as the pool closes: a page moves RECEIVING → DRAINING between close's reads of
        // the pinned counts. Counted twice, the count would never reach zero after the last unpin: storage kept for good
        for (int at = 0; at < 2; at++) {
            final KvPool pool = TestPools.pool(4);
            final long moving = pool.tryAllocate(), still = pool.tryAllocate();
            pool.handles().pinWriter(moving);
            pool.handles().pinWriter(still);
            final PageCounts counts = pool.slotTable().counts();
            final int[] gap = {0};
            final int moveAt = at;
            counts.betweenPinnedReads = () -> {
                if (gap[0]++ == moveAt) {
                    pool.handles().beginDrain(moving);
                }
            };
            pool.close();
            counts.betweenPinnedReads = null;
            assertEquals(2, gap[0], "close counts the pinned pages with pinnedAtMostOnce");
            final long counted = pool.lifetime().pinnedAfterClose();
            assertTrue(counted <= 2, "2 pages pinned, " + counted + " counted (the move after read " + (at + 1) + ")");
            pool.handles().drained(moving);
            pool.handles().commitReceive(still);
            assertThrows(IllegalStateException.class, () -> pool.storage().hostPage(0), "every pin ended: the storage goes");
        }
    }

    @Test
    void aCloseThatFailsStillReleasesTheStorageAndALaterCloseReturns() {
        final KvPool pool = TestPools.pool(4);
        pool.slotTable().counts().betweenPinnedReads = () -> {
            throw new IllegalStateException("injected: counting the pinned pages failed");
        };
        final IllegalStateException e = assertThrows(IllegalStateException.class, pool::close);
        assertEquals("injected: counting the pinned pages failed", e.getMessage());
        pool.slotTable().counts().betweenPinnedReads = null;
        assertTrue(pool.isClosed());
        assertThrows(IllegalStateException.class, () -> pool.storage().hostPage(0), "no page was pinned: the storage goes");
        pool.close(); // returns: nothing left to wait for
    }

    @Test
    void aCloseThatFailsWithAPinnedPageReleasesTheStorageAtItsLastUnpin() {
        final KvPool pool = TestPools.pool(4);
        final long pinned = pool.tryAllocate();
        pool.handles().pinWriter(pinned);
        pool.slotTable().counts().betweenPinnedReads = () -> {
            throw new IllegalStateException("injected");
        };
        assertThrows(IllegalStateException.class, pool::close);
        pool.slotTable().counts().betweenPinnedReads = null;
        pool.storage().hostPage(0); // a peer may still write: kept
        pool.handles().commitReceive(pinned);
        assertThrows(IllegalStateException.class, () -> pool.storage().hostPage(0), "the last pin ended: the storage goes");
    }

    @Test
    void theLastUnpinAfterCloseReleasesTheStorageEvenWhenAnUnpinRacesCloseItself() throws Exception {
        final CountingHookWords[] words = new CountingHookWords[1];
        final KvPoolBuilder b = TestPools.builder(4);
        b.slotWords = n -> words[0] = new CountingHookWords(n);
        final KvPool pool = b.build();
        final long racing = pool.tryAllocate();
        final long last = pool.tryAllocate();
        pool.handles().pinWriter(racing);
        pool.handles().pinWriter(last);
        final Thread[] transferThread = new Thread[1];
        words[0].arm(PageHandle.slot(racing), 0, () -> { // close's release scan has just read `racing` as RECEIVING
            transferThread[0] = Thread.ofPlatform().start(() -> pool.handles().commitReceive(racing)); // legal after close
            final long deadline = System.nanoTime() + 10_000_000_000L;
            try {
                while (pinnedAfterClose(pool) != 1) { // its decrement happened (2 counted at close); `last` remains
                    if (System.nanoTime() > deadline) {
                        throw new AssertionError("transfer thread did not decrement");
                    }
                    Thread.onSpinWait();
                }
            } catch (Exception e) {
                throw new AssertionError(e);
            }
        });
        pool.close(); // storage retained: two pages pinned
        transferThread[0].join(10_000);
        assertEquals(SlotState.OWNED, pool.stateOfSlot(PageHandle.slot(racing)));
        pool.handles().commitReceive(last); // the last pin is gone
        assertEquals(SlotState.OWNED, pool.stateOfSlot(PageHandle.slot(last)));
        assertThrows(IllegalStateException.class, () -> pool.storage().hostPage(0),
            "no page is pinned any more, yet the storage kept at close was never released (pinnedAfterClose = "
                + pinnedAfterClose(pool) + ")");
    }

    // ---------------------------------------------------------------------------------------------
    // KvPool.close()'s Javadoc and its behaviour agree: the read-only views keep working, the rest throws.

    @Test
    void aClosedPoolKeepsItsReadOnlyViewsAndRefusesTheRest() {
        // close()'s Javadoc must not say every other operation throws: the views deliberately keep working
        final KvPool pool = TestPools.pool(2);
        pool.close();
        assertEquals(0, pool.snapshot().inUse());
        assertDoesNotThrow(pool::verifyAccounting);
        assertEquals(SlotState.FREE, pool.stateOfSlot(0));
        assertThrows(IllegalStateException.class, () -> pool.admit(1, 0));
        assertThrows(IllegalStateException.class, pool::tryAllocate);
    }

    // ---------------------------------------------------------------------------------------------
    // onBecameFree fills the page AFTER the CAS that made it FREE. A fill that throws (a device storage's kernel
    // or driver error) must not leave the page FREE in no free structure: lost to allocation forever, and
    // verifyAccounting() failing.

    @Test
    void aFreedPageIsNeverLostWhenItsFillFails() {
        // the exception must not leave release() after the CAS to FREE, before the page reaches a free structure
        final FailingCopyStorage[] storage = new FailingCopyStorage[1];
        try (KvPool pool = TestPools.builder(2).storage((l, n) -> storage[0] = new FailingCopyStorage(l, n)).build()) {
            final long h = pool.tryAllocate();
            storage[0].failNextFill = true;
            assertTrue(pool.release(h), "the release took effect");
            assertEquals(SlotState.FREE, pool.stateOfSlot(PageHandle.slot(h)));
            assertDoesNotThrow(pool::verifyAccounting);
            final Admission a = pool.admit(8, 0);
            assertTrue(a.admitted(), "both pages are FREE, yet a 2-page request is refused");
            a.sequence().close();
        }
    }

    @Test
    void aPageWhoseFillFailedIsFilledBeforeItIsHandedOutAgain() {
        // the other half: the page kept its last tenant's bytes when its fill failed; they must never reach the next
        final FailingCopyStorage[] storage = new FailingCopyStorage[1];
        try (KvPool pool = TestPools.builder(1).storage((l, n) -> storage[0] = new FailingCopyStorage(l, n)).build()) {
            final long h = pool.tryAllocate();
            final var page = pool.page(h);
            page.fill((byte) 0x5A); // the tenant's KV
            storage[0].failNextFill = true;
            pool.release(h);
            final long next = pool.tryAllocate();
            assertEquals(PageHandle.slot(h), PageHandle.slot(next));
            assertEquals(0, pool.firstCanaryToken(next, 0, pool.layout().tokensPerPage()),
                "the next tenant's page still holds the last tenant's bytes");
            pool.release(next);
        }
    }

    @Test
    void anErrorFillingOneFreedPageLosesNeitherTheOtherPagesNorTheReservation() {
        final FailingCopyStorage[] storage = new FailingCopyStorage[1];
        try (KvPool pool = TestPools.builder(6).storage((l, n) -> storage[0] = new FailingCopyStorage(l, n)).build()) {
            final Sequence seq = pool.admit(12, 4).sequence(); // 16 tokens: 4 pages admitted
            seq.append(12);                                    // 3 pages, 1 still reserved
            for (int i = 0; i < 3; i++) {
                pool.page(seq.pageHandle(i)).fill((byte) 0x5A); // the tenant's KV
            }
            final long middle = seq.pageHandle(1);
            storage[0].beforeNextFill = () -> { // the first page closed is the last: the fill of the second one fails
                storage[0].beforeNextFill = () -> {
                    throw new OutOfMemoryError("injected: no memory for the fill");
                };
            };
            assertThrows(OutOfMemoryError.class, seq::close);
            assertTrue(seq.isClosed());
            final PoolSnapshot after = pool.snapshot();
            assertEquals(6, after.free(), after::toString);
            assertEquals(0, after.reserved(), after::toString);
            assertEquals(0, after.openSequences(), after::toString);
            assertTrue(pool.verifyAccounting().balanced());
            final Sequence next = pool.admit(24, 0).sequence(); // every page again, the unfilled one filled first
            next.append(24);
            for (int i = 0; i < 6; i++) {
                assertEquals(0, pool.firstCanaryToken(next.pageHandle(i), 0, pool.layout().tokensPerPage()),
                    "page " + i + " (slot " + PageHandle.slot(next.pageHandle(i)) + ", the failed fill's: " + PageHandle.slot(middle)
                    + ") still holds the last tenant's bytes");
            }
            next.close();
        }
    }

    // =============================================================================================
    /** State words that, once armed, run a callback on the armed thread right after its (skip+1)-th read of one slot. */
    @Test
    void anErrorWhileAForkRetainsItsPagesLeavesNoReservationNoSequenceAndNoReference() {
        final CountingHookWords[] words = new CountingHookWords[1];
        final KvPoolBuilder b = TestPools.builder(8);
        b.slotWords = n -> words[0] = new CountingHookWords(n);
        try (KvPool pool = b.build()) {
            final Sequence s = pool.admit(3 * TPP, TPP).sequence(); // 4 pages admitted: a fork reserves the child's growth
            s.append(3 * TPP);
            final PoolSnapshot before = pool.snapshot();
            words[0].arm(s.pageIndex(1), 0, () -> {
                throw new StackOverflowError("injected while retaining page 1");
            });
            assertThrows(StackOverflowError.class, s::tryFork);
            final PoolSnapshot after = pool.verifyAccounting();
            assertEquals(before.reserved(), after.reserved(), "the child's reservation: " + after);
            assertEquals(before.openSequences(), after.openSequences(), "the child: " + after);
            s.close();
            final PoolSnapshot closed = pool.verifyAccounting();
            assertEquals(0, closed.inUse(), "a page retained for the child that never was: " + closed);
            assertEquals(0, closed.reserved(), closed.toString());
        }
    }

    static final class CountingHookWords implements SlotWords {
        final SlotWords d;
        volatile Thread armedFor;
        volatile int hookSlot = -1;
        volatile int skip;
        volatile Runnable hook;

        CountingHookWords(int n) {
            d = SlotWords.ofArray(n);
        }

        void arm(int slot, int skipReads, Runnable r) {
            hookSlot = slot;
            skip = skipReads;
            hook = r;
            armedFor = Thread.currentThread();
        }

        /** Whether the hook runs before the read it is armed for (it sees the hook's effect), else after it. */
        volatile boolean before;

        public long getVolatile(int i) {
            if (before) {
                fireHook(i);
                return d.getVolatile(i);
            }
            final long w = d.getVolatile(i);
            fireHook(i);
            return w;
        }

        private void fireHook(int i) {
            if (i == hookSlot && Thread.currentThread() == armedFor && hook != null) {
                if (skip-- <= 0) {
                    final Runnable r = hook;
                    hook = null;
                    r.run();
                }
            }
        }

        public boolean compareAndSet(int i, long e, long u) { return d.compareAndSet(i, e, u); }
        public void setRelease(int i, long v) { d.setRelease(i, v); }
        public int length() { return d.length(); }
    }

    private static final int TPP = TestPools.SMALL.tokensPerPage();

    /**
     * A beam-search step over two forks sharing a partial page while the third holder publishes it and leaves, on
     * another thread, at every point of the step's reads of that page's state word: the last fork may write in place
     * only into a page nobody published (a published prefix is immutable whoever holds it).
     */
    @Test
    void aBatchStepNeverWritesInPlaceIntoAPageAnotherThreadPublishedMeanwhile() throws Exception {
        final int[] ids = new int[TPP];
        for (int t = 0; t < TPP; t++) {
            ids[t] = 1 + t;
        }
        for (int skip = 0; skip < 8; skip++) {
            final CountingHookWords[] words = new CountingHookWords[1];
            final KvPoolBuilder b = TestPools.builder(8);
            b.slotWords = n -> words[0] = new CountingHookWords(n);
            try (KvPool pool = b.build()) {
                final Sequence s1 = pool.admit(TPP, 2).sequence();
                s1.append(TPP);
                TokenTags.writeSequence(s1, 1, 0, TPP); // every vector written, so publish accepts the page
                final Sequence s2 = s1.fork(), s3 = s1.fork();
                s2.truncate(1);
                s3.truncate(1); // X: partial for both forks, held by three
                final int x = s1.pageIndex(0);
                final boolean[] published = new boolean[1];
                words[0].before = true;
                words[0].arm(x, skip, () -> { // the publisher, on its own thread, while the step is between two reads
                    final Thread t = Thread.ofPlatform().start(() -> {
                        s1.publish(ids, 42L);
                        s1.close();
                    });
                    try {
                        t.join(10_000);
                    } catch (InterruptedException e) {
                        throw new AssertionError(e);
                    }
                    published[0] = true;
                });
                pool.appendEach(new Sequence[] {s2, s3}, 2, 1);
                final int fired = skip;
                assertFalse(published[0] && s3.pageIndex(0) == x, () -> "skip " + fired + ": s3 appended in place into slot "
                    + x + ", which s1 published during the step");
                s2.close();
                s3.close();
                if (!published[0]) {
                    s1.close();
                }
            }
        }
    }

    // ---------------------------------------------------------------------------------------------
    // A page whose fill failed when the cache owner (the scheduler) freed it carries the `unfilled` mark; every path
    // that hands a page out honours it, tryAllocate's lock-free fast path through the AllocatorCache included, or the
    // next tenant would get the last tenant's bytes.

    @Test
    void aPageWhoseFillFailedIsNotHandedOutUnfilledByTheAllocatorCache() {
        final FailingCopyStorage[] storage = new FailingCopyStorage[1];
        try (KvPool pool = TestPools.builder(2).threadCache(4)
            .storage((l, n) -> storage[0] = new FailingCopyStorage(l, n)).build()) {
            final long h = pool.tryAllocate();           // this thread becomes the cache owner
            pool.page(h).fill((byte) 0x5A);              // tenant A's KV
            storage[0].failNextFill = true;
            assertTrue(pool.release(h));                 // the fill fails: FREE, marked unfilled
            final long x = pool.tryAllocate();           // whichever way the two pages come back (fast path or not)
            final long y = pool.tryAllocate();
            final long again = PageHandle.slot(x) == PageHandle.slot(h) ? x : y;
            assertEquals(PageHandle.slot(h), PageHandle.slot(again));
            final MemorySegment page = pool.page(again);
            assertEquals(0, pool.firstCanaryToken(again, 0, TPP),
                "tenant B's fresh page still holds tenant A's bytes (first byte 0x"
                    + Integer.toHexString(page.get(java.lang.foreign.ValueLayout.JAVA_BYTE, 0) & 0xFF) + ")");
            pool.release(x);
            pool.release(y);
        }
    }

    // ---------------------------------------------------------------------------------------------
    // "A second failure is the allocator's to throw": allocateFor/tryAllocate must not throw after the pages were
    // taken and the reservation consumed. The pages would stay OWNED with no holder (lost until close), and
    // Sequence.append's "All or nothing: on an exception nothing changed" would break (its reservation gone, the
    // admitted request could no longer grow).

    @Test
    void aFailedFillOfAnUnfilledPageAtAllocationLosesNeitherThePageNorTheReservation() {
        final FailingCopyStorage[] storage = new FailingCopyStorage[1];
        try (KvPool pool = TestPools.builder(1)
            .storage((l, n) -> storage[0] = new FailingCopyStorage(l, n)).build()) {
            final long h = pool.tryAllocate();
            storage[0].failNextFill = true;
            pool.release(h);                             // fill fails: FREE, marked unfilled
            final Sequence seq = pool.admit(TPP, 0).sequence(); // 1 page reserved
            storage[0].failNextFill = true;              // the allocator's fill of the marked page fails too
            assertThrows(IllegalStateException.class, () -> seq.append(TPP));
            assertEquals(0, seq.pageCount());
            assertEquals(1, seq.reservedPages(), "append threw, so nothing may have changed: the reservation is gone");
            assertEquals(0, pool.snapshot().owned(), "the page the failed append took is OWNED by nobody");
            seq.append(TPP);                             // the storage works again: the admitted request must fit
            seq.close();
        }
    }

    @Test
    void aFailedFillAtTryAllocateLosesNotThePage() {
        final FailingCopyStorage[] storage = new FailingCopyStorage[1];
        try (KvPool pool = TestPools.builder(1)
            .storage((l, n) -> storage[0] = new FailingCopyStorage(l, n)).build()) {
            final long h = pool.tryAllocate();
            storage[0].failNextFill = true;
            pool.release(h);                             // FREE, marked unfilled
            storage[0].failNextFill = true;              // and its fill at allocation fails too
            assertThrows(IllegalStateException.class, pool::tryAllocate);
            assertEquals(0, pool.snapshot().owned(), "the page tryAllocate took is OWNED by nobody");
            final long again = pool.tryAllocate();       // the storage works again
            assertEquals(PageHandle.slot(h), PageHandle.slot(again));
            assertEquals(0, pool.firstCanaryToken(again, 0, TPP));
            pool.release(again);
            assertDoesNotThrow(pool::verifyAccounting);
        }
    }

    // ---------------------------------------------------------------------------------------------
    // A stray release (misuse) racing publish.
    // publish checks OWNED under the pool lock, but releases are lock-free: a release landing between the
    // check and prefix.publish frees the page while it is not yet marked (so it is filled and, on the cache
    // owner's thread, goes into the AllocatorCache), and publish then marks and indexes a FREE page. The
    // fast path hands it to tenant B still indexed, and tenant C's admission attaches B's live page.
    // One stray release thus leaks B's KV to an unrelated tenant C.

    /** A stray release of page 0 fires inside the {@code skip}+1-th read of its state word during {@code a.publish}. */
    private static void strayReleaseDuringPublish(int skip, boolean thenTenantC) {
        final CountingHookWords[] words = new CountingHookWords[1];
        final KvPoolBuilder b = TestPools.builder(8).threadCache(4);
        b.slotWords = n -> words[0] = new CountingHookWords(n);
        try (KvPool pool = b.build()) {
            final long salt = 42;
            final int[] prompt = {1, 2, 3, 4, 5};
            final Sequence a = pool.admit(prompt, 0, salt).sequence();
            a.append(prompt.length);                     // this thread allocates: it owns the allocator cache
            TokenTags.writeSequence(a, 1, 0, prompt.length);
            final long raw = a.pageHandle(0);            // a raw copy of the handle, held by a buggy holder
            words[0].arm(PageHandle.slot(raw), skip, () -> pool.release(raw));
            try {
                a.publish(prompt, salt);                 // published with its own reference held...
            } catch (IllegalStateException refused) { // ...or refused: the page is FREE (and filled) by then
                assertTrue(refused instanceof StaleHandleException
                    || refused.getMessage().contains("still holds the free-page canary"), refused.getMessage());
            }
            final long bHandle = pool.tryAllocate();     // tenant B: the allocator cache's fast path first
            if (!thenTenantC) {
                assertFalse(PageHandle.slot(raw) == PageHandle.slot(bHandle) && pool.snapshot().publishedPrefixes() > 0
                    && pool.admit(prompt, 0, salt).sequence().pageCount() > 0,
                    "skip " + skip + ": the page freed during publish was handed to tenant B while indexed in the prefix cache");
            } else {
                TokenTags.write(pool.page(bHandle), pool.layout(), 0, TokenTags.tag(0xB, 0)); // tenant B's secret
                final Sequence c = pool.admit(prompt, 0, salt).sequence();                    // unrelated tenant C
                final boolean leaked = c.pageCount() > 0 && c.pageIndex(0) == PageHandle.slot(bHandle);
                assertFalse(leaked, () -> "skip " + skip + ": tenant C attached tenant B's live page; C reads token 0 = "
                    + Long.toHexString(TokenTags.readSequence(c, 0)) + " = B's tag " + Long.toHexString(TokenTags.tag(0xB, 0)));
                c.close();
            }
            pool.release(bHandle);
        }
    }

    @Test
    void aReleaseRacingPublishNeverLeavesAFreePageIndexed() {
        for (int skip = 0; skip < 4; skip++) {
            strayReleaseDuringPublish(skip, false);
        }
    }

    @Test
    void aReleaseRacingPublishLeaksTenantBsPageToTenantC() {
        // the consequence of the interleaving above, end to end
        for (int skip = 0; skip < 4; skip++) {
            strayReleaseDuringPublish(skip, true);
        }
    }

    // ---------------------------------------------------------------------------------------------
    // Reservation ids carry a generation per index, and the free index stack is LIFO: a scheduler that reserves
    // and opens one request at a time reuses index 0 every time. With a 31-bit generation, after 2^31 - 1
    // reservations a stale id (a double cancel/open by a buggy caller) would be accepted again and cancel another
    // request's reservation. The id is a long, with room for a wider generation.

    @Test
    void aStaleReservationIdIsNeverAcceptedAgain() throws Exception {
        try (KvPool pool = TestPools.builder(4).build()) {
            final long stale = pool.tryReserve(1, 0);
            pool.cancelReservation(stale);
            pool.reservations().forceGeneration(Reservations.index(stale), Integer.MAX_VALUE); // as after 2^31 - 2 more reserve/cancel cycles
            final long live = pool.tryReserve(1, 0);                 // another request's reservation
            assertNotEquals(stale, live, "a new reservation got the id of one cancelled 2^31 - 1 reservations ago");
            pool.cancelReservation(live);
        }
    }

    @Test
    void aReservationIndexComesBackOnlyAfterEveryOtherFreeOne() {
        // the rule behind the fix: oldest free index first, so one index's generation advances once per
        // maxReservations reservations, not once per reservation
        try (KvPool pool = TestPools.builder(4).maxReservations(4).build()) {
            final java.util.Set<Integer> seen = new java.util.HashSet<>();
            long first = 0;
            for (int i = 0; i < 4; i++) {
                final long id = pool.tryReserve(1, 0);
                if (i == 0) {
                    first = id;
                }
                assertTrue(seen.add(Reservations.index(id)), "index " + Reservations.index(id) + " came back after " + i + " reservations");
                pool.cancelReservation(id);
            }
            final long again = pool.tryReserve(1, 0);
            assertEquals(Reservations.index(first), Reservations.index(again), "the fifth reuses the first index");
            assertEquals(Reservations.generation(first) + 1, Reservations.generation(again), "with the next generation");
            final long stale = first;
            final IllegalArgumentException e = assertThrows(IllegalArgumentException.class, () -> pool.cancelReservation(stale));
            assertTrue(e.getMessage().contains(Long.toString(stale)), e.getMessage());
            pool.cancelReservation(again);
        }
    }

    // ---------------------------------------------------------------------------------------------
    // close() keeps verifyAccounting() as a read-only view. A page a late unpin frees after close (storage retained
    // for a pinned page) skips onBecameFree's push ("nothing will allocate again"), so it is FREE in no free
    // structure: verifyAccounting() must not report that pool as broken.

    @Test
    void verifyAccountingHoldsAfterALateUnpinFreesAPageOfAClosedPool() {
        final KvPool pool = TestPools.pool(2);
        final long h = pool.tryAllocate();
        pool.handles().pinWriter(h);
        pool.release(h);                                 // RECEIVING(0): the pin alone holds it
        pool.close();                                    // storage kept: a peer may still write
        pool.handles().commitReceive(h);                           // the transfer ends: FREE, and the storage is released
        assertEquals(SlotState.FREE, pool.stateOfSlot(PageHandle.slot(h)));
        assertDoesNotThrow(pool::verifyAccounting);
    }
}
