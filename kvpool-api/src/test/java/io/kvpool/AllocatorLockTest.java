package io.kvpool;

import org.junit.jupiter.api.Test;

import static org.junit.jupiter.api.Assertions.*;

class AllocatorLockTest {

    /** A counter incremented non-atomically (read, add, write) inside whatever "lock" is given. */
    private static final class Counter {
        long value;
    }

    private interface Guard {
        void run(Runnable r);
    }

    private static long hammer(Guard guard, int threads, int perThread) throws InterruptedException {
        final Counter c = new Counter();
        final Thread[] ts = new Thread[threads];
        for (int t = 0; t < threads; t++) {
            ts[t] = Thread.ofPlatform().start(() -> {
                for (int i = 0; i < perThread; i++) {
                    guard.run(() -> {
                        final long v = c.value;
                        if ((v & 1023) == 0) {
                            Thread.onSpinWait(); // widen the window now and then
                        }
                        c.value = v + 1;
                    });
                }
            });
        }
        for (Thread t : ts) {
            t.join();
        }
        return c.value;
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
