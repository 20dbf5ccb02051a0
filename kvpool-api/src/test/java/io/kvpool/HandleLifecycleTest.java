package io.kvpool;

import io.kvpool.storage.FillMode;
import io.kvpool.storage.PageStorage;
import org.junit.jupiter.api.Test;

import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;

import static org.junit.jupiter.api.Assertions.*;

/** Handles, generations, writer pins, canary fill and close. */
class HandleLifecycleTest {

    @Test
    void aStaleHandleIsRefusedAndCountedOnEveryPath() {
        try (KvPool pool = TestPools.pool(1)) {
            final long first = pool.tryAllocate();
            assertTrue(pool.release(first));
            final long second = pool.tryAllocate();
            assertEquals(PageHandle.slot(first), PageHandle.slot(second), "one slot, reused");
            assertEquals(PageHandle.generation(first) + 1, PageHandle.generation(second));

            final StaleHandleException e = assertThrows(StaleHandleException.class, () -> pool.release(first));
            assertEquals(first, e.handle());
            assertEquals(StaleHandleException.Refusal.STALE, e.refusal());
            assertTrue(e.getMessage().contains("stale handle " + PageHandle.toString(first)) && e.getMessage().contains("OWNED(gen=2"), e.getMessage());
            assertThrows(StaleHandleException.class, () -> pool.retain(first));
            assertThrows(StaleHandleException.class, () -> pool.handles().pinWriter(first));
            assertThrows(StaleHandleException.class, () -> pool.page(first));
            assertEquals(PageHandle.STALE, pool.validate(first));
            assertEquals(PageHandle.STALE, pool.tryTransition(first, SlotEvent.RELEASE));
            assertNull(pool.state(first));
            assertEquals(SlotState.OWNED, pool.state(second));
            assertEquals(1, pool.refcountOfSlot(0), "the new tenant's refcount is untouched");
            assertEquals(6, pool.snapshot().staleHandlesRefused(), "six refusals; state() is a query and counts nothing");
            pool.release(second);
            pool.verifyAccounting();
        }
    }

    @Test
    void invalidHandlesAreRefused() {
        try (KvPool pool = TestPools.pool(2)) {
            for (long bad : new long[] {0, -1, 5, PageHandle.of(pool.poolId(), 2, 1), PageHandle.of(pool.poolId(), PageHandle.MAX_SLOT, 1)}) {
                assertEquals(PageHandle.INVALID, pool.validate(bad), PageHandle.toString(bad));
                assertEquals(StaleHandleException.Refusal.INVALID, assertThrows(StaleHandleException.class, () -> pool.release(bad)).refusal());
            }
            assertThrows(IllegalArgumentException.class, () -> pool.tryTransition(PageHandle.of(0, 1), SlotEvent.ALLOCATE));
            pool.verifyAccounting();
        }
    }

    @Test
    void doubleReleaseIsRefusedAndTheAccountingStillBalances() {
        try (KvPool pool = TestPools.pool(2)) {
            final long h = pool.tryAllocate();
            pool.retain(h);
            assertFalse(pool.release(h));
            assertTrue(pool.release(h));
            assertThrows(StaleHandleException.class, () -> pool.release(h));
            final PoolSnapshot s = pool.verifyAccounting();
            assertEquals(2, s.free());
            assertEquals(1, s.pagesFreed());
        }
    }

    @Test
    void aPinnedPageOutlivesItsLastReferenceUntilDrained() {
        try (KvPool pool = TestPools.pool(2)) {
            final long h = pool.tryAllocate();
            pool.handles().pinWriter(h);
            assertEquals(SlotState.RECEIVING, pool.state(h));
            assertFalse(pool.release(h), "the writer pin keeps the page");
            assertEquals(SlotState.RECEIVING, pool.state(h));
            assertEquals(0, pool.refcountOfSlot(PageHandle.slot(h)));
            assertThrows(IllegalSlotTransitionException.class, () -> pool.release(h), "no reference left to release");
            pool.handles().beginDrain(h);
            assertEquals(1, pool.snapshot().draining());
            assertThrows(StaleHandleException.class, () -> pool.page(PageHandle.of(pool.poolId(), PageHandle.slot(h), 99)));
            final IllegalSlotTransitionException notAccessible = assertThrows(IllegalSlotTransitionException.class, () -> pool.page(h));
            assertEquals(SlotState.DRAINING, notAccessible.state());
            pool.handles().drained(h);
            assertNull(pool.state(h), "drained with no reference: FREE");
            final PoolSnapshot s = pool.verifyAccounting();
            assertEquals(2, s.free());
        }
    }

    @Test
    void quarantineHoldsUntilExplicitlyReleased() {
        try (KvPool pool = TestPools.pool(2)) {
            final long h = pool.tryAllocate();
            pool.handles().pinWriter(h);
            pool.handles().beginDrain(h);
            pool.handles().quarantine(h);
            pool.release(h);
            assertEquals(SlotState.QUARANTINED, pool.state(h));
            for (SlotEvent e : SlotEvent.values()) {
                if (e != SlotEvent.RELEASE_QUARANTINE && e != SlotEvent.ALLOCATE) {
                    final long r = pool.tryTransition(h, e);
                    assertTrue(r < 0 || SlotStateMachine.state(r) == SlotState.QUARANTINED, e + " must not leave quarantine");
                }
            }
            final IllegalSlotTransitionException ex = assertThrows(IllegalSlotTransitionException.class, () -> pool.handles().drained(h));
            assertTrue(ex.getMessage().contains("slot " + PageHandle.slot(h)) && ex.getMessage().contains("QUARANTINED")
                && ex.getMessage().contains("generation " + PageHandle.generation(h)), ex.getMessage());
            assertEquals(1, pool.snapshot().quarantined());
            assertEquals(1, pool.snapshot().quarantineEvents());
            pool.handles().releaseQuarantine(h);
            assertEquals(2, pool.verifyAccounting().free());
        }
    }

    @Test
    void sharedOrPublishedPagesCannotBePinnedForWriting() {
        try (KvPool pool = TestPools.pool(4)) {
            final long h = pool.tryAllocate();
            pool.retain(h);
            assertThrows(IllegalSlotTransitionException.class, () -> pool.handles().pinWriter(h));
            pool.release(h);
            pool.release(h);
            final Sequence s = pool.admit(new int[] {1, 2, 3, 4, 5}, 0, 9).sequence();
            s.append(5);
            final IllegalStateException unwritten = assertThrows(IllegalStateException.class, () -> s.publish(new int[] {1, 2, 3, 4, 5}, 9));
            assertTrue(unwritten.getMessage().contains("canary at token 0"), unwritten.getMessage());
            TokenTags.writeSequence(s, 1, 0, 3);
            final IllegalStateException partly = assertThrows(IllegalStateException.class, () -> s.publish(new int[] {1, 2, 3, 4, 5}, 9));
            assertTrue(partly.getMessage().contains("canary at token 3"), partly.getMessage());
            TokenTags.writeSequence(s, 1, 3, 5);
            s.publish(new int[] {1, 2, 3, 4, 5}, 9);
            final IllegalSlotTransitionException e = assertThrows(IllegalSlotTransitionException.class, () -> pool.handles().pinWriter(s.pageHandle(0)));
            assertTrue(e.getMessage().contains("published"), e.getMessage());
            s.close();
            pool.verifyAccounting();
        }
    }

    @Test
    void pinWritersPinsAllOrNone() {
        try (KvPool pool = TestPools.pool(200)) {
            final long[] h = new long[150]; // more than one hold of the lock (64 pages each)
            for (int i = 0; i < h.length; i++) {
                h[i] = pool.tryAllocate();
            }
            pool.retain(h[130]); // shared: cannot be pinned
            final IllegalSlotTransitionException e = assertThrows(IllegalSlotTransitionException.class,
                () -> pool.handles().pinWriters(h, 0, h.length));
            assertTrue(e.getMessage().contains("slot " + PageHandle.slot(h[130])), e.getMessage());
            for (long x : h) {
                assertEquals(SlotState.OWNED, pool.state(x), "the pages pinned before the refusal were unpinned");
            }
            assertEquals(0, pool.snapshot().receiving());
            assertEquals(0, pool.snapshot().draining());
            pool.release(h[130]);
            pool.handles().pinWriters(h, 10, h.length);
            assertEquals(140, pool.snapshot().receiving());
            assertEquals(SlotState.OWNED, pool.state(h[9]), "outside the range");
            assertThrows(IndexOutOfBoundsException.class, () -> pool.handles().pinWriters(h, 0, h.length + 1));
            for (int i = 10; i < h.length; i++) {
                pool.handles().commitReceive(h[i]);
            }
            for (long x : h) {
                pool.release(x);
            }
            assertEquals(200, pool.verifyAccounting().free());
        }
    }

    @Test
    void retainAllIsAllOrNoneAndMovesTheRetainEpochOnce() {
        try (KvPool pool = TestPools.pool(8)) {
            final long[] h = {pool.tryAllocate(), pool.tryAllocate(), pool.tryAllocate(), pool.tryAllocate()};
            final long stale = h[2];
            pool.release(stale); // freed: its handle is stale now
            final long epoch = pool.allocations().retainEpoch();
            assertThrows(StaleHandleException.class, () -> pool.retainAll(h, 0, 4));
            for (int i : new int[] {0, 1, 3}) {
                assertEquals(1, pool.refcountOfSlot(PageHandle.slot(h[i])), "page " + i + ": the call's references were dropped");
            }
            h[2] = pool.tryAllocate();
            pool.retainAll(h, 0, 4);
            for (long x : h) {
                assertEquals(2, pool.refcountOfSlot(PageHandle.slot(x)));
            }
            assertTrue(pool.allocations().retainEpoch() >= epoch + 4, "the epoch moved on past the retains");
            pool.releaseAll(h, 0, 4);
            pool.releaseAll(h, 0, 4);
            assertEquals(8, pool.verifyAccounting().free());
        }
    }

    @Test
    void releaseAllAndCommitReceiveAllGoPastARefusalThenThrowIt() {
        try (KvPool pool = TestPools.pool(8)) {
            final long[] h = {pool.tryAllocate(), pool.tryAllocate(), pool.tryAllocate()};
            pool.handles().pinWriters(h, 0, 3);
            pool.handles().commitReceive(h[1]); // no longer RECEIVING
            assertThrows(IllegalSlotTransitionException.class, () -> pool.handles().commitReceiveAll(h, 0, 3));
            assertEquals(SlotState.OWNED, pool.state(h[0]));
            assertEquals(SlotState.OWNED, pool.state(h[2]), "the page after the refusal was committed too");
            assertEquals(0, pool.snapshot().receiving(), "the batch's counts were added");
            pool.release(h[1]);
            assertThrows(StaleHandleException.class, () -> pool.releaseAll(h, 0, 3));
            assertNull(pool.state(h[0]), "released past the stale handle");
            assertNull(pool.state(h[2]));
            assertEquals(8, pool.verifyAccounting().free());
        }
    }

    @Test
    void releaseAllAllocatesNothing() {
        final com.sun.management.ThreadMXBean threads =
            (com.sun.management.ThreadMXBean) java.lang.management.ManagementFactory.getThreadMXBean();
        final int pages = 2 * HandleOps.RELEASE_RUN + 8; // more than one run of freed pages a call
        try (KvPool pool = TestPools.pool(pages)) {
            final long[] h = new long[pages];
            final int calls = 2_000, warmup = 500;
            long allocated = 0;
            threads.getCurrentThreadAllocatedBytes();
            for (int c = 0; c < calls; c++) {
                for (int i = 0; i < pages; i++) {
                    h[i] = pool.tryAllocate();
                }
                final long before = threads.getCurrentThreadAllocatedBytes();
                pool.releaseAll(h, 0, pages); // every page freed
                if (c >= warmup) {
                    allocated += threads.getCurrentThreadAllocatedBytes() - before;
                }
            }
            assertEquals(pages, pool.verifyAccounting().free());
            assertTrue(allocated < calls - warmup, allocated + " bytes allocated by " + (calls - warmup) + " releaseAll calls");
        }
    }

    /** Slot words that run a hook once, on the current thread, just before the CAS on one slot. */
    static final class CasHookWords extends ForwardingSlotWords {
        volatile int slot = -1;
        volatile Runnable hook;

        CasHookWords(int n) {
            super(n);
        }

        @Override
        public boolean compareAndSet(int i, long e, long u) {
            final Runnable r = hook;
            if (i == slot && r != null) {
                hook = null;
                r.run();
            }
            return d.compareAndSet(i, e, u);
        }
    }

    @Test
    void aCloseInTheMiddleOfCommitReceiveAllStillReleasesTheKeptStorage() throws Exception {
        final CasHookWords[] words = new CasHookWords[1];
        final KvPoolBuilder b = TestPools.builder(8);
        b.slotWords = n -> words[0] = new CasHookWords(n);
        final KvPool pool = b.build();
        final long[] h = {pool.tryAllocate(), pool.tryAllocate(), pool.tryAllocate()};
        pool.handles().pinWriters(h, 0, 3);
        // the first page is committed before the close, the other two after it, all in one batch
        words[0].slot = PageHandle.slot(h[1]);
        words[0].hook = () -> {
            final Thread closer = new Thread(pool::close);
            closer.start();
            try {
                closer.join();
            } catch (InterruptedException e) {
                throw new AssertionError(e);
            }
        };
        pool.handles().commitReceiveAll(h, 0, 3);
        assertTrue(pool.isClosed());
        assertThrows(IllegalStateException.class, () -> pool.storage().hostPage(0),
            "every pin ended after the close: the kept storage must be released");
    }

    @Test
    void retainAllOfAnEmptyRangeOnAClosedPoolThrowsAsAnyRangeDoes() {
        final KvPool pool = TestPools.pool(8);
        final long[] h = {pool.tryAllocate()};
        pool.close();
        final IllegalStateException e = assertThrows(IllegalStateException.class, () -> pool.retainAll(h, 0, 0));
        assertTrue(e.getMessage().contains("closed"), e.getMessage());
    }

    @Test
    void aCloseInTheMiddleOfRetainAllDropsWhatItRetained() {
        final CasHookWords[] words = new CasHookWords[1];
        final KvPoolBuilder b = TestPools.builder(8);
        b.slotWords = n -> words[0] = new CasHookWords(n);
        final KvPool pool = b.build();
        final long[] h = {pool.tryAllocate(), pool.tryAllocate(), pool.tryAllocate()};
        words[0].slot = PageHandle.slot(h[1]);
        words[0].hook = pool::close;
        final IllegalStateException e = assertThrows(IllegalStateException.class, () -> pool.retainAll(h, 0, 3));
        assertTrue(e.getMessage().contains("closed"), e.getMessage());
        for (long x : h) {
            assertEquals(1, pool.refcountOfSlot(PageHandle.slot(x)), "no reference of the call is left");
        }
    }

    /** {@return handles that forward only the one-page methods to {@code real}: every batch method is the interface's default} */
    private static io.kvpool.spi.TransportHandles onePageMethodsOf(io.kvpool.spi.TransportHandles real) {
        return new io.kvpool.spi.TransportHandles() {
            public void pinWriter(long x) { real.pinWriter(x); }
            public void commitReceive(long x) { real.commitReceive(x); }
            public void beginDrain(long x) { real.beginDrain(x); }
            public void drained(long x) { real.drained(x); }
            public void quarantine(long x) { real.quarantine(x); }
            public void releaseQuarantine(long x) { real.releaseQuarantine(x); }
            public void fillUnwrittenTail(long x, int fromToken) { real.fillUnwrittenTail(x, fromToken); }
        };
    }

    @Test
    void theDefaultPinWritersIsAllOrNoneToo() {
        try (KvPool pool = TestPools.pool(4)) {
            final io.kvpool.spi.TransportHandles real = pool.handles();
            final io.kvpool.spi.TransportHandles byDefault = onePageMethodsOf(real);
            final long[] h = {pool.tryAllocate(), pool.tryAllocate(), pool.tryAllocate()};
            pool.retain(h[2]);
            assertThrows(IllegalSlotTransitionException.class, () -> byDefault.pinWriters(h, 0, 3));
            assertEquals(0, pool.snapshot().receiving());
            pool.release(h[2]);
            byDefault.pinWriters(h, 0, 3);
            assertEquals(3, pool.snapshot().receiving());
        }
    }

    /**
     * appendPinned gives a fresh sequence its pages already RECEIVING: closing the sequence cannot free them while
     * a writer may still write (the pin holds them), and the commit ends the pin. The same through the interface's
     * default (append, then pinWriters): both leave the pool in the same states.
     */
    @Test
    void appendPinnedPinsEveryNewPageBeforeItsHandleLeaves() {
        for (boolean own : new boolean[] {true, false}) {
            try (KvPool pool = TestPools.pool(8)) {
                final io.kvpool.spi.TransportHandles real = pool.handles();
                final io.kvpool.spi.TransportHandles handles = own ? real : onePageMethodsOf(real);
                final int tokens = 5 * TestPools.SMALL.tokensPerPage() - 1;
                final Sequence seq = pool.admit(tokens, 0).sequence();
                handles.appendPinned(seq, tokens);
                assertEquals(5, seq.pageCount());
                assertEquals(tokens, seq.tokenCount());
                final long[] h = new long[5];
                for (int i = 0; i < 5; i++) {
                    h[i] = seq.pageHandle(i);
                    assertEquals(SlotState.RECEIVING, pool.state(h[i]), (own ? "pool's" : "default") + ": page " + i);
                }
                assertEquals(5, pool.snapshot().receiving());
                seq.close();
                for (long x : h) {
                    assertEquals(SlotState.RECEIVING, pool.state(x), "the pin holds a page its sequence released");
                }
                assertEquals(3, pool.verifyAccounting().free(), "five pages held by the pin alone");
                handles.commitReceiveAll(h, 0, 5);
                assertEquals(8, pool.verifyAccounting().free(), "the commit of unreferenced pages frees them");
                assertEquals(0, pool.snapshot().receiving());
            }
        }
    }

    @Test
    void appendPinnedRefusesASequenceWithPagesAnotherPoolsSequenceAndTooManyPages() {
        try (KvPool pool = TestPools.pool(4); KvPool other = TestPools.pool(4)) {
            final int perPage = TestPools.SMALL.tokensPerPage();
            final Sequence held = pool.admit(perPage, 0).sequence();
            held.append(1);
            final IllegalStateException e = assertThrows(IllegalStateException.class, () -> pool.handles().appendPinned(held, 1));
            assertTrue(e.getMessage().contains("holds 1"), e.getMessage());
            final Sequence foreign = other.admit(perPage, 0).sequence();
            assertThrows(IllegalArgumentException.class, () -> pool.handles().appendPinned(foreign, 1));
            assertEquals(4, other.verifyAccounting().free());
            held.close();
            foreign.close();
            final Sequence hog = pool.admit(2 * perPage, 0).sequence();
            hog.append(2 * perPage);
            final Sequence big = pool.admit(perPage, 0).sequence();
            assertThrows(PoolExhaustedException.class, () -> pool.handles().appendPinned(big, 3 * perPage), "3 pages, 2 free");
            assertEquals(0, big.pageCount(), "nothing appended");
            assertEquals(0, pool.snapshot().receiving(), "nothing pinned");
            big.close();
            hog.close();
            assertEquals(4, pool.verifyAccounting().free());
        }
    }

    /**
     * A page whose fill failed when it was freed is filled again when it is next allocated, after the pool lock.
     * If that fill fails too, appendPinned leaves nothing behind: every page it took back FREE (not RECEIVING with
     * no reference, held by a pin nobody will end), and the reservation back with the sequence.
     */
    @Test
    void appendPinnedWhoseFillFailsLeavesNoPagePinned() {
        final PoolFaultPathsTest.FailingCopyStorage[] storage = new PoolFaultPathsTest.FailingCopyStorage[1];
        try (KvPool pool = poolWithAPageDueAFill(3, storage)) {
            final int perPage = TestPools.SMALL.tokensPerPage();
            final Sequence seq = pool.admit(3 * perPage, 0).sequence();
            storage[0].failNextFill = true;
            assertThrows(IllegalStateException.class, () -> pool.handles().appendPinned(seq, 3 * perPage));
            assertEquals(0, seq.pageCount(), "nothing appended");
            assertEquals(0, pool.snapshot().receiving(), "nothing left pinned");
            assertEquals(3, pool.verifyAccounting().free(), "every page taken is FREE again");
            pool.handles().appendPinned(seq, 3 * perPage); // the reservation is the sequence's again
            assertEquals(3, pool.snapshot().receiving());
            final long[] pages = new long[3];
            for (int i = 0; i < 3; i++) {
                pages[i] = seq.pageHandle(i);
            }
            seq.close();
            pool.handles().commitReceiveAll(pages, 0, 3);
            assertEquals(3, pool.verifyAccounting().free());
        }
    }

    /**
     * A cancelled receive's pages (their sequence closed, only the pins hold them) are committed in one batch, and the
     * fill of the first one freed throws an Error: the other pages are still committed and freed, and the one whose
     * fill failed reaches the free pages too, to be filled before it is handed out again.
     */
    @Test
    void anErrorFillingOnePageOfABatchCommitStillFreesEveryPage() {
        final PoolFaultPathsTest.FailingCopyStorage[] storage = new PoolFaultPathsTest.FailingCopyStorage[1];
        try (KvPool pool = TestPools.builder(3).storage((l, n) -> storage[0] = new PoolFaultPathsTest.FailingCopyStorage(l, n)).build()) {
            final int perPage = TestPools.SMALL.tokensPerPage();
            final Sequence seq = pool.admit(3 * perPage, 0).sequence();
            pool.handles().appendPinned(seq, 3 * perPage);
            final long[] pages = {seq.pageHandle(0), seq.pageHandle(1), seq.pageHandle(2)};
            for (long h : pages) {
                pool.page(h).fill((byte) 0x5A); // the received KV
            }
            seq.close(); // the receive was cancelled: only the pins keep the pages
            storage[0].beforeNextFill = () -> {
                throw new OutOfMemoryError("injected: no memory for the fill");
            };
            assertThrows(OutOfMemoryError.class, () -> pool.handles().commitReceiveAll(pages, 0, 3));
            for (long h : pages) {
                assertEquals(SlotState.FREE, pool.stateOfSlot(PageHandle.slot(h)), "slot " + PageHandle.slot(h));
            }
            assertEquals(0, pool.snapshot().receiving());
            assertEquals(3, pool.verifyAccounting().free());
            assertTrue(pool.verifyAccounting().balanced());
            final Sequence next = pool.admit(3 * perPage, 0).sequence(); // every page again, the unfilled one filled first
            next.append(3 * perPage);
            for (int i = 0; i < 3; i++) {
                assertEquals(0, pool.firstCanaryToken(next.pageHandle(i), 0, perPage), "page " + i + " holds the last tenant's bytes");
            }
            next.close();
        }
    }

    /**
     * The pool closes between appendPinned's allocation and its fill, and the fill fails: close kept the storage for
     * the pinned pages, so the undo's end of their pins must release it, and the fill's failure is what the caller
     * hears.
     */
    @Test
    void appendPinnedWhoseFillFailsAsThePoolClosesReleasesTheKeptStorage() {
        final PoolFaultPathsTest.FailingCopyStorage[] storage = new PoolFaultPathsTest.FailingCopyStorage[1];
        try (KvPool pool = poolWithAPageDueAFill(3, storage)) {
            final int perPage = TestPools.SMALL.tokensPerPage();
            final Sequence seq = pool.admit(3 * perPage, 0).sequence();
            storage[0].beforeNextFill = pool::close; // the allocation's pages are RECEIVING: close keeps the storage
            storage[0].failNextFill = true;
            final IllegalStateException e = assertThrows(IllegalStateException.class, () -> pool.handles().appendPinned(seq, 3 * perPage));
            assertEquals("injected fill failure", e.getMessage(), "the fill's failure is reported: " + e);
            assertEquals(0, pool.snapshot().receiving(), "a pin outlived the failed append");
            assertFalse(pool.lifetime().retained(), "the storage close kept for the pinned pages was never released");
        }
    }

    /**
     * A slot in the free structures whose state word is not FREE (an allocator bug, a corrupt word) stops the
     * allocation that reaches it: the pages it took before are given back, free again and unpinned, not left
     * allocated to nobody.
     */
    @Test
    void anAllocationThatMeetsACorruptFreeSlotGivesBackThePagesItTook() {
        for (boolean pinned : new boolean[] {false, true}) {
            final int[] order = new int[4]; // the order in which a fresh pool of four hands out its slots
            try (KvPool probe = TestPools.pool(4)) {
                for (int i = 0; i < order.length; i++) {
                    order[i] = PageHandle.slot(probe.tryAllocate());
                }
            }
            final CorruptWords[] words = new CorruptWords[1];
            final KvPoolBuilder b = TestPools.builder(4);
            b.slotWords = n -> words[0] = new CorruptWords(n);
            try (KvPool pool = b.build()) {
                final int perPage = TestPools.SMALL.tokensPerPage();
                final Sequence seq = pool.admit(4 * perPage, 0).sequence();
                words[0].corrupt = order[2]; // the third slot handed out reads OWNED(1)
                final IllegalStateException e = assertThrows(IllegalStateException.class, () -> {
                    if (pinned) {
                        pool.handles().appendPinned(seq, 4 * perPage);
                    } else {
                        seq.append(4 * perPage);
                    }
                });
                assertTrue(e.getMessage().contains("free list held slot " + order[2]), e.getMessage());
                words[0].corrupt = -1;
                final String what = (pinned ? "appendPinned" : "append") + ": ";
                assertEquals(0, seq.pageCount(), what + "nothing appended");
                assertEquals(SlotState.FREE, pool.stateOfSlot(order[0]), what + "the first page taken");
                assertEquals(SlotState.FREE, pool.stateOfSlot(order[1]), what + "the second page taken");
                assertEquals(0, pool.snapshot().receiving(), what + "a pin left behind");
                assertEquals(3, pool.snapshot().free(), what + "the pages taken are back with the free ones (the corrupt slot is not)");
            }
        }
    }

    /**
     * A corrupt free slot that was due a fill (its fill at free failed) is not queued for one when the allocation
     * refuses it: the fill of a later allocation would otherwise write the canary over whatever the slot really holds.
     */
    @Test
    void aCorruptFreeSlotIsNeverQueuedForAFill() {
        final PoolFaultPathsTest.FailingCopyStorage[] storage = new PoolFaultPathsTest.FailingCopyStorage[1];
        final CorruptWords[] words = new CorruptWords[1];
        final KvPoolBuilder b = TestPools.builder(2).storage((l, n) -> storage[0] = new PoolFaultPathsTest.FailingCopyStorage(l, n));
        b.slotWords = n -> words[0] = new CorruptWords(n);
        try (KvPool pool = b.build()) {
            final long h0 = pool.tryAllocate(), h1 = pool.tryAllocate();
            final int s0 = PageHandle.slot(h0);
            storage[0].failNextFill = true;
            pool.release(h0); // FREE, due a fill before its next handle escapes
            words[0].corrupt = s0;
            final IllegalStateException e = assertThrows(IllegalStateException.class, pool::tryAllocate);
            assertTrue(e.getMessage().contains("free list held slot " + s0), e.getMessage());
            words[0].corrupt = -1;
            storage[0].fills.clear();
            pool.release(h1);
            final long next = pool.tryAllocate();
            assertEquals(PageHandle.slot(h1), PageHandle.slot(next));
            assertFalse(storage[0].fills.contains(s0), "slot " + s0 + ", refused as corrupt, was filled later: " + storage[0].fills);
            pool.release(next);
        }
    }

    /**
     * A pool of {@code pages} on a {@link PoolFaultPathsTest.FailingCopyStorage} (left in {@code storage[0]}), one
     * of whose pages failed its fill at free: it is filled again when next allocated, after the pool lock.
     */
    private static KvPool poolWithAPageDueAFill(int pages, PoolFaultPathsTest.FailingCopyStorage[] storage) {
        final KvPool pool = TestPools.builder(pages).storage((l, n) -> storage[0] = new PoolFaultPathsTest.FailingCopyStorage(l, n))
            .build();
        final long h = pool.tryAllocate();
        storage[0].failNextFill = true;
        pool.release(h);
        return pool;
    }

    /** State words whose slot {@link #corrupt} reads OWNED(1) at generation 1, whatever it holds. */
    private static final class CorruptWords extends ForwardingSlotWords {
        volatile int corrupt = -1;

        CorruptWords(int n) {
            super(n);
        }

        @Override
        public long getVolatile(int i) {
            return i == corrupt ? SlotStateMachine.word(1, SlotStateMachine.OWNED, 1) : d.getVolatile(i);
        }
    }

    @Test
    void appendPinnedOnAClosedPoolThrowsAndAppendsNothing() {
        final KvPool pool = TestPools.pool(4);
        final Sequence seq = pool.admit(TestPools.SMALL.tokensPerPage(), 0).sequence();
        pool.close();
        assertThrows(IllegalStateException.class, () -> pool.handles().appendPinned(seq, 1));
        assertEquals(0, seq.pageCount());
    }

    @Test
    void freedPagesAreFilledAsConfigured() {
        for (FillMode mode : FillMode.values()) {
            try (KvPool pool = TestPools.builder(1).fillMode(mode).build()) {
                final long h = pool.tryAllocate();
                final MemorySegment page = pool.page(h);
                page.fill((byte) 0x42);
                assertEquals(-1, pool.firstCanaryToken(h, 0, 4));
                pool.release(h);
                final long next = pool.tryAllocate();
                final MemorySegment again = pool.page(next);
                switch (mode) {
                    case CANARY -> {
                        assertEquals(0, pool.firstCanaryToken(next, 0, 4));
                        assertEquals(PageStorage.CANARY, again.get(ValueLayout.JAVA_LONG_UNALIGNED.withOrder(java.nio.ByteOrder.LITTLE_ENDIAN), 0));
                    }
                    case ZERO -> assertEquals(0, again.get(ValueLayout.JAVA_LONG_UNALIGNED, 0));
                    case NONE -> assertEquals((byte) 0x42, again.get(ValueLayout.JAVA_BYTE, 0));
                }
                pool.release(next);
            }
        }
    }

    @Test
    void aPartiallyWrittenTokenIsCaughtByTheCanaryCheck() {
        try (KvPool pool = TestPools.pool(1)) {
            final long h = pool.tryAllocate();
            final MemorySegment page = pool.page(h);
            final KvLayout l = pool.layout();
            for (int layer = 0; layer < l.layers(); layer++) {
                for (int kv = 0; kv < 2; kv++) {
                    for (int t = 0; t < 3; t++) {
                        if (!(t == 1 && layer == 1 && kv == 1)) { // token 1 misses layer 1's V
                            page.asSlice(l.offset(layer, kv, t), l.bytesPerTokenVector()).fill((byte) 7);
                        }
                    }
                }
            }
            assertEquals(-1, pool.firstCanaryToken(h, 0, 1));
            assertEquals(1, pool.firstCanaryToken(h, 0, 3));
            assertEquals(2, pool.firstCanaryToken(h, 2, 3) == -1 ? 2 : -2, "token 2 is fully written");
            assertEquals(3, pool.firstCanaryToken(h, 2, 4));
            pool.release(h);
        }
    }

    @Test
    void closeIsIdempotentReportsLeaksAndRefusesUse() {
        final KvPool pool = TestPools.pool(4);
        final Sequence s = pool.admit(5, 3).sequence();
        s.append(5);
        final long loose = pool.tryAllocate();
        pool.close();
        pool.close();
        final String report = pool.closeReport().orElseThrow();
        assertTrue(report.contains("3 of 4 in use") && report.contains("owned 3") && report.contains("1 open sequences"), report);
        assertThrows(IllegalStateException.class, () -> pool.admit(1, 1));
        assertThrows(IllegalStateException.class, () -> pool.release(loose));
        assertThrows(IllegalStateException.class, pool::tryAllocate);
        assertThrows(IllegalStateException.class, () -> s.append(1));
        assertThrows(IllegalStateException.class, () -> pool.storage().hostPage(0), "memory released");
        s.close(); // after the pool: quietly nothing
        assertTrue(s.isClosed());
    }

    @Test
    void closeWithPinnedPagesKeepsTheMemory() {
        final KvPool pool = TestPools.pool(2);
        final long h = pool.tryAllocate();
        pool.handles().pinWriter(h);
        pool.close();
        assertTrue(pool.closeReport().orElseThrow().contains("NOT released"));
        assertNotNull(pool.storage().hostPage(PageHandle.slot(h)), "a peer may still write: memory stays mapped");
        pool.storage().close();
    }

    @Test
    void aCleanCloseReportsNothing() {
        final KvPool pool = TestPools.pool(2);
        pool.admit(3, 1).sequence().close();
        pool.close();
        assertTrue(pool.closeReport().isEmpty());
    }
}
