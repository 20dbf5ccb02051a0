package io.kvpool;

import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;

import java.util.ArrayList;
import java.util.List;
import java.util.SplittableRandom;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.atomic.AtomicIntegerArray;
import java.util.concurrent.atomic.AtomicReference;

import static org.junit.jupiter.api.Assertions.*;

/**
 * Several threads admit, reserve, allocate, grow, truncate, fork and close against one small pool at once, while
 * another takes snapshots. Each page a thread holds alone is marked with that thread; a page handed to two holders
 * at once, an admitted request that runs out of pages within its admission, or accounting that does not balance at
 * the end fails the test. The admission and allocation paths are serialized by the pool lock: without it, two
 * threads pop the same free page or lose each other's reservation updates.
 */
class ConcurrentAdmissionTest {

    private static final int TPP = TestPools.SMALL.tokensPerPage();
    private static final int PAGES = 16;
    private static final int WORKERS = 3;
    private static final int ITERATIONS = Integer.getInteger("kvpool.concurrent.iterations", 6_000);

    private static final class Run {
        final KvPool pool;
        final AtomicIntegerArray holder;
        final AtomicReference<String> failure = new AtomicReference<>();
        volatile boolean stop;

        Run(KvPool pool) {
            this.pool = pool;
            this.holder = new AtomicIntegerArray(pool.capacity());
        }

        void fail(String what) {
            failure.compareAndSet(null, what);
            stop = true;
        }

        void claim(int slot, int me) {
            if (!holder.compareAndSet(slot, 0, me)) {
                fail("slot " + slot + " handed to worker " + me + " while worker " + holder.get(slot) + " holds it");
            }
        }

        void unclaim(int slot, int me) {
            if (!holder.compareAndSet(slot, me, 0)) {
                fail("slot " + slot + " held by worker " + me + " was marked " + holder.get(slot));
            }
        }

        void claimPages(Sequence s, int from, int me) {
            for (int i = from; i < s.pageCount(); i++) {
                claim(s.pageIndex(i), me);
            }
        }

        void unclaimPages(Sequence s, int from, int me) {
            for (int i = from; i < s.pageCount(); i++) {
                unclaim(s.pageIndex(i), me);
            }
        }

        /** Grows an admitted sequence within its admission: it must never run out of pages. */
        void grow(Sequence s, int n, int me) {
            final int before = s.pageCount();
            try {
                s.append(n);
            } catch (PoolExhaustedException e) {
                fail("an admitted request ran out of pages within its admission: " + e.getMessage() + " " + s);
                return;
            }
            claimPages(s, before, me);
        }

        /** Works a sequence this worker holds alone (no prefix sharing, no fork): grow, maybe truncate and regrow, close. */
        void work(Sequence s, int prompt, int maxNew, SplittableRandom rnd, int me) {
            grow(s, prompt, me);
            if (maxNew > 0 && rnd.nextBoolean()) {
                grow(s, 1 + rnd.nextInt(maxNew), me);
            }
            if (rnd.nextInt(3) == 0) {
                final int keep = rnd.nextInt(s.tokenCount() + 1);
                final int keepPages = (int) s.pool().layout().pagesFor(keep);
                unclaimPages(s, keepPages, me);
                s.truncate(keep);
                grow(s, (int) Math.min(s.admittedTokens() - keep, 1 + rnd.nextInt(2 * TPP)), me);
            }
            unclaimPages(s, 0, me);
            s.close();
        }

        void worker(int me, long seed, CountDownLatch start) {
            final SplittableRandom rnd = new SplittableRandom(seed);
            try {
                start.await();
                for (int it = 0; it < ITERATIONS && !stop; it++) {
                    final int prompt = 1 + rnd.nextInt(3 * TPP);
                    final int maxNew = rnd.nextInt(2 * TPP);
                    switch (rnd.nextInt(8)) {
                        case 0, 1, 2 -> {
                            final Admission a = pool.admit(prompt, maxNew);
                            if (a.admitted()) {
                                work(a.sequence(), prompt, maxNew, rnd, me);
                            }
                        }
                        case 3 -> {
                            final long id = pool.tryReserve(prompt, maxNew);
                            if (id > 0) {
                                if (rnd.nextBoolean()) {
                                    work(pool.openSequence(id), prompt, maxNew, rnd, me);
                                } else {
                                    pool.cancelReservation(id);
                                }
                            }
                        }
                        case 4, 5 -> {
                            final long[] held = new long[1 + rnd.nextInt(3)];
                            int n = 0;
                            for (long h; n < held.length && (h = pool.tryAllocate()) >= 0; n++) {
                                held[n] = h;
                                claim(PageHandle.slot(h), me);
                            }
                            for (int i = 0; i < n; i++) {
                                unclaim(PageHandle.slot(held[i]), me);
                                pool.release(held[i]);
                            }
                        }
                        default -> {
                            // a fork: both share the parent's pages (not marked); each grows within its admission
                            final Admission a = pool.admit(prompt, maxNew);
                            if (a.admitted()) {
                                final Sequence parent = a.sequence();
                                try {
                                    parent.append(prompt);
                                    final Sequence child = parent.tryFork();
                                    if (child != null) {
                                        if (maxNew > 0) {
                                            child.append(1 + rnd.nextInt(maxNew));
                                            parent.append(1 + rnd.nextInt(maxNew));
                                        }
                                        child.close();
                                    }
                                } catch (PoolExhaustedException e) {
                                    fail("a fork or its parent ran out of pages within their admission: " + e.getMessage());
                                }
                                parent.close();
                            }
                        }
                    }
                }
            } catch (Throwable t) {
                fail("worker " + me + ": " + t);
            }
        }
    }

    @ParameterizedTest
    @ValueSource(ints = {0, 4})
    void threadsAdmittingAndAllocatingAtOnceNeverShareAPageAndBalance(int threadCache) throws InterruptedException {
        try (KvPool pool = TestPools.builder(PAGES).threadCache(threadCache).build()) {
            final Run run = new Run(pool);
            final CountDownLatch start = new CountDownLatch(1);
            final List<Thread> threads = new ArrayList<>();
            for (int w = 1; w <= WORKERS; w++) {
                final int me = w;
                threads.add(Thread.ofPlatform().name("worker-" + w).start(() -> run.worker(me, 1000L * threadCache + me, start)));
            }
            final Thread observer = Thread.ofPlatform().name("observer").start(() -> {
                try {
                    start.await();
                    while (!run.stop) {
                        final PoolSnapshot s = pool.snapshot();
                        if (s.reserved() < 0 || s.reserved() > PAGES) {
                            run.fail("a snapshot under the pool lock saw a reservation out of range: " + s);
                        }
                        Thread.yield();
                    }
                } catch (Throwable t) {
                    run.fail("observer: " + t);
                }
            });
            start.countDown();
            for (Thread t : threads) {
                t.join();
            }
            run.stop = true;
            observer.join();
            assertNull(run.failure.get());
            pool.flushAllocatorCache();
            final PoolSnapshot s = pool.verifyAccounting();
            assertEquals(PAGES, s.free(), s.toString());
            assertEquals(0, s.reserved(), s.toString());
            assertEquals(0, s.openSequences(), s.toString());
            assertEquals(0, s.openReservations(), s.toString());
            assertTrue(s.allocations() > ITERATIONS, "the workers allocated: " + s);
        }
    }
}
