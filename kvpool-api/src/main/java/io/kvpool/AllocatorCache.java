package io.kvpool;

import java.lang.invoke.MethodHandles;
import java.lang.invoke.VarHandle;
import java.util.function.IntConsumer;

/**
 * A small stack of FREE pages confined to one thread, the pool's <em>allocator thread</em> (in a server,
 * the scheduler): pages that thread frees go here and its next allocations come from here, with no lock
 * and no atomic instruction beyond the page's own state-word CAS. Netty's {@code PoolThreadCache} and
 * jemalloc's tcache apply the same idea.
 *
 * <pre>
 *   owner:  the first thread that allocates (bound once by CAS; unbound only when it has died)
 *   slots:  [ s0 s1 ... s(size-1) ]   LIFO, at most capacity pages, touched only by the owner
 * </pre>
 * Pages here are FREE (their state words say so) but are not in the pool's free structures, so
 * admission never promises them: {@code reserved ≤ free} keeps holding, and taking one needs no
 * reservation check. The owner empties the cache into the free structures whenever it takes the pool
 * lock for a decision that needs an exact free count (admission, reservations, snapshots, close), so
 * its own admissions always see every free page. Another thread's admission or allocation that comes up
 * short while pages sit here sets {@link #requestFlush()}: the owner then bypasses the cache and hands it
 * back at its next allocation (or free, when the lock is free at that moment). If the owner dies, the next locked operation adopts its pages (a
 * thread's termination happens-before another thread seeing it dead). Opt-in
 * ({@link KvPool.Builder#threadCache}): it pays off when one thread does the allocating.
 */
final class AllocatorCache {

    private static final VarHandle OWNER;

    static {
        try {
            OWNER = MethodHandles.lookup().findVarHandle(AllocatorCache.class, "owner", Thread.class);
        } catch (ReflectiveOperationException e) {
            throw new ExceptionInInitializerError(e);
        }
    }

    private final int[] slots;
    private int size;          // owner-confined
    private long allocations;  // owner-confined; read by snapshots at quiescent points
    private volatile boolean flushRequested; // set by a thread that came up short; cleared by the flush
    @SuppressWarnings("unused") // accessed through OWNER
    private volatile Thread owner;

    AllocatorCache(int capacity) {
        this.slots = new int[capacity];
    }

    boolean enabled() {
        return slots.length > 0;
    }

    /** @return whether the calling thread owns the cache */
    boolean isOwner() {
        return owner == Thread.currentThread();
    }

    /** Makes the calling thread the owner if there is none yet. */
    void bindIfUnowned() {
        if (slots.length > 0 && owner == null) {
            OWNER.compareAndSet(this, null, Thread.currentThread());
        }
    }

    /** Asks the owner to hand its cached pages back to the free structures at its next allocation or free. */
    void requestFlush() {
        if (slots.length > 0 && owner != null) {
            flushRequested = true;
        }
    }

    /** @return whether another thread asked for the cache back (the owner then bypasses it until flushed) */
    boolean flushRequested() {
        return flushRequested;
    }

    /** Owner only. @return a cached FREE slot, or -1 */
    int pop() {
        return size == 0 ? -1 : slots[--size];
    }

    /** Owner only: counts an allocation served from the cache. */
    void countAllocation() {
        allocations++;
    }

    /** Owner only. @return whether the slot was taken (false when full) */
    boolean push(int slot) {
        if (size == slots.length) {
            return false;
        }
        slots[size++] = slot;
        return true;
    }

    /**
     * Under the pool lock: the owner empties its cache into {@code sink}; any other thread adopts the
     * pages of an owner that has died and unbinds it.
     *
     * @return pages moved
     */
    int flush(IntConsumer sink) {
        final Thread o = owner;
        if (o == null) {
            return 0;
        }
        final boolean mine = o == Thread.currentThread();
        if (!mine && o.isAlive()) {
            return 0; // a live owner's cache is its own
        }
        flushRequested = false;
        final int n = size;
        for (int i = 0; i < n; i++) {
            sink.accept(slots[i]); // oldest first, so the most recently freed ends on top of a LIFO
        }
        size = 0;
        if (!mine) {
            OWNER.compareAndSet(this, o, null); // adopted from a dead owner; the next allocator binds anew
        }
        return n;
    }

    /** At a quiescent point only (racy otherwise): the cached slots, for accounting checks. */
    void forEachQuiescent(IntConsumer action) {
        for (int i = 0; i < size; i++) {
            action.accept(slots[i]);
        }
    }

    /** At a quiescent point only: pages cached. */
    int sizeQuiescent() {
        return size;
    }

    /** At a quiescent point only: allocations served from the cache so far. */
    long allocationsQuiescent() {
        return allocations;
    }
}
