package io.kvpool;

import org.junit.jupiter.api.Test;

import static org.junit.jupiter.api.Assertions.*;

class AllocatorLockTest {

    /**
     * A counter incremented non-atomically (read, add, write) inside whatever "lock" is given. Opaque
     * accesses keep the JIT from holding the value in a register for a whole loop, so unguarded threads
     * really race on memory.
     */
    private static final class Counter {
        private static final java.lang.invoke.VarHandle VALUE;

        static {
            try {
                VALUE = java.lang.invoke.MethodHandles.lookup().findVarHandle(Counter.class, "value", long.class);
            } catch (ReflectiveOperationException e) {
                throw new ExceptionInInitializerError(e);
            }
        }

        private long value;

        long get() {
            return (long) VALUE.getOpaque(this);
        }

        void set(long v) {
            VALUE.setOpaque(this, v);
        }
    }

    private interface Guard {
        void run(Runnable r);
    }

    private static long hammer(Guard guard, int threads, int perThread) throws InterruptedException {
        final Counter c = new Counter();
        final Thread[] ts = new Thread[threads];
        final java.util.concurrent.CountDownLatch go = new java.util.concurrent.CountDownLatch(1);
        for (int t = 0; t < threads; t++) {
            ts[t] = Thread.ofPlatform().start(() -> {
                try {
                    go.await(); // all threads start together, so they overlap
                } catch (InterruptedException e) {
                    Thread.currentThread().interrupt();
                    return;
                }
                for (int i = 0; i < perThread; i++) {
                    guard.run(() -> {
                        final long v = c.get();
                        if ((v & 255) == 0) {
                            Thread.yield(); // widen the window now and then
                        }
                        c.set(v + 1);
                    });
                }
            });
        }
        go.countDown();
        for (Thread t : ts) {
            t.join();
        }
        return c.get();
    }

    @Test
    void mutualExclusionUnderContention() throws InterruptedException {
        final AllocatorLock lock = new AllocatorLock();
        final long total = hammer(r -> {
            lock.lock();
            try {
                r.run();
            } finally {
                lock.unlock();
            }
        }, 4, 250_000);
        assertEquals(1_000_000, total);
        assertFalse(lock.isHeldByCurrentThread());
    }

    @Test
    void theHarnessSeesLostUpdatesWithoutTheLock() throws InterruptedException {
        long lost = 0;
        for (int attempt = 0; attempt < 5 && lost == 0; attempt++) {
            lost = 1_000_000 - hammer(Runnable::run, 4, 250_000);
        }
        assertTrue(lost > 0, "unguarded increments must lose updates, or the test above proves nothing");
    }

    @Test
    void reentryIsReportedNotDeadlocked() {
        final AllocatorLock lock = new AllocatorLock();
        lock.lock();
        assertTrue(lock.isHeldByCurrentThread());
        final IllegalStateException e = assertThrows(IllegalStateException.class, lock::lock);
        assertTrue(e.getMessage().contains("not reentrant"));
        lock.unlock();
        lock.lock();
        lock.unlock();
    }
}
