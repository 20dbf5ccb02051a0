package io.kvpool;

import org.junit.jupiter.api.Test;

import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.TimeUnit;
import java.util.function.IntConsumer;

import static org.junit.jupiter.api.Assertions.*;

/**
 * {@link AllocatorCache} on its own: who owns it, LIFO push and pop up to its capacity, the flush request that makes
 * the owner bypass it, and the handshake that lets another thread take an idle (or dead) owner's pages.
 */
class AllocatorCacheHandshakeTest {

    /** A thread that stays alive between the steps it is given: the cache's owner. */
    private static final class OwnerThread implements AutoCloseable {
        final ExecutorService thread = Executors.newSingleThreadExecutor(Thread.ofPlatform().name("cache-owner").factory());

        <T> T run(java.util.concurrent.Callable<T> step) throws Exception {
            return thread.submit(step).get(30, TimeUnit.SECONDS);
        }

        @Override
        public void close() throws InterruptedException {
            thread.shutdown();
            assertTrue(thread.awaitTermination(30, TimeUnit.SECONDS));
        }
    }

    private static final class Sink implements IntConsumer {
        final List<Integer> got = new ArrayList<>();

        @Override
        public void accept(int slot) {
            got.add(slot);
        }
    }

    @Test
    void onlyACacheWithRoomGetsAnOwnerAndOnlyTheFirstThreadBecomesIt() throws Exception {
        final AllocatorCache none = new AllocatorCache(0);
        none.bindIfUnowned();
        assertFalse(none.isOwner(), "a cache of 0 pages has no owner");
        none.requestFlush();
        assertFalse(none.flushRequested());
        final AllocatorCache c = new AllocatorCache(2);
        c.requestFlush();
        assertFalse(c.flushRequested(), "nobody to ask before an owner is bound");
        c.bindIfUnowned();
        assertTrue(c.isOwner());
        try (OwnerThread other = new OwnerThread()) {
            assertFalse(other.run(() -> {
                c.bindIfUnowned();
                return c.isOwner();
            }), "the first owner keeps the cache");
        }
        assertTrue(c.isOwner());
        c.requestFlush();
        assertTrue(c.flushRequested());
    }

    @Test
    void theOwnerPushesAndPopsLifoUpToTheCapacity() {
        final AllocatorCache c = new AllocatorCache(2);
        c.bindIfUnowned();
        assertEquals(-1, c.pop());
        assertTrue(c.push(5));
        assertTrue(c.push(7));
        assertFalse(c.push(9), "full");
        assertEquals(2, c.sizeQuiescent());
        final Sink seen = new Sink();
        c.forEachQuiescent(seen);
        assertEquals(List.of(5, 7), seen.got);
        assertEquals(7, c.pop());
        assertEquals(5, c.pop());
        assertEquals(-1, c.pop());
        assertEquals(0, c.sizeQuiescent());
        c.countAllocation();
        c.countAllocation();
        assertEquals(2, c.allocations());
    }

    @Test
    void aRequestedFlushMakesTheOwnerBypassItsCacheUntilItFlushes() {
        final AllocatorCache c = new AllocatorCache(4);
        c.bindIfUnowned();
        assertTrue(c.push(3));
        c.requestFlush();
        assertFalse(c.push(4), "asked for the pages: no push");
        assertEquals(-1, c.pop(), "asked for the pages: no pop");
        assertEquals(1, c.sizeQuiescent());
        final Sink sink = new Sink();
        assertEquals(1, c.flush(sink));
        assertEquals(List.of(3), sink.got);
        assertFalse(c.flushRequested());
        assertTrue(c.isOwner(), "the owner's own flush keeps it the owner");
        assertTrue(c.push(4));
        assertEquals(4, c.pop());
        assertEquals(0, new AllocatorCache(2).flush(sink), "no owner, nothing to flush");
    }

    @Test
    void anotherThreadTakesAnIdleOwnersPagesOldestFirstButNeverALiveOwnersByFlush() throws Exception {
        final AllocatorCache c = new AllocatorCache(4);
        try (OwnerThread owner = new OwnerThread()) {
            assertEquals(3, owner.run(() -> {
                c.bindIfUnowned();
                c.push(1);
                c.push(2);
                c.push(3);
                return c.pop(); // its last step is a pop: it is idle after it all the same
            }));
            final Sink sink = new Sink();
            assertEquals(0, c.flush(sink), "a live owner's cache is not flushed by another thread");
            assertEquals(0, new AllocatorCache(0).takeFromIdleOwner(sink));
            assertEquals(2, c.takeFromIdleOwner(sink));
            assertEquals(List.of(1, 2), sink.got);
            assertFalse(c.flushRequested(), "taken: no request left behind");
            assertEquals(0, c.sizeQuiescent());
            assertTrue(owner.run(c::isOwner), "the owner stays the owner");
            assertEquals(0, owner.run(() -> c.takeFromIdleOwner(sink)), "the owner does not take from itself");
        }
    }

    @Test
    void anOwnerThatFoundAFlushRequestIsIdleAgainAfterwards() throws Exception {
        final AllocatorCache c = new AllocatorCache(4);
        try (OwnerThread owner = new OwnerThread()) {
            owner.run(() -> {
                c.bindIfUnowned();
                return c.push(1);
            });
            c.requestFlush();
            assertFalse(owner.run(() -> c.push(2)), "the owner saw the request");
            final Sink sink = new Sink();
            assertEquals(1, c.takeFromIdleOwner(sink), "the owner is idle again: its page can be taken");
            assertEquals(List.of(1), sink.got);
        }
    }

    @Test
    void aDeadOwnersPagesAreAdoptedAndTheCacheIsFreeToBindAgain() throws Exception {
        final AllocatorCache c = new AllocatorCache(4);
        final Thread dying = Thread.ofPlatform().start(() -> {
            c.bindIfUnowned();
            c.push(1);
            c.push(2);
        });
        dying.join();
        final Sink sink = new Sink();
        assertEquals(2, c.flush(sink));
        assertEquals(List.of(1, 2), sink.got);
        assertFalse(c.isOwner());
        c.bindIfUnowned();
        assertTrue(c.isOwner(), "unbound from the dead owner");

        final AllocatorCache d = new AllocatorCache(4);
        final Thread dyingToo = Thread.ofPlatform().start(() -> {
            d.bindIfUnowned();
            d.push(9);
        });
        dyingToo.join();
        final Sink taken = new Sink();
        assertEquals(1, d.takeFromIdleOwner(taken), "a thread short of pages adopts a dead owner's");
        assertEquals(List.of(9), taken.got);
    }
}
