package io.kvpool;

import java.lang.invoke.MethodHandles;
import java.lang.invoke.VarHandle;
import java.util.Arrays;

/**
 * The allocator's view of FREE pages, guarded by the pool lock. Two kinds:
 * <ul>
 *   <li><b>plain</b> free pages (no published prefix): a LIFO stack, so hot pages are reused first;</li>
 *   <li><b>cached</b> free pages: unreferenced pages that still hold a published prefix. They stay
 *       reusable by prefix lookups and sit in an LRU list (intrusive, doubly linked over int arrays, O(1)
 *       removal from the middle when a lookup revives one). The allocator evicts from the LRU head only
 *       when no plain page is left.</li>
 * </ul>
 * Not thread-safe: every method is called under the pool lock.
 */
final class FreePages {

    private static final VarHandle SIZES;
    private static final VarHandle LRU_SIZE;

    static {
        try {
            SIZES = MethodHandles.lookup().findVarHandle(FreePages.class, "stackSize", int.class);
            LRU_SIZE = MethodHandles.lookup().findVarHandle(FreePages.class, "lruSize", int.class);
        } catch (ReflectiveOperationException e) {
            throw new ExceptionInInitializerError(e);
        }
    }

    private static final int NIL = -1;

    private final int[] stack;
    private int stackSize;

    private final int[] prev;
    private final int[] next;
    private final boolean[] inLru;
    private int lruHead = NIL; // least recently used
    private int lruTail = NIL; // most recently used
    private int lruSize;

    FreePages(int capacity) {
        this.stack = new int[capacity];
        this.prev = new int[capacity];
        this.next = new int[capacity];
        this.inLru = new boolean[capacity];
        Arrays.fill(prev, NIL);
        Arrays.fill(next, NIL);
    }

    /** @return pages held here, plain and cached */
    int size() {
        return stackSize + lruSize;
    }

    /** @return {@link #size()} read without the lock: a count the lock holder may be changing (metrics only) */
    int sizeRacy() {
        return (int) SIZES.getOpaque(this) + (int) LRU_SIZE.getOpaque(this);
    }

    int cachedSize() {
        return lruSize;
    }

    void pushPlain(int slot) {
        stack[stackSize++] = slot;
    }

    /** Adds a cached page as the most recently used. */
    void pushCached(int slot) {
        inLru[slot] = true;
        prev[slot] = lruTail;
        next[slot] = NIL;
        if (lruTail == NIL) {
            lruHead = slot;
        } else {
            next[lruTail] = slot;
        }
        lruTail = slot;
        lruSize++;
    }

    /** @return whether the slot is a cached free page here */
    boolean isCached(int slot) {
        return inLru[slot];
    }

    /** Removes a cached page from the LRU (a prefix lookup revives it). */
    void removeCached(int slot) {
        if (!inLru[slot]) {
            throw new IllegalStateException("slot " + slot + " is not in the cached-free LRU");
        }
        final int p = prev[slot];
        final int n = next[slot];
        if (p == NIL) {
            lruHead = n;
        } else {
            next[p] = n;
        }
        if (n == NIL) {
            lruTail = p;
        } else {
            prev[n] = p;
        }
        prev[slot] = NIL;
        next[slot] = NIL;
        inLru[slot] = false;
        lruSize--;
    }

    /** @return a plain free page, or -1 if none */
    int popPlain() {
        return stackSize == 0 ? NIL : stack[--stackSize];
    }

    /** @return the least recently used cached page (removed), or -1 if none */
    int evictLru() {
        final int slot = lruHead;
        if (slot != NIL) {
            removeCached(slot);
        }
        return slot;
    }
}
