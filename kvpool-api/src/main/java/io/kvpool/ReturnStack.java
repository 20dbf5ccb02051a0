package io.kvpool;

import java.lang.invoke.MethodHandles;
import java.lang.invoke.VarHandle;

/**
 * Pages that became FREE on any thread wait here until the allocator takes them all at once. A
 * multi-producer, single-consumer intrusive stack: producers push with one CAS; the consumer (the
 * allocator, under the pool lock) takes the whole stack with one {@code getAndSet}. Because nothing pops
 * a single element, the classic ABA problem of Treiber stacks cannot arise.
 *
 * <pre>
 *  head (one long):  [ count (32 bits) | top slot + 1 (32 bits, 0 = empty) ]
 *  next[slot]:       the slot below it, or -1
 *  pushAll, pushRun: a run is linked below its top slot first (link), then the head swings to it with one CAS
 * </pre>
 * Keeping the count in the head makes {@link #sizeVolatile()} exact at every linearization point.
 */
final class ReturnStack {

    private static final VarHandle HEAD;

    static {
        try {
            HEAD = MethodHandles.lookup().findVarHandle(ReturnStack.class, "head", long.class);
        } catch (ReflectiveOperationException e) {
            throw new ExceptionInInitializerError(e);
        }
    }

    private final int[] next;
    private final int[] scratch; // consumer-only
    @SuppressWarnings("unused") // accessed through HEAD
    private volatile long head;

    ReturnStack(int capacity) {
        this.next = new int[capacity];
        this.scratch = new int[capacity];
    }

    /** Pushes a slot that just became FREE. Thread-safe, lock-free. */
    void push(int slot) {
        while (true) {
            final long h = (long) HEAD.getVolatile(this);
            next[slot] = (int) h - 1; // plain store, published by the CAS below
            final long n = (((h >>> 32) + 1) << 32) | (slot + 1L);
            if (HEAD.compareAndSet(this, h, n)) {
                return;
            }
        }
    }

    /**
     * Pushes {@code slots[0 .. n)} with one CAS, as {@code n} pushes in that order would (the last one on top).
     * Thread-safe, lock-free.
     *
     * @param n slots to push, ≥ 1
     */
    void pushAll(int[] slots, int n) {
        for (int i = 1; i < n; i++) {
            link(slots[i - 1], slots[i]);
        }
        pushRun(slots[0], slots[n - 1], n);
    }

    /**
     * Puts {@code slot} above {@code below} in a run the caller is building, to push with {@link #pushRun}: a plain
     * store, published by that push's CAS. Both slots must be FREE pages the caller holds out of every free structure
     * (only a slot's pusher writes its link, and the stack reads it only once the slot is pushed), so that nothing
     * but the caller's scratch-free run needs to remember them meanwhile.
     */
    void link(int below, int slot) {
        next[slot] = below;
    }

    /**
     * Pushes a run of {@code n} slots linked by {@link #link} from {@code bottom} up to {@code top} with one CAS, as
     * {@code n} pushes from the bottom up would. Thread-safe, lock-free.
     *
     * @param n slots in the run, ≥ 1
     */
    void pushRun(int bottom, int top, int n) {
        final long add = (long) n << 32;
        final long topWord = top + 1L;
        while (true) {
            final long h = (long) HEAD.getVolatile(this);
            next[bottom] = (int) h - 1; // plain store, published by the CAS below
            if (HEAD.compareAndSet(this, h, ((h & 0xFFFF_FFFF_0000_0000L) + add) | topWord)) {
                return;
            }
        }
    }

    /** @return the number of slots waiting */
    int sizeVolatile() {
        return (int) ((long) HEAD.getVolatile(this) >>> 32);
    }

    /**
     * Takes every waiting slot. Single consumer only (the pool lock).
     *
     * @param sink receives each slot in the order they were pushed (oldest first), so a LIFO free list
     *             reuses the most recently freed page first and an LRU sees releases in their real order
     * @return the number of slots taken
     */
    int drain(java.util.function.IntConsumer sink) {
        if ((long) HEAD.getVolatile(this) == 0L) {
            return 0;
        }
        final long h = (long) HEAD.getAndSet(this, 0L);
        final int count = (int) (h >>> 32);
        int slot = (int) h - 1;
        for (int i = count - 1; i >= 0; i--) {
            scratch[i] = slot;
            slot = next[slot];
        }
        for (int i = 0; i < count; i++) {
            sink.accept(scratch[i]);
        }
        return count;
    }
}
