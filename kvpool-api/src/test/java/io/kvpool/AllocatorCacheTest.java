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
    void anotherThreadsAdmissionMayMissAtMostTheCacheAndAccountingStillBalances() throws Exception {
        try (KvPool pool = TestPools.builder(6).threadCache(2).build()) {
            final long x = pool.tryAllocate();
            final long y = pool.tryAllocate();
            pool.release(x);
            pool.release(y); // two pages in this (owner) thread's cache
            final AtomicReference<Object> seen = new AtomicReference<>();
            final Thread other = Thread.ofPlatform().start(() -> {
                seen.set(pool.admit(24, 0).decision()); // 6 pages: 2 of them are in the owner's cache
                final PoolSnapshot s = pool.verifyAccounting(); // counts the owner's cache as free
                assertEquals(6, s.free());
                seen.set(seen.get() + " " + pool.admit(16, 0).decision());
            });
            other.join();
            assertEquals("RETRY_LATER ADMITTED", seen.get());
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
            assertEquals(Admission.Decision.RETRY_LATER, admitOnAnotherThread(pool, 16), "the cached pages are the owner's");
            final long c = pool.tryAllocate(); // the owner's next allocation hands the cache back first
            // the 3 pages not held by the owner: all must be visible
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
