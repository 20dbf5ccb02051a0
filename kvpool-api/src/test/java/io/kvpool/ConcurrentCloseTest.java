package io.kvpool;

import org.junit.jupiter.api.Test;

import java.lang.foreign.ValueLayout;
import java.util.ArrayList;
import java.util.List;
import java.util.SplittableRandom;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicReference;

import static org.junit.jupiter.api.Assertions.*;

/**
 * {@link KvPool#close()} racing with transfer threads that end writer pins: a peer writes into each pinned page until
 * its transport ends the pin (commit, drain, or quarantine and its release), and the pool closes at a random moment
 * meanwhile. The storage must be released exactly once, never while a page is pinned (the peer's writes would reach
 * freed memory), and by the time the last pin has ended. Controls: a pinned count that close over-reads (the storage is
 * never released), and a peer that writes after its pin ended (its write reaches released storage).
 */
class ConcurrentCloseTest {

    private static final int PAGES = 16;
    private static final int PINNED = 12;
    private static final int TRANSFER_THREADS = 2;
    private static final int ROUNDS = Integer.getInteger("kvpool.close.rounds", 300);

    /** Host storage that counts its closes and checks, as it closes, that no page of its pool is pinned. */
    private static final class WatchedStorage extends ForwardingStorage {
        final AtomicInteger closes = new AtomicInteger();
        final AtomicReference<String> failure;
        volatile KvPool pool;

        WatchedStorage(KvLayout layout, int pages, AtomicReference<String> failure) {
            super(layout, pages);
            this.failure = failure;
        }

        @Override
        public void close() {
            closes.incrementAndGet();
            final SlotTable slots = pool.slotTable();
            for (int s = 0; s < slots.capacity(); s++) {
                final long word = slots.wordVolatile(s);
                if (SlotStateMachine.pinned(SlotStateMachine.phase(word))) {
                    failure.compareAndSet(null, "storage released while slot " + s + " is " + SlotStateMachine.describe(word));
                }
            }
            super.close();
        }
    }

    /** A peer's write into a pinned page, through the storage the pool keeps for it. */
    private static void peerWrite(KvPool pool, long handle, AtomicReference<String> failure) {
        try {
            pool.storage().hostPage(PageHandle.slot(handle)).set(ValueLayout.JAVA_LONG_UNALIGNED, 0, handle);
        } catch (IllegalStateException released) {
            failure.compareAndSet(null, "a peer wrote " + PageHandle.toString(handle) + " into released storage: " + released);
        }
    }

    /**
     * One round: pins pages, hands them to transfer threads, closes the pool while they end the pins.
     *
     * @param overcount  the control: one pinned page more than there is, as close reads the count
     * @param lateWriter the control: the peer writes once more after its pin ended
     * @return the first failure, or null
     */
    private static String round(long seed, boolean overcount, boolean lateWriter) throws InterruptedException {
        final AtomicReference<String> failure = new AtomicReference<>();
        final WatchedStorage[] storage = new WatchedStorage[1];
        final KvPool pool = TestPools.builder(PAGES).storage((layout, pages) -> storage[0] = new WatchedStorage(layout, pages, failure))
            .build();
        storage[0].pool = pool;
        final long[] pinned = new long[PINNED];
        for (int i = 0; i < PINNED; i++) {
            pinned[i] = pool.tryAllocate();
        }
        pool.handles().pinWriters(pinned, 0, PINNED);
        if (overcount) {
            pool.slotTable().counts().receiving.increment();
        }
        final CountDownLatch start = new CountDownLatch(1);
        final AtomicInteger unpinned = new AtomicInteger();
        final List<Thread> threads = new ArrayList<>();
        for (int t = 0; t < TRANSFER_THREADS; t++) {
            final int first = t;
            final SplittableRandom rnd = new SplittableRandom(seed * 31 + t);
            threads.add(Thread.ofPlatform().name("transfer-" + t).start(() -> {
                try {
                    start.await();
                    for (int i = first; i < PINNED; i += TRANSFER_THREADS) {
                        final long h = pinned[i];
                        peerWrite(pool, h, failure);
                        pool.release(h); // the pin keeps the page; accepted after close while the storage is kept
                        peerWrite(pool, h, failure);
                        switch (rnd.nextInt(3)) {
                            case 0 -> pool.handles().commitReceive(h);
                            case 1 -> {
                                pool.handles().beginDrain(h);
                                peerWrite(pool, h, failure);
                                pool.handles().drained(h);
                            }
                            default -> {
                                pool.handles().quarantine(h);
                                peerWrite(pool, h, failure);
                                pool.handles().releaseQuarantine(h);
                            }
                        }
                        unpinned.incrementAndGet();
                        if (lateWriter) {
                            peerWrite(pool, h, failure);
                        }
                        if (rnd.nextInt(4) == 0) {
                            Thread.yield();
                        }
                    }
                } catch (Throwable e) {
                    failure.compareAndSet(null, Thread.currentThread().getName() + ": " + e);
                }
            }));
        }
        final SplittableRandom rnd = new SplittableRandom(seed);
        // close after a different number of unpins each round, at a different moment of the next one
        final int after = rnd.nextInt(PINNED + 1);
        start.countDown();
        while (unpinned.get() < after && failure.get() == null) {
            Thread.onSpinWait();
        }
        for (int spin = rnd.nextInt(200); spin > 0; spin--) {
            Thread.onSpinWait();
        }
        pool.close();
        for (Thread t : threads) {
            t.join(30_000);
        }
        if (failure.get() != null) {
            return failure.get();
        }
        if (storage[0].closes.get() != 1) {
            return "every pin ended: the storage was released " + storage[0].closes.get() + " times, not once; "
                + pool.lifetime().pinnedAfterClose() + " pinned pages still counted";
        }
        return null;
    }

    @Test
    void closeRacingWithTheLastUnpinsReleasesTheStorageOnceAndNeverUnderAPin() throws InterruptedException {
        for (long seed = 1; seed <= ROUNDS; seed++) {
            assertNull(round(seed, false, false), "seed " + seed);
        }
    }

    @Test
    void theTestCatchesStorageKeptAfterTheLastUnpin() throws InterruptedException {
        String caught = null;
        for (long seed = 1; seed <= ROUNDS && caught == null; seed++) {
            caught = round(seed, true, false);
        }
        assertNotNull(caught, "a pinned count one too high keeps the storage forever");
    }

    @Test
    void theTestCatchesAWriteIntoReleasedStorage() throws InterruptedException {
        String caught = null;
        for (long seed = 1; seed <= ROUNDS && caught == null; seed++) {
            caught = round(seed, false, true);
        }
        assertNotNull(caught, "a peer that writes after its pin ended reaches the released storage");
    }
}
