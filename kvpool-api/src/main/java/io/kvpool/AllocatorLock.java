package io.kvpool;

import java.lang.invoke.MethodHandles;
import java.lang.invoke.VarHandle;
import java.util.concurrent.locks.LockSupport;

/**
 * The pool lock: a non-reentrant test-and-test-and-set lock for the allocator's short critical sections
 * (pop a page, count a reservation). Uncontended it costs one CAS to acquire and a release-store to
 * release — one atomic instruction per critical section where {@code synchronized} spends two. Under
 * contention a waiter spins briefly, then yields, then parks for short intervals.
 *
 * <pre>
 *   state: 0 = free, 1 = held          lock():   CAS 0 → 1 (volatile)     unlock(): setRelease(0)
 * </pre>
 * Acquire/release semantics make every write inside one critical section visible to the next holder.
 * Re-entry is a bug, detected and reported instead of deadlocking.
 */
final class AllocatorLock {

    private static final VarHandle STATE;

    static {
        try {
            STATE = MethodHandles.lookup().findVarHandle(AllocatorLock.class, "state", int.class);
        } catch (ReflectiveOperationException e) {
            throw new ExceptionInInitializerError(e);
        }
    }

    @SuppressWarnings("unused") // accessed through STATE
    private volatile int state;
    private Thread owner; // written only by the holder; read for the re-entry diagnostic

    void lock() {
        if (!STATE.compareAndSet(this, 0, 1)) {
            lockContended();
        }
        owner = Thread.currentThread();
    }

    private void lockContended() {
        if (owner == Thread.currentThread() && (int) STATE.getVolatile(this) == 1) {
            throw new IllegalStateException("kvpool internal error: the pool lock is not reentrant");
        }
        for (int spins = 0; ; spins++) {
            if ((int) STATE.getVolatile(this) == 0 && STATE.compareAndSet(this, 0, 1)) {
                return;
            }
            if (spins < 64) {
                Thread.onSpinWait();
            } else if (spins < 128) {
                Thread.yield();
            } else {
                LockSupport.parkNanos(2_000);
            }
        }
    }

    /** @return whether the lock was free and is now held by the caller; never waits, never reports re-entry */
    boolean tryLock() {
        if ((int) STATE.getVolatile(this) == 0 && STATE.compareAndSet(this, 0, 1)) {
            owner = Thread.currentThread();
            return true;
        }
        return false;
    }

    void unlock() {
        owner = null;
        STATE.setRelease(this, 0);
    }

    boolean isHeldByCurrentThread() {
        return (int) STATE.getVolatile(this) == 1 && owner == Thread.currentThread();
    }
}
