package io.kvpool;


import org.junit.jupiter.api.Test;

import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicReference;
import java.util.stream.IntStream;

import static org.junit.jupiter.api.Assertions.*;

/**
 * The threading contract of {@link KvPool}: admission, allocation, publication, pinning, snapshots, the
 * accounting check and close are serialized by the pool lock, while retain, release, validate, page access
 * and metrics never wait for it. A thread is paused inside a critical section (on its first read of a state
 * word, through a {@link SlotWords} hook), and each operation is started on its own thread: the serialized ones
 * must still be waiting when the pause ends, the lock-free ones must have finished.
 */
class PoolLockSerializationTest {

    private static final int TPP = TestPools.SMALL.tokensPerPage();
    /** How long a serialized operation must keep waiting for the held lock. */

    /** State words that run a one-shot callback on a chosen thread's next read. */
    static final class HookWords extends ForwardingSlotWords {
        private final Map<Thread, Runnable> hooks = new ConcurrentHashMap<>();

        HookWords(int n) {
            super(n);
        }

        void onNextRead(Thread t, Runnable r) {
            hooks.put(t, r);
        }

        @Override
        public long getVolatile(int i) {
            final Runnable r = hooks.isEmpty() ? null : hooks.remove(Thread.currentThread());
            if (r != null) {
                r.run();
            }
            return d.getVolatile(i);
        }
    }

    private static void await(CountDownLatch latch) {
        try {
            assertTrue(latch.await(30, TimeUnit.SECONDS), "timed out");
        } catch (InterruptedException e) {
            throw new AssertionError(e);
        }
    }

    /**
     * A thread paused inside the pool lock: it runs {@code locked} (an operation that reads a state word under the
     * lock before any read outside it) and stops at that read until {@link #close()}.
     */
    static final class HeldLock implements AutoCloseable {
        private final CountDownLatch held = new CountDownLatch(1);
        private final CountDownLatch release = new CountDownLatch(1);
        private final Thread thread;
        private volatile Throwable failure;

        HeldLock(HookWords words, Runnable locked) {
            thread = Thread.ofPlatform().name("lock-holder").unstarted(() -> {
                try {
                    locked.run();
                } catch (Throwable t) {
                    failure = t;
                }
            });
            words.onNextRead(thread, () -> {
                held.countDown();
                PoolLockSerializationTest.await(release);
            });
            thread.start();
            PoolLockSerializationTest.await(held);
        }

        @Override
        public void close() throws InterruptedException {
            release.countDown();
            thread.join();
            assertNull(failure, () -> "the lock holder failed: " + failure);
        }
    }

    /** Operations started while the lock is held, each on its own thread. */
    private static final class Waiters {
        private final Map<String, Thread> threads = new LinkedHashMap<>();
        private final Map<String, Throwable> failures = new ConcurrentHashMap<>();
        private final Map<String, Boolean> done = new ConcurrentHashMap<>();

        void start(String name, Runnable op) {
            prepare(name, op).start();
        }

        /** @return the operation's thread, not started yet */
        Thread prepare(String name, Runnable op) {
            final Thread t = Thread.ofPlatform().name(name).unstarted(() -> {
                try {
                    op.run();
                } catch (Throwable e) {
                    failures.put(name, e);
                } finally {
                    done.put(name, true);
                }
            });
            threads.put(name, t);
            return t;
        }

        /**
         * Waits until each is seen inside the pool lock's contended acquire; none may finish meanwhile. A thread not yet
         * scheduled is not counted as waiting: each must be seen there.
         */
        void assertAllWaiting() throws InterruptedException {
            final long end = System.nanoTime() + java.util.concurrent.TimeUnit.SECONDS.toNanos(30);
            for (Map.Entry<String, Thread> e : threads.entrySet()) {
                while (!waitingForPoolLock(e.getValue())) {
                    assertFalse(done.containsKey(e.getKey()), () -> e.getKey() + " did not wait for the pool lock");
                    if (System.nanoTime() - end > 0) {
                        fail(e.getKey() + " never reached the pool lock: " + java.util.Arrays.toString(e.getValue().getStackTrace()));
                    }
                    Thread.sleep(1);
                }
            }
            assertEquals(List.of(), new ArrayList<>(done.keySet()), "these did not wait for the pool lock");
        }

        private static boolean waitingForPoolLock(Thread t) {
            for (StackTraceElement f : t.getStackTrace()) {
                if (f.getClassName().equals(AllocatorLock.class.getName()) && f.getMethodName().equals("lockContended")) {
                    return true;
                }
            }
            return false;
        }

        void joinAll() throws InterruptedException {
            for (Thread t : threads.values()) {
                t.join();
            }
            assertEquals(Map.of(), failures);
        }
    }

    private static KvPool pool(int pages, HookWords[] words) {
        final KvPoolBuilder b = TestPools.builder(pages);
        b.slotWords = n -> words[0] = new HookWords(n);
        return b.build();
    }

    private static int[] ids(int n, int seed) {
        return IntStream.range(0, n).map(i -> seed * 1000 + i).toArray();
    }

    private static Sequence written(KvPool pool, int[] ids, long salt, int tokens) {
        final Sequence s = pool.admit(ids, 0, salt).sequence();
        s.append(tokens - s.tokenCount());
        TokenTags.writeSequence(s, 1, 0, tokens);
        return s;
    }

    @Test
    void admissionAllocationPublicationAndPinsWaitForThePoolLockAndHandleEventsDoNot() throws Exception {
        final HookWords[] words = new HookWords[1];
        try (KvPool pool = pool(24, words)) {
            final long toOpen = pool.tryReserve(TPP, 0);
            final long toCancel = pool.tryReserve(TPP, 0);
            final Sequence toAppend = pool.admit(TPP, TPP).sequence();
            final Sequence toTopUp = pool.admit(2 * TPP, 0).sequence();
            toTopUp.append(2 * TPP);
            final int[] published = ids(2 * TPP, 1);
            final Sequence toUnpublish = written(pool, published, TestPools.SALT, 2 * TPP);
            toUnpublish.publish(published, TestPools.SALT);
            final Sequence toFork = pool.admit(TPP, TPP).sequence();
            toFork.append(TPP);
            final Sequence toClose = pool.admit(TPP, 0).sequence();
            final int[] unpublished = ids(TPP + 1, 2);
            final Sequence toPublish = written(pool, unpublished, TestPools.SALT, TPP + 1);
            final long toPin = pool.tryAllocate();
            final long shared = pool.tryAllocate();
            final Sequence roomy = pool.admit(TPP, 0).sequence();
            roomy.append(1); // its page has room: a decode step on it needs no page
            final PoolSnapshot before = pool.verifyAccounting();
            final Sequence[] results = new Sequence[4];
            final long[] handles = new long[2];

            final long[] heldPage = new long[1];
            final Waiters w = new Waiters();
            try (HeldLock lock = new HeldLock(words[0], () -> heldPage[0] = pool.tryAllocate())) {
                w.start("admit", () -> results[0] = pool.admit(TPP, 0).sequence());
                w.start("tryReserve", () -> handles[0] = pool.tryReserve(TPP, 0));
                w.start("openSequence", () -> results[1] = pool.openSequence(toOpen));
                w.start("cancelReservation", () -> pool.cancelReservation(toCancel));
                w.start("tryAllocate", () -> handles[1] = pool.tryAllocate());
                w.start("flushAllocatorCache", pool::flushAllocatorCache);
                w.start("append", () -> toAppend.append(TPP));
                w.start("truncate (reservation top-up)", () -> toTopUp.truncate(TPP));
                w.start("truncate (unpublish)", () -> toUnpublish.truncate(2 * TPP - 2));
                w.start("fork", () -> results[2] = toFork.fork());
                w.start("close a sequence", toClose::close);
                w.start("publish", () -> toPublish.publish(unpublished, TestPools.SALT));
                w.start("pinWriter", () -> pool.handles().pinWriter(toPin));
                w.start("snapshot", pool::snapshot);

                // the lock-free operations finish meanwhile
                pool.retain(shared);
                assertFalse(pool.release(shared));
                assertEquals(PageHandle.slot(shared), pool.validate(shared));
                assertEquals(SlotState.OWNED, pool.state(shared));
                assertNotNull(pool.page(shared));
                assertEquals(0, pool.firstCanaryToken(shared, 0, TPP));
                assertTrue(pool.metrics().owned() > 0);
                assertEquals(SlotState.OWNED, pool.stateOfSlot(PageHandle.slot(shared)));
                assertTrue(pool.release(shared));
                assertEquals(PoolSnapshot.class, pool.metrics().read().getClass());
                // a decode step that needs no page takes no lock (on another thread: were it to wait, this one stops it)
                assertEquals(0, assertTimeoutPreemptively(java.time.Duration.ofSeconds(10),
                    () -> pool.appendEach(new Sequence[] {roomy}, 1, 1)));

                w.assertAllWaiting();
            }
            w.joinAll();
            assertTrue(heldPage[0] >= 0 && handles[0] > 0 && handles[1] >= 0);
            assertEquals(SlotState.RECEIVING, pool.state(toPin));
            assertEquals(2, toPublish.publishedPages() + toUnpublish.publishedPages());
            assertEquals(1, toAppend.pageCount());
            assertEquals(1, toTopUp.reservedPages());
            assertEquals(before.openSequences() + 2, pool.snapshot().openSequences(), "admit, openSequence, fork, minus close");
            pool.handles().commitReceive(toPin);
            for (long h : new long[] {toPin, heldPage[0], handles[1]}) {
                pool.release(h);
            }
            pool.cancelReservation(handles[0]);
            assertEquals(2, roomy.tokenCount());
            for (Sequence s : new Sequence[] {results[0], results[1], results[2], toAppend, toTopUp, toUnpublish, toFork, toPublish, roomy}) {
                s.close();
            }
            final PoolSnapshot after = pool.verifyAccounting();
            assertEquals(0, after.inUse());
            assertEquals(0, after.reserved());
            assertEquals(0, after.openSequences());
            assertEquals(0, after.openReservations());
        }
    }

    @Test
    void theAccountingCheckSnapshotsAndCloseWaitForThePoolLock() throws Exception {
        final HookWords[] words = new HookWords[1];
        final KvPool pool = pool(4, words);
        final long[] heldPage = new long[1];
        final Waiters w = new Waiters();
        try (HeldLock lock = new HeldLock(words[0], () -> heldPage[0] = pool.tryAllocate())) {
            w.start("verifyAccounting", pool::verifyAccounting);
            w.start("snapshot", pool::snapshot);
            w.start("close", pool::close);
            w.assertAllWaiting();
            assertFalse(pool.isClosed());
        }
        w.joinAll();
        assertTrue(pool.isClosed());
        assertEquals(1, pool.verifyAccounting().owned(), "the page allocated under the held lock");
    }

    @Test
    void theLastUnpinAfterCloseWaitsForThePoolLockBeforeReleasingTheStorage() throws Exception {
        final HookWords[] words = new HookWords[1];
        final KvPool pool = pool(2, words);
        final long pinned = pool.tryAllocate();
        pool.handles().pinWriter(pinned);
        pool.close();
        final Waiters w = new Waiters();
        // the check reads every word under the lock; it may then see the unpin that waited for it, and say so
        try (HeldLock lock = new HeldLock(words[0], () -> assertThrowsOrPasses(pool::verifyAccounting))) {
            w.start("commitReceive", () -> pool.handles().commitReceive(pinned));
            w.assertAllWaiting();
            assertNotNull(pool.storage().hostPage(PageHandle.slot(pinned)), "released while the pool lock was held");
        }
        w.joinAll();
        assertThrows(IllegalStateException.class, () -> pool.storage().hostPage(0), "released after the last unpin");
    }

    private static void assertThrowsOrPasses(Runnable check) {
        try {
            check.run();
        } catch (IllegalStateException sawTheUnpin) {
            assertTrue(sawTheUnpin.getMessage().contains("disagree"), sawTheUnpin.getMessage());
        }
    }

    @Test
    void retiringAPublishedPageWaitsForThePoolLockToLeaveTheIndex() throws Exception {
        final HookWords[] words = new HookWords[1];
        try (KvPool pool = pool(4, words)) {
            pool.slotTable().forceGenerationOfFreeSlot(0, PageHandle.MAX_GENERATION - 1); // slot 0 is allocated first
            final int[] prompt = ids(TPP + 1, 3);
            final Sequence s = written(pool, prompt, TestPools.SALT, TPP + 1);
            s.publish(prompt, TestPools.SALT);
            final long last = s.pageHandle(0);
            assertEquals(PageHandle.MAX_GENERATION, PageHandle.generation(last));
            pool.retain(last);
            s.close();
            final long[] heldPage = new long[1];
            final Waiters w = new Waiters();
            try (HeldLock lock = new HeldLock(words[0], () -> heldPage[0] = pool.tryAllocate())) {
                w.start("release (retires)", () -> pool.release(last));
                w.assertAllWaiting();
            }
            w.joinAll();
            final PoolSnapshot snap = pool.verifyAccounting();
            assertEquals(1, snap.retired());
            assertEquals(0, snap.publishedPrefixes());
            pool.release(heldPage[0]);
        }
    }

    @Test
    void aFailedForkGivesItsReservationBackUnderThePoolLock() throws Exception {
        final HookWords[] words = new HookWords[1];
        try (KvPool pool = pool(8, words)) {
            final Sequence parent = pool.admit(TPP + 1, TPP).sequence();
            parent.append(TPP + 1);
            pool.handles().pinWriter(parent.pageHandle(1)); // fork's retain of page 1 fails: RECEIVING
            final long reservedBefore = pool.metrics().reserved();
            final AtomicReference<HeldLock> lock = new AtomicReference<>();
            final long[] heldPage = new long[1];
            final Waiters w = new Waiters();
            final Thread forker = w.prepare("fork", () -> assertThrows(IllegalSlotTransitionException.class, parent::fork));
            // after fork reserved (under the lock) and before it retains: another thread takes the lock
            words[0].onNextRead(forker, () -> lock.set(new HeldLock(words[0], () -> heldPage[0] = pool.tryAllocate())));
            forker.start();
            while (lock.get() == null) {
                Thread.onSpinWait();
            }
            w.assertAllWaiting();
            assertEquals(reservedBefore + 3, pool.metrics().reserved(),
                "the failed fork gave its reservation back without the pool lock (1 credit for the parent, 2 for the child)");
            lock.get().close();
            w.joinAll();
            pool.release(heldPage[0]);
            assertEquals(reservedBefore, pool.metrics().reserved());
            assertEquals(1, pool.snapshot().openSequences());
        }
    }

    /** Host storage whose next copy runs a callback, then fails. */
    static final class HookedCopyStorage extends ForwardingStorage {
        volatile Runnable beforeFailedCopy;

        HookedCopyStorage(KvLayout layout, int pages) {
            super(layout, pages);
        }

        @Override
        public void copyPages(int[] src, int srcOff, int[] dst, int dstOff, int count) {
            final Runnable r = beforeFailedCopy;
            if (r != null) {
                beforeFailedCopy = null;
                r.run();
                throw new IllegalStateException("injected copy failure");
            }
            d.copyPages(src, srcOff, dst, dstOff, count);
        }
    }

    @Test
    void aSecondCloseReturnsOnlyOnceTheFirstHasReportedAndReleasedTheStorage() throws Exception {
        final CountDownLatch unlocked = new CountDownLatch(1), release = new CountDownLatch(1);
        final KvPool pool = TestPools.pool(4);
        pool.tryAllocate(); // outstanding: the first close writes a report
        pool.afterCloseUnlocked = () -> { // the first close, marked closed and unlocked, before its report
            unlocked.countDown();
            try {
                release.await();
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
            }
        };
        // a thread each: the common pool may have one worker on a small machine, which the first close holds
        final java.util.concurrent.Executor own = r -> new Thread(r).start();
        final CompletableFuture<Void> first = CompletableFuture.runAsync(pool::close, own);
        assertTrue(unlocked.await(10, TimeUnit.SECONDS));
        final CountDownLatch secondCalled = new CountDownLatch(1);
        final CompletableFuture<Optional<String>> second = CompletableFuture.supplyAsync(() -> {
            secondCalled.countDown();
            pool.close();
            return pool.closeReport();
        }, own);
        assertTrue(secondCalled.await(10, TimeUnit.SECONDS));
        Thread.sleep(200);
        assertFalse(second.isDone(), "the second close returned before the first had reported and released the storage");
        release.countDown();
        first.get(10, TimeUnit.SECONDS);
        assertTrue(second.get(10, TimeUnit.SECONDS).isPresent(), "the second close's caller sees the first's report");
    }

    @Test
    void aFailedCopyOnWriteUndoesItsAllocationUnderThePoolLock() throws Exception {
        final HookWords[] words = new HookWords[1];
        final HookedCopyStorage[] storage = new HookedCopyStorage[1];
        final KvPoolBuilder b = TestPools.builder(8).storage((l, n) -> storage[0] = new HookedCopyStorage(l, n));
        b.slotWords = n -> words[0] = new HookWords(n);
        try (KvPool pool = b.build()) {
            final Sequence parent = pool.admit(TPP + 1, TPP).sequence();
            parent.append(TPP + 1);
            final Sequence child = parent.fork(); // shares the partial page 1: the next append copies it
            final int reservedBefore = child.reservedPages();
            final AtomicReference<HeldLock> lock = new AtomicReference<>();
            final long[] heldPage = new long[1];
            storage[0].beforeFailedCopy = () -> lock.set(new HeldLock(words[0], () -> heldPage[0] = pool.tryAllocate()));
            final Waiters w = new Waiters();
            w.start("append (copy fails)", () -> assertThrows(IllegalStateException.class, () -> child.append(1)));
            while (lock.get() == null) {
                Thread.onSpinWait();
            }
            w.assertAllWaiting();
            lock.get().close();
            w.joinAll();
            pool.release(heldPage[0]);
            assertEquals(reservedBefore, child.reservedPages(), "all or nothing: the reservation came back");
            child.append(1); // and the copy-on-write works again
            child.close();
            parent.close();
        }
    }
}
