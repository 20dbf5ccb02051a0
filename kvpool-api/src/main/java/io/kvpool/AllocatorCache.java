package io.kvpool;

import java.lang.invoke.MethodHandles;
import java.lang.invoke.VarHandle;
import java.util.function.IntConsumer;

/**
 * A small stack of FREE pages confined to one thread, the pool's <em>allocator thread</em> (in a server,
 * the scheduler): pages that thread frees go here and its next allocations come from here, with no lock.
 * Netty's {@code PoolThreadCache} and jemalloc's tcache apply the same idea.
 *
 * <pre>
 *   owner:   the first thread that allocates (bound once by CAS; unbound only when it has died)
 *   slots:   [ s0 s1 ... s(size-1) ]   LIFO, at most capacity pages
 *   active:  true while the owner touches slots/size outside the pool lock      (owner writes)
 *   flushRequested: another thread wants the pages back                          (others write)
 * </pre>
 * Pages here are FREE (their state words say so) but are not in the pool's free structures, so
 * admission never promises them: {@code reserved ≤ free} keeps holding, and taking one needs no
 * reservation check. The owner empties the cache into the free structures whenever it takes the pool
 * lock for a decision that needs an exact free count, so its own admissions always see every free page.
 *
 * <h2>Taking the pages of an idle owner</h2>
 * Another thread that comes up short (under the pool lock) calls {@link #takeFromIdleOwner}: a Dekker
 * handshake over two volatile flags. The taker writes {@code flushRequested} then reads {@code active}; the
 * owner, before each push or pop outside the lock, writes {@code active} then reads {@code flushRequested}.
 * Volatile accesses are sequentially consistent, so at least one of them sees the other's write: either the
 * taker sees the owner busy (and leaves the request: the owner hands the pages back at its next operation)
 * or the owner sees the request (and goes through the lock instead). An owner that is alive but idle
 * therefore never keeps its pages from other threads. The price is one full fence per owner push or pop.
 * If the owner dies, the next locked operation adopts its pages (a thread's termination happens-before
 * another thread seeing it dead). Opt-in ({@link KvPoolBuilder#threadCache}).
 */
final class AllocatorCache {

    private static final VarHandle OWNER;
    private static final VarHandle ACTIVE;
    private static final VarHandle ALLOCATIONS;
    private static final VarHandle SIZE;

    static {
        try {
            final MethodHandles.Lookup l = MethodHandles.lookup();
            OWNER = l.findVarHandle(AllocatorCache.class, "owner", Thread.class);
            ACTIVE = l.findVarHandle(AllocatorCache.class, "active", boolean.class);
            ALLOCATIONS = l.findVarHandle(AllocatorCache.class, "allocations", long.class);
            SIZE = l.findVarHandle(AllocatorCache.class, "size", int.class);
        } catch (ReflectiveOperationException e) {
            throw new ExceptionInInitializerError(e);
        }
    }

    private final int[] slots;
    private int size;          // the owner's, or a taker's under the pool lock after the handshake
    @SuppressWarnings("unused") // accessed through ALLOCATIONS: written by the owner only, read by anyone
    private long allocations;
    private volatile boolean flushRequested;
    @SuppressWarnings("unused") // accessed through ACTIVE
    private volatile boolean active;
    @SuppressWarnings("unused") // accessed through OWNER
    private volatile Thread owner;

    AllocatorCache(int capacity) {
        this.slots = new int[capacity];
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

    /** Owner only, no lock. @return a cached FREE slot, or -1 (empty, or another thread asked for the pages) */
    int pop() {
        if (!enter()) {
            return -1;
        }
        final int slot = size == 0 ? -1 : slots[--size];
        ACTIVE.setRelease(this, false);
        return slot;
    }

    /** Owner only, no lock. @return whether the slot was taken (false when full or when the pages are asked for) */
    boolean push(int slot) {
        if (size == slots.length || !enter()) {
            return false;
        }
        slots[size++] = slot;
        ACTIVE.setRelease(this, false);
        return true;
    }

    /** The owner's half of the handshake: announce, then look for a request (see the class comment). */
    private boolean enter() {
        ACTIVE.setVolatile(this, true);
        if (flushRequested) {
            ACTIVE.setRelease(this, false);
            return false;
        }
        return true;
    }

    /** Owner only: counts an allocation served from the cache. */
    void countAllocation() {
        ALLOCATIONS.setRelease(this, (long) ALLOCATIONS.get(this) + 1);
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
            return 0; // a live owner's cache is its own (see takeFromIdleOwner)
        }
        final int n = moveAll(sink);
        flushRequested = false;
        if (!mine) {
            OWNER.compareAndSet(this, o, null); // adopted from a dead owner; the next allocator binds anew
        }
        return n;
    }

    /**
     * Under the pool lock, on a thread that is not the owner and came up short: takes the pages of a live
     * owner that is not pushing or popping right now (the handshake in the class comment). When the owner is
     * busy the request stays set and the owner hands the pages back at its next operation.
     *
     * @return pages moved
     */
    int takeFromIdleOwner(IntConsumer sink) {
        final Thread o = owner;
        if (o == null || o == Thread.currentThread() || slots.length == 0) {
            return 0;
        }
        if (!o.isAlive()) {
            return flush(sink);
        }
        flushRequested = true;
        if ((boolean) ACTIVE.getVolatile(this)) {
            return 0;
        }
        final int n = moveAll(sink);
        flushRequested = false; // after the pages moved: an owner that reads false sees size == 0
        return n;
    }

    private int moveAll(IntConsumer sink) {
        final int n = size;
        for (int i = 0; i < n; i++) {
            sink.accept(slots[i]); // oldest first, so the most recently freed ends on top of a LIFO
        }
        size = 0;
        return n;
    }

    /** At a quiescent point only (racy otherwise): the cached slots, for accounting checks. */
    void forEachQuiescent(IntConsumer action) {
        for (int i = 0; i < size; i++) {
            action.accept(slots[i]);
        }
    }

    /** @return pages cached, read from any thread (a count the owner may be changing: metrics only) */
    int sizeRacy() {
        return (int) SIZE.getOpaque(this);
    }

    /** At a quiescent point only: pages cached. */
    int sizeQuiescent() {
        return size;
    }

    /** @return allocations served from the cache so far (any thread; exact at a quiescent point) */
    long allocations() {
        return (long) ALLOCATIONS.getOpaque(this);
    }
}
