package io.kvpool;

import org.junit.jupiter.api.Test;

import java.util.concurrent.atomic.AtomicReference;

import static org.junit.jupiter.api.Assertions.*;

/** The allocator thread's page cache: lock-free reuse by its owner, never lost to anyone else. */
class AllocatorCacheTest {

    @Test
    void theOwnerReusesItsFreedPagesLifoWithANewGeneration() {
        try (KvPool pool = TestPools.builder(8).threadCache(4).build()) {
            final long a = pool.tryAllocate();
            final long b = pool.tryAllocate();
            pool.release(a);
            pool.release(b);
            final long c = pool.tryAllocate();
            assertEquals(PageHandle.slot(b), PageHandle.slot(c), "last freed, first reused");
            assertEquals(PageHandle.generation(b) + 1, PageHandle.generation(c));
            assertThrows(StaleHandleException.class, () -> pool.release(b));
            assertEquals(0, pool.firstCanaryToken(c, 0, 4), "filled before it was cached");
            pool.release(c);
            final PoolSnapshot s = pool.verifyAccounting();
            assertEquals(8, s.free());
            assertEquals(3, s.allocations());
            assertEquals(3, s.pagesFreed());
        }
    }

    @Test
    void theOwnersAdmissionSeesEveryCachedPage() {
        try (KvPool pool = TestPools.builder(6).threadCache(6).build()) {
            final long[] h = new long[6];
            for (int i = 0; i < 6; i++) {
                h[i] = pool.tryAllocate();
            }
            for (long x : h) {
                pool.release(x); // all six now sit in the owner's cache
            }
            final Admission a = pool.admit(24, 0); // needs all 6 pages
            assertTrue(a.admitted(), a::toString);
            a.sequence().append(24);
            a.sequence().close();
            pool.verifyAccounting();
        }
    }

    @Test
    void anotherThreadTakesAnIdleOwnersCacheAndAccountingStillBalances() throws Exception {
        try (KvPool pool = TestPools.builder(6).threadCache(2).build()) {
            final long x = pool.tryAllocate();
            final long y = pool.tryAllocate();
            pool.release(x);
            pool.release(y); // two pages in this (owner) thread's cache
            final AtomicReference<Object> seen = new AtomicReference<>();
            final Thread other = Thread.ofPlatform().start(() -> {
                final Admission first = pool.admit(24, 0); // 6 pages: 2 of them in the idle owner's cache, taken back
                seen.set(first.decision());
                final PoolSnapshot s = pool.verifyAccounting();
                assertEquals(6, s.free());
                assertEquals(6, s.reserved());
                final Admission second = pool.admit(4, 0);
                seen.set(seen.get() + " " + second.decision() + " " + second.pagesAvailable());
                first.sequence().close();
            });
            other.join();
            assertEquals("ADMITTED RETRY_LATER 0", seen.get(), "the second is refused with the true number: 0 unreserved");
            pool.snapshot(); // the owner flushes
        }
    }

    @Test
    void aThreadThatComesUpShortGetsTheIdleOwnersCacheBack() throws Exception {
        try (KvPool pool = TestPools.builder(4).threadCache(4).build()) {
            final long a = pool.tryAllocate();
            final long b = pool.tryAllocate();
            pool.release(a);
            pool.release(b); // two pages in this (owner) thread's cache
            // the owner is alive but idle: another thread that comes up short takes its cached pages back
            assertEquals(Admission.Decision.ADMITTED, admitOnAnotherThread(pool, 16), "all 4 pages, 2 of them from the cache");
            final long c = pool.tryAllocate(); // the owner's cache is empty now: it allocates through the lock
            assertEquals(Admission.Decision.ADMITTED, admitOnAnotherThread(pool, 12));
            pool.release(c);
            pool.verifyAccounting();
        }
    }

    @Test
    void theOwnerCanHandItsCacheBackExplicitly() throws Exception {
        try (KvPool pool = TestPools.builder(4).threadCache(4).build()) {
            final long a = pool.tryAllocate();
            pool.release(a);
            pool.flushAllocatorCache();
            assertEquals(Admission.Decision.ADMITTED, admitOnAnotherThread(pool, 16));
        }
    }

    @Test
    void theCacheOfADeadOwnerIsAdopted() throws Exception {
        try (KvPool pool = TestPools.builder(4).threadCache(4).build()) {
            final Thread owner = Thread.ofPlatform().start(() -> {
                final long a = pool.tryAllocate();
                final long b = pool.tryAllocate();
                pool.release(a);
                pool.release(b);
            });
            owner.join();
            final Admission all = pool.admit(16, 0); // needs every page, two of them in the dead owner's cache
            assertTrue(all.admitted(), all::toString);
            all.sequence().append(16);
            all.sequence().close();
            final long h = pool.tryAllocate(); // this thread is the owner now
            pool.release(h);
            assertEquals(4, pool.verifyAccounting().free());
        }
    }

    @Test
    void withoutTheCacheEveryPageGoesThroughTheFreeStructures() {
        try (KvPool pool = TestPools.builder(4).threadCache(0).build()) {
            final long a = pool.tryAllocate();
            pool.release(a);
            assertEquals(4, pool.verifyAccounting().free());
        }
        assertThrows(IllegalArgumentException.class, () -> TestPools.builder(4).threadCache(-1));
    }

    /**
     * Stress for the handshake that lets another thread take an idle owner's pages (AllocatorCache's Dekker
     * flags): the owner allocates and frees through its cache without pause while another thread, short of
     * pages, keeps taking them back. A page handed to both threads at once is caught by the per-slot holder
     * mark; at the end the accounting must balance.
     */
    @Test
    void takingAnOwnersCacheNeverHandsOnePageToTwoThreads() throws Exception {
        final int pages = 8;
        try (KvPool pool = TestPools.builder(pages).threadCache(pages).build()) {
            final java.util.concurrent.atomic.AtomicIntegerArray holder = new java.util.concurrent.atomic.AtomicIntegerArray(pages);
            final java.util.concurrent.atomic.AtomicReference<String> failure = new java.util.concurrent.atomic.AtomicReference<>();
            final java.util.concurrent.atomic.AtomicBoolean stop = new java.util.concurrent.atomic.AtomicBoolean();
            final java.util.concurrent.atomic.AtomicLong taken = new java.util.concurrent.atomic.AtomicLong();
            final java.util.concurrent.CountDownLatch ownerAllocated = new java.util.concurrent.CountDownLatch(1);
            final Runnable[] roles = new Runnable[2];
            for (int r = 0; r < 2; r++) {
                final int me = r + 1;
                roles[r] = () -> {
                    final long[] held = new long[pages];
                    while (!stop.get() && failure.get() == null) {
                        int n = 0;
                        for (long h; n < (me == 1 ? 3 : pages) && (h = pool.tryAllocate()) >= 0; n++) {
                            held[n] = h;
                            if (!holder.compareAndSet(PageHandle.slot(h), 0, me)) {
                                failure.set("slot " + PageHandle.slot(h) + " handed to thread " + me + " while thread "
                                    + holder.get(PageHandle.slot(h)) + " holds it");
                            }
                        }
                        if (me == 1 && n > 0) {
                            ownerAllocated.countDown(); // its cache is the one the other thread takes from
                        }
                        if (me == 2) {
                            taken.addAndGet(n);
                        }
                        for (int i = 0; i < n; i++) {
                            holder.set(PageHandle.slot(held[i]), 0);
                            pool.release(held[i]);
                        }
                    }
                };
            }
            final Thread owner = Thread.ofPlatform().start(roles[0]); // the first to allocate: the cache's owner
            assertTrue(ownerAllocated.await(10, java.util.concurrent.TimeUnit.SECONDS), "the owner allocated");
            final Thread other = Thread.ofPlatform().start(roles[1]);
            Thread.sleep(Long.getLong("kvpool.stress.millis", 1500));
            stop.set(true);
            owner.join();
            other.join();
            assertEquals(null, failure.get());
            assertTrue(taken.get() > 0, "the other thread got pages");
            pool.verifyAccounting();
        }
    }

    /** Admits {@code tokens} prompt tokens on a fresh thread (closing the sequence if admitted). */
    private static Admission.Decision admitOnAnotherThread(KvPool pool, int tokens) throws InterruptedException {
        final Admission.Decision[] decision = new Admission.Decision[1];
        Thread.ofPlatform().start(() -> {
            final Admission a = pool.admit(tokens, 0);
            decision[0] = a.decision();
            if (a.admitted()) {
                a.sequence().close();
            }
        }).join();
        return decision[0];
    }
}
