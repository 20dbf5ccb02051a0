package io.kvpool;

import io.kvpool.PoolLockSerializationTest.HeldLock;
import io.kvpool.PoolLockSerializationTest.HookWords;

import org.junit.jupiter.api.Test;

import java.util.concurrent.Callable;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;

import static org.junit.jupiter.api.Assertions.*;

/**
 * The allocator cache inside a pool (see {@link KvPoolBuilder#threadCache}): the first allocating thread owns it,
 * serves itself from it without the pool lock, and hands it back when asked; other threads take an idle owner's pages
 * exactly when they come up short, and never when the free pages suffice.
 */
class AllocatorCacheReclaimTest {

    private static final int TPP = TestPools.SMALL.tokensPerPage();

    /** A thread that stays alive and idle between the steps it is given. */
    private static final class Owner implements AutoCloseable {
        final ExecutorService thread = Executors.newSingleThreadExecutor(Thread.ofPlatform().name("allocator").factory());

        <T> T run(Callable<T> step) throws Exception {
            return thread.submit(step).get(30, TimeUnit.SECONDS);
        }

        /** Becomes the pool's cache owner and leaves {@code cached} freed pages in its cache. */
        void cache(KvPool pool, int cached) throws Exception {
            run(() -> {
                final long[] h = new long[cached];
                for (int i = 0; i < cached; i++) {
                    h[i] = pool.tryAllocate();
                }
                for (long x : h) {
                    pool.release(x);
                }
                return null;
            });
            assertEquals(cached, pool.allocator().cache().sizeQuiescent());
        }

        @Override
        public void close() throws InterruptedException {
            thread.shutdown();
            assertTrue(thread.awaitTermination(30, TimeUnit.SECONDS));
        }
    }

    private static int cached(KvPool pool) {
        return pool.allocator().cache().sizeQuiescent();
    }

    @Test
    void theFirstThreadToAllocateOwnsTheCacheWhicheverWayItAllocates() throws Exception {
        try (KvPool pool = TestPools.builder(4).threadCache(2).build(); Owner owner = new Owner()) {
            final long h = owner.run(pool::tryAllocate);
            assertTrue(owner.run(() -> pool.allocator().cache().isOwner()));
            assertFalse(pool.allocator().cache().isOwner());
            owner.run(() -> pool.release(h));
            assertEquals(1, cached(pool), "the owner's freed page waits in its cache");
        }
        try (KvPool pool = TestPools.builder(4).threadCache(2).build(); Owner owner = new Owner()) {
            final Sequence s = owner.run(() -> {
                final Sequence seq = pool.admit(2 * TPP, 0).sequence();
                seq.append(2 * TPP);
                return seq;
            });
            assertTrue(owner.run(() -> pool.allocator().cache().isOwner()), "an append binds the cache too");
            owner.run(() -> {
                s.close();
                return null;
            });
        }
        try (KvPool pool = TestPools.builder(4).build(); Owner owner = new Owner()) {
            owner.run(() -> pool.release(pool.tryAllocate()));
            assertFalse(owner.run(() -> pool.allocator().cache().isOwner()), "no cache, no owner");
        }
    }

    @Test
    void theOwnerServesItselfFromItsCacheWithoutThePoolLock() throws Exception {
        final HookWords[] words = new HookWords[1];
        final KvPoolBuilder b = TestPools.builder(4).threadCache(2);
        b.slotWords = n -> words[0] = new HookWords(n);
        try (KvPool pool = b.build(); Owner owner = new Owner()) {
            final long[] h = owner.run(() -> new long[] {pool.tryAllocate(), pool.tryAllocate()});
            owner.run(() -> pool.release(h[1])); // slot 1 into the cache; slot 0 stays in use
            final long[] held = new long[1];
            final Future<Long> fast;
            try (HeldLock lock = new HeldLock(words[0], () -> held[0] = pool.tryAllocate())) {
                fast = owner.thread.submit(pool::tryAllocate);
                try {
                    final long again = fast.get(10, TimeUnit.SECONDS);
                    assertEquals(PageHandle.slot(h[1]), PageHandle.slot(again), "the cached page, most recent first");
                    assertEquals(PageHandle.generation(h[1]) + 1, PageHandle.generation(again));
                } catch (TimeoutException e) {
                    fail("the owner's allocation from its own cache waited for the pool lock");
                }
            }
            owner.run(() -> {
                pool.release(fast.get());
                return pool.release(h[0]);
            });
            pool.release(held[0]);
            assertEquals(4, pool.verifyAccounting().free());
        }
    }

    @Test
    void anOwnerFreeingAPageWhileItsCacheIsAskedForHandsTheCacheBack() throws Exception {
        try (KvPool pool = TestPools.builder(4).threadCache(4).build(); Owner owner = new Owner()) {
            final long[] h = owner.run(() -> new long[] {pool.tryAllocate(), pool.tryAllocate(), pool.tryAllocate()});
            owner.run(() -> pool.release(h[0]) && pool.release(h[1]));
            assertEquals(2, cached(pool));
            pool.allocator().cache().requestFlush(); // another thread asks for the pages
            owner.run(() -> pool.release(h[2]));
            assertEquals(0, cached(pool), "the owner's next free handed its cache back");
            assertFalse(pool.allocator().cache().flushRequested());
            assertEquals(4, pool.verifyAccounting().free());
        }
    }

    @Test
    void anOwnerAskedForItsCacheWhileThePoolLockIsHeldKeepsItUntilItCanTakeTheLock() throws Exception {
        final HookWords[] words = new HookWords[1];
        final KvPoolBuilder b = TestPools.builder(4).threadCache(4);
        b.slotWords = n -> words[0] = new HookWords(n);
        try (KvPool pool = b.build(); Owner owner = new Owner()) {
            final long[] h = owner.run(() -> new long[] {pool.tryAllocate(), pool.tryAllocate(), pool.tryAllocate()});
            owner.run(() -> pool.release(h[0]) && pool.release(h[1]));
            assertEquals(2, cached(pool));
            final long[] held = new long[1];
            try (HeldLock lock = new HeldLock(words[0], () -> held[0] = pool.tryAllocate())) { // takes the last free page
                pool.allocator().cache().requestFlush();
                owner.run(() -> pool.release(h[2])); // never waits for the lock, and never moves the cache without it
                assertEquals(2, cached(pool), "the owner moved its cache while another thread held the pool lock");
                assertTrue(pool.allocator().cache().flushRequested());
            }
            owner.run(() -> pool.release(held[0])); // the lock is free now: this free hands the cache back
            assertEquals(0, cached(pool));
            assertEquals(4, pool.verifyAccounting().free());
        }
    }

    @Test
    void flushAllocatorCacheHandsTheOwnersPagesToTheFreePages() throws Exception {
        try (KvPool pool = TestPools.builder(4).threadCache(4).build(); Owner owner = new Owner()) {
            owner.cache(pool, 2);
            owner.run(() -> {
                pool.flushAllocatorCache();
                return null;
            });
            assertEquals(0, cached(pool));
            pool.flushAllocatorCache(); // another thread: nothing to do
            assertEquals(4, pool.verifyAccounting().free());
        }
    }

    @Test
    void theOwnerOfAClosedPoolGetsNoPageFromItsCache() throws Exception {
        try (KvPool pool = TestPools.builder(4).threadCache(4).build(); Owner owner = new Owner()) {
            owner.cache(pool, 2);
            pool.close(); // on another thread: the owner's cache keeps its pages
            final Exception e = assertThrows(Exception.class, () -> owner.run(pool::tryAllocate));
            assertInstanceOf(IllegalStateException.class, e.getCause());
        }
    }

    // ---- taking an idle owner's cache: exactly when short ----

    @Test
    void admissionTakesAnIdleOwnersCacheOnlyWhenTheFreePagesFallShort() throws Exception {
        try (KvPool pool = TestPools.builder(8).threadCache(4).build(); Owner owner = new Owner()) {
            owner.cache(pool, 2);                                          // 6 pages in the free structures
            final Sequence one = pool.admit(TPP, 0).sequence();            // 1 reserved: 5 unreserved
            final Sequence five = pool.admit(5 * TPP, 0).sequence();       // exactly the 5
            assertEquals(2, cached(pool), "enough free pages: the owner's cache is left alone");
            final Admission more = pool.admit(TPP, 0);                     // short: takes the owner's 2
            assertTrue(more.admitted(), more.toString());
            assertEquals(0, cached(pool));
            more.sequence().close();
            five.close();
            one.close();
        }
    }

    @Test
    void tryAllocateTakesAnIdleOwnersCacheOnlyWhenNoUnreservedPageIsLeft() throws Exception {
        try (KvPool pool = TestPools.builder(4).threadCache(4).build(); Owner owner = new Owner()) {
            owner.cache(pool, 1);                                          // 3 free
            final Sequence s = pool.admit(2 * TPP, 0).sequence();          // 1 unreserved
            final long a = pool.tryAllocate();
            assertTrue(a >= 0);
            assertEquals(1, cached(pool), "one unreserved page was free: the cache is left alone");
            final long b = pool.tryAllocate();                             // none left: takes the cached page
            assertTrue(b >= 0, "the idle owner's cached page was there to take");
            assertEquals(0, cached(pool));
            assertEquals(PageHandle.EXHAUSTED, pool.tryAllocate());
            pool.release(a);
            pool.release(b);
            s.close();
        }
    }

    @Test
    void anAppendTakesAnIdleOwnersCacheOnlyWhenItsUnreservedPagesFallShort() throws Exception {
        try (KvPool pool = TestPools.builder(8).threadCache(4).reservationPolicy(ReservationPolicy.PROMPT_ONLY).build();
             Owner owner = new Owner()) {
            owner.cache(pool, 2);                                          // 6 free
            final Sequence s = pool.admit(TPP, 6 * TPP).sequence();        // prompt only: 1 reserved
            s.append(TPP);                                                 // 5 free, 0 reserved
            final Sequence filler = pool.admit(3 * TPP, 0).sequence();     // 3 reserved: 2 unreserved
            s.append(2 * TPP);                                             // exactly the 2
            assertEquals(2, cached(pool), "enough unreserved pages: the owner's cache is left alone");
            s.append(2 * TPP);                                             // 0 unreserved: exactly the owner's 2
            assertEquals(0, cached(pool));
            assertEquals(5, s.pageCount());
            filler.close();
            s.close();
        }
    }

    @Test
    void aTruncateTopUpTakesAnIdleOwnersCacheOnlyWhenItsUnreservedPagesFallShort() throws Exception {
        try (KvPool pool = TestPools.builder(8).threadCache(4).build(); Owner owner = new Owner()) {
            owner.cache(pool, 2);                                          // 6 free
            final Sequence s = pool.admit(2 * TPP, 0).sequence();
            s.append(2 * TPP);                                             // 4 free, 0 reserved
            final Sequence filler = pool.admit(3 * TPP, 0).sequence();     // 3 reserved: 1 unreserved
            final long last = s.pageHandle(1);
            final long first = s.pageHandle(0);
            pool.retain(last);
            pool.retain(first);                                            // truncated pages stay in use: none comes back free
            s.truncate(TPP);                                               // re-reserves 1: exactly the 1 unreserved
            assertEquals(1, s.reservedPages());
            assertEquals(2, cached(pool), "enough unreserved pages: the owner's cache is left alone");
            s.truncate(0);                                                 // re-reserves 1 more: 0 unreserved, the owner's pages
            assertEquals(2, s.reservedPages(), "the top-up took an idle owner's cached page");
            assertEquals(0, cached(pool));
            pool.release(last);
            pool.release(first);
            filler.close();
            s.close();
            assertEquals(0, pool.verifyAccounting().reserved());
        }
    }

    @Test
    void aForkLeavesAnIdleOwnersCacheAloneWhenTheUnreservedPagesExactlySuffice() throws Exception {
        try (KvPool pool = TestPools.builder(8).threadCache(4).build(); Owner owner = new Owner()) {
            owner.cache(pool, 2);                                          // 6 free
            final Sequence parent = pool.admit(TPP + 1, TPP - 1).sequence();
            parent.append(TPP + 1);                                        // 2 pages, the last partial: 4 free
            final Sequence filler = pool.admit(2 * TPP, 0).sequence();     // 2 unreserved
            final Sequence child = parent.tryFork();                       // 1 copy-on-write credit each: exactly 2
            assertNotNull(child);
            assertEquals(2, cached(pool), "enough unreserved pages: the owner's cache is left alone");
            child.close();
            filler.close();
            parent.close();
        }
    }

    @Test
    void aForkTakesAnIdleOwnersCacheWhenItNeedsExactlyThosePages() throws Exception {
        try (KvPool pool = TestPools.builder(8).threadCache(4).build(); Owner owner = new Owner()) {
            owner.cache(pool, 2);                                          // 6 free
            final Sequence parent = pool.admit(TPP + 1, TPP - 1).sequence();
            parent.append(TPP + 1);                                        // 2 pages, the last partial: 4 free
            final Sequence filler = pool.admit(4 * TPP, 0).sequence();     // 0 unreserved
            final Sequence child = parent.tryFork();                       // 1 copy-on-write credit each: exactly 2
            assertNotNull(child, "the idle owner's 2 cached pages were there to take");
            assertEquals(0, cached(pool));
            child.close();
            filler.close();
            parent.close();
        }
    }
}
