package io.kvpool;

import org.junit.jupiter.api.Test;

import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.util.ArrayList;
import java.util.List;
import java.util.Set;
import java.util.SplittableRandom;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.ConcurrentLinkedQueue;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.atomic.AtomicReference;

import static org.junit.jupiter.api.Assertions.*;

/**
 * The handle events that {@link KvPool} calls lock-free and safe from any thread ({@code retain}, {@code release},
 * {@code validate}, {@code page}, and the transport's pin steps), run by several threads on the same pages at once.
 * Each thread allocates pages, writes a tag of its own into every word of each, and hands some to another thread with
 * an extra reference; the receiver retains once more, checks the tag, and releases both. Handles whose page a thread
 * freed are kept and probed: every event on them must be refused. A page handed to two holders shows a foreign tag; a
 * lost refcount update frees a page under its holder or leaks it; the accounting must balance at the end. Two controls
 * show that the test catches what the guards prevent: a non-atomic state-word CAS, and the generation check off.
 */
class ConcurrentHandleEventsTest {

    private static final ValueLayout.OfLong L = ValueLayout.JAVA_LONG_UNALIGNED;
    private static final int PAGES = 32;
    private static final int WORKERS = 3;
    private static final long MILLIS = Long.getLong("kvpool.stress.millis", 1500);
    /** Hand-overs waiting in one thread's inbox, at most: the pages they hold stay bounded. */
    private static final int MAX_INBOX = 6;

    private record Shared(long handle, long tag) {
    }

    /** What a run saw: each kind of failure once, with the first message of that kind. */
    static final class Outcome {
        final Set<String> kinds = ConcurrentHashMap.newKeySet();
        final AtomicReference<String> first = new AtomicReference<>();
        volatile boolean stop;
        long allocations;

        void fail(String kind, String what) {
            kinds.add(kind);
            first.compareAndSet(null, kind + ": " + what);
        }
    }

    private static void writeTag(KvPool pool, long handle, long tag) {
        final MemorySegment page = pool.page(handle);
        for (long o = 0; o + 8 <= page.byteSize(); o += 8) {
            page.set(L, o, tag);
        }
    }

    /** Checks that every word of the page holds {@code tag}. */
    private static void checkTag(KvPool pool, long handle, long tag, String holder, Outcome out) {
        final MemorySegment page = pool.page(handle);
        for (long o = 0; o + 8 <= page.byteSize(); o += 8) {
            final long got = page.get(L, o);
            if (got != tag) {
                out.fail("foreign bytes", holder + " holds " + PageHandle.toString(handle) + " tagged "
                    + Long.toHexString(tag) + " and read " + Long.toHexString(got) + " at byte " + o);
                return;
            }
        }
    }

    /** Every event on a handle whose tenancy this thread ended must be refused. */
    private static void probeStale(KvPool pool, long stale, Outcome out) {
        if (pool.validate(stale) >= 0) {
            out.fail("stale accepted", "validate accepted " + PageHandle.toString(stale));
        }
        try {
            pool.release(stale);
            out.fail("stale accepted", "release accepted " + PageHandle.toString(stale));
        } catch (StaleHandleException refused) {
            // refused
        }
        try {
            pool.retain(stale);
            out.fail("stale accepted", "retain accepted " + PageHandle.toString(stale));
            pool.release(stale); // put the reference back: the probe must not leak what it took
        } catch (StaleHandleException refused) {
            // refused
        }
    }

    /** One thread's state: its random source, the handles whose tenancy it ended, and its tags so far. */
    private static final class Worker {
        final int me;
        final SplittableRandom rnd;
        final long[] stale = new long[16];
        int staleCount;
        long serial;

        Worker(int me, long seed) {
            this.me = me;
            this.rnd = new SplittableRandom(seed);
        }

        void ended(long handle) {
            stale[staleCount++ & 15] = handle;
        }

        /** Takes what others handed over, allocates, tags, maybe hands over or pins, checks, releases, probes. */
        void step(KvPool pool, List<ConcurrentLinkedQueue<Shared>> inbox, Outcome out) {
            for (int k = 0; k < 2; k++) {
                final Shared s = inbox.get(me).poll();
                if (s == null) {
                    break;
                }
                checkTag(pool, s.handle, s.tag, "receiver " + me, out);
                pool.retain(s.handle);
                pool.release(s.handle);
                if (pool.release(s.handle)) {
                    ended(s.handle);
                }
            }
            final long h = pool.tryAllocate();
            if (h >= 0) {
                final long tag = ((long) me << 48) | (++serial & 0xFFFF_FFFF_FFFFL);
                writeTag(pool, h, tag);
                final int other = 1 + (me + rnd.nextInt(WORKERS - 1)) % WORKERS;
                if (rnd.nextBoolean() && inbox.get(other).size() < MAX_INBOX) {
                    pool.retain(h);
                    inbox.get(other).add(new Shared(h, tag));
                } else if (rnd.nextBoolean()) { // held alone: a transport's pin and commit, on this thread
                    pool.handles().pinWriter(h);
                    pool.handles().commitReceive(h);
                }
                Thread.yield(); // let the others reach the page meanwhile
                checkTag(pool, h, tag, "allocator " + me, out);
                if (pool.release(h)) {
                    ended(h);
                }
            }
            if (staleCount > 0) {
                probeStale(pool, stale[rnd.nextInt(Math.min(staleCount, 16))], out);
            }
        }
    }

    private static void worker(KvPool pool, Worker w, List<ConcurrentLinkedQueue<Shared>> inbox, Outcome out,
                               CountDownLatch start) {
        try {
            start.await();
            while (!out.stop) {
                try {
                    w.step(pool, inbox, out);
                } catch (StaleHandleException | IllegalSlotTransitionException refused) {
                    // a handle this thread holds was refused: its page was freed under it. The run goes on, so that a
                    // control shows what follows is caught too.
                    out.fail("own handle refused", "worker " + w.me + ": " + refused);
                }
            }
        } catch (Throwable t) {
            out.fail("exception", "worker " + w.me + ": " + t);
        }
    }

    /**
     * Runs the workers for {@code millis}, or until a failure of kind {@code until} (any kind if null), then gives back
     * every page still handed over.
     */
    static Outcome run(KvPool pool, long millis, long seed, String until) throws InterruptedException {
        final Outcome out = new Outcome();
        final List<ConcurrentLinkedQueue<Shared>> inbox = new ArrayList<>();
        for (int w = 0; w <= WORKERS; w++) {
            inbox.add(new ConcurrentLinkedQueue<>());
        }
        final CountDownLatch start = new CountDownLatch(1);
        final List<Thread> threads = new ArrayList<>();
        for (int w = 1; w <= WORKERS; w++) {
            final Worker worker = new Worker(w, seed * 31 + w);
            threads.add(Thread.ofPlatform().name("handles-" + w).start(() -> worker(pool, worker, inbox, out, start)));
        }
        start.countDown();
        final long end = System.nanoTime() + millis * 1_000_000;
        while (System.nanoTime() < end && (until == null ? out.kinds.isEmpty() : !out.kinds.contains(until))) {
            Thread.sleep(10);
        }
        out.stop = true;
        for (Thread t : threads) {
            t.join(30_000);
        }
        try {
            for (ConcurrentLinkedQueue<Shared> q : inbox) {
                for (Shared s; (s = q.poll()) != null; ) {
                    checkTag(pool, s.handle, s.tag, "the last receiver", out);
                    pool.release(s.handle);
                }
            }
            final PoolSnapshot s = pool.verifyAccounting();
            if (s.free() != PAGES || s.allocations() != s.pagesFreed()) {
                out.fail("accounting", "after every page was released: " + s);
            }
            out.allocations = s.allocations();
        } catch (RuntimeException e) {
            out.fail("accounting", e.toString());
        }
        return out;
    }

    @Test
    void handleEventsFromManyThreadsNeverShowAHolderAnotherHoldersBytes() throws InterruptedException {
        try (KvPool pool = TestPools.builder(PAGES).build()) {
            final Outcome out = run(pool, MILLIS, 1, null);
            assertNull(out.first.get());
            assertTrue(out.allocations > 1_000, "the workers allocated: " + out.allocations);
        }
    }

    /** Closes a pool whose corruption may make close itself fail. */
    private static void closeQuietly(KvPool pool) {
        try {
            pool.close();
        } catch (RuntimeException corrupted) {
            // the control broke the pool on purpose
        }
    }

    @Test
    void theTestCatchesANonAtomicStateWordCas() throws InterruptedException {
        Outcome out = null;
        for (long seed = 1; seed <= 5 && (out == null || out.first.get() == null); seed++) {
            final KvPoolBuilder b = TestPools.builder(PAGES);
            b.slotWords = ConcurrentStressTest.RacySlotWords::new;
            final KvPool pool = b.build();
            try {
                out = run(pool, MILLIS, seed, null);
            } finally {
                closeQuietly(pool);
            }
        }
        assertNotNull(out.first.get(), "lost refcount updates must be caught");
    }

    @Test
    void theTestCatchesAStaleHandleReachingTheNextTenant() throws InterruptedException {
        Outcome out = null;
        for (long seed = 1; seed <= 5 && (out == null || !out.kinds.contains("foreign bytes")); seed++) {
            final KvPool pool = TestPools.builder(PAGES).unsafeDisable(Safeguard.GENERATION_CHECK).build();
            try {
                out = run(pool, MILLIS, seed, "foreign bytes");
            } finally {
                closeQuietly(pool);
            }
        }
        assertTrue(out.kinds.contains("foreign bytes"), "a stale release frees the next tenant's page, which another thread "
            + "then allocates and tags: " + out.kinds + " " + out.first.get());
    }
}
