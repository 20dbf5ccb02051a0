package io.kvpool;

import io.kvpool.storage.FillMode;
import io.kvpool.storage.PageStorage;

import java.lang.invoke.MethodHandles;
import java.lang.invoke.VarHandle;
import java.util.Arrays;
import java.util.function.IntConsumer;

/**
 * Where FREE pages wait and how they are handed out and filled.
 *
 * <pre>
 *   a page is freed (any thread, lock-free)          allocation (pool lock, or the owner's fast path)
 *   ─────────────────────────────────────           ─────────────────────────────────────────────────
 *   fill it (canary/zero), unless it holds a        1. the owner's cache              AllocatorCache
 *     published prefix                              2. plain free pages (LIFO)       ┐ FreePages
 *   owner thread: push to its AllocatorCache        3. cached prefix pages (LRU):    ┘  evicted, and
 *   else: push to the ReturnStack (one CAS)            filled before the handle escapes
 *   the ReturnStack drains into FreePages           a page whose fill failed at free is filled before
 *     under the lock                                  its next handle escapes, like an evicted one
 * </pre>
 * Methods named {@code …Locked} run under the pool lock; {@link #onBecameFree} and {@link #popOwnerCache}
 * run on any thread without it. Counts: {@link #allocations()} and {@link #evictions()} are readable at any
 * time. Reservations are not this class's business: callers check them before taking a page.
 */
final class PageAllocator {

    private static final System.Logger LOG = System.getLogger("io.kvpool");
    private static final VarHandle COUNT = MethodHandles.arrayElementVarHandle(long[].class);
    private static final int ALLOCATIONS = 0;
    private static final int EVICTIONS = 1;

    private final SlotTable slots;
    private final PageStorage storage;
    private final FillMode fillMode;
    private final PrefixCache prefix;
    private final FreePages freePages;
    private final ReturnStack returned;
    private final AllocatorCache cache;
    private final AllocatorLock lock;
    private final IntConsumer takeReturned = this::takeReturned;
    /** Per slot: its fill when it was freed failed, so it must be filled before it is handed out again. */
    private final boolean[] unfilled;
    /** Slots evicted (or unfilled) by the current critical section, to fill once it ends. */
    private int[] toFill = new int[8];
    private int toFillCount;
    /** FREE pages that hold a published prefix, counted when freed (not when the lock takes them in). */
    private final java.util.concurrent.atomic.LongAdder cachedFree = new java.util.concurrent.atomic.LongAdder();
    /** Written under the lock, read by anyone (opaque): allocations served by the lock, evictions. */
    private final long[] counts = new long[2];

    PageAllocator(SlotTable slots, PageStorage storage, FillMode fillMode, PrefixCache prefix, int cachePages, AllocatorLock lock) {
        final int capacity = slots.capacity();
        this.slots = slots;
        this.storage = storage;
        this.fillMode = fillMode;
        this.prefix = prefix;
        this.lock = lock;
        this.freePages = new FreePages(capacity);
        this.returned = new ReturnStack(capacity);
        this.cache = new AllocatorCache(Math.min(cachePages, capacity));
        this.unfilled = new boolean[capacity];
        for (int s = capacity - 1; s >= 0; s--) {
            freePages.pushPlain(s); // slot 0 on top
        }
    }

    FreePages freePages() {
        return freePages;
    }

    AllocatorCache cache() {
        return cache;
    }

    /** @return slots that left FREE so far (fresh allocations and revivals); any thread, exact at quiescence */
    long allocations() {
        return (long) COUNT.getOpaque(counts, ALLOCATIONS) + cache.allocations();
    }

    /**
     * @return FREE pages in every free structure (plain stack, LRU, return stack, allocator cache); any thread,
     *         without the lock (racy reads of single-writer counts), exact at quiescence
     */
    long freeNow() {
        return freePages.sizeRacy() + (long) returned.sizeVolatile() + cache.sizeRacy();
    }

    /** @return FREE pages that still hold a published prefix; any thread, exact at quiescence */
    long cachedFree() {
        return cachedFree.sum();
    }

    /** @return cached prefix pages evicted so far; any thread */
    long evictions() {
        return (long) COUNT.getOpaque(counts, EVICTIONS);
    }

    private void count(int which) {
        COUNT.setRelease(counts, which, (long) COUNT.get(counts, which) + 1);
    }

    /** Under the lock: counts a revival of a cached page (see {@link PrefixSharing}). */
    void countRevivalLocked() {
        count(ALLOCATIONS);
    }

    // ---- the owner's fast path (no lock) ----

    /**
     * The allocator thread's own freed pages, with no lock and no reservation check (admission never counted
     * them).
     *
     * @return an OWNED handle, or -1 when the caller must take the locked path
     */
    long popOwnerCache() {
        if (!cache.isOwner() || cache.flushRequested()) {
            return -1;
        }
        while (true) {
            final int slot = cache.pop();
            if (slot < 0) {
                return -1;
            }
            final long word = slots.allocate(slot);
            if (word < 0) {
                throw new IllegalStateException("internal: the allocator cache held slot " + slot + " in state "
                    + SlotStateMachine.describe(slots.wordVolatile(slot)));
            }
            if (SlotStateMachine.phase(word) == SlotStateMachine.OWNED) {
                cache.countAllocation();
                return slots.handle(slot, SlotStateMachine.generation(word));
            }
            // RETIRED at allocation (reachable only through a test hook): try the next one
        }
    }

    // ---- freeing (any thread) ----

    /**
     * A transition just made {@code slot} FREE: fill it and put it where the allocator finds it.
     *
     * @param closed whether the pool is closed (nothing will allocate again: no fill, but the page is counted)
     */
    void onBecameFree(int slot, boolean closed) {
        final boolean toStack;
        try {
            toStack = prepareFree(slot, closed);
        } catch (Error e) {
            if (isUnfilled(slot)) { // the fill's Error: the page, marked unfilled, still reaches the return stack
                returned.push(slot);
            } // else it came before the fill, or after the page reached the cache: pushing could hand out dirty bytes
            throw e;
        }
        if (toStack) {
            returned.push(slot);
            afterReturned(closed);
        }
    }

    /**
     * {@link #onBecameFree} for a run of pages (a sequence's truncate or close): fills {@code slot} and keeps it in
     * the owner's cache when it can; otherwise the caller adds it to a run ({@link #linkRun}) it hands to
     * {@link #returnRun}.
     *
     * @return whether the page must still go to the return stack
     * @throws Error an Error of the fill other than InternalError, after the page was marked unfilled: the caller
     *               puts it on the return stack (it is filled before it is handed out again), then rethrows; an Error
     *               from elsewhere ({@link #isUnfilled} false) leaves the page out of every structure
     */
    boolean prepareFree(int slot, boolean closed) {
        // The last releaser's CAS is ordered after every earlier CAS on this word, including the publisher's
        // own release, so a page's "published" mark set under the lock while it was owned is visible here.
        final boolean published = prefix.isPublished(slot);
        if (published) {
            cachedFree.increment(); // it leaves that count only through the LRU: revived or evicted, under the lock
        }
        if (closed) {
            return true;
        }
        if (fillMode != FillMode.NONE && !published) {
            try {
                storage.fill(slot, fillMode);
            } catch (RuntimeException | InternalError e) {
                // The release took effect (its CAS): the page is FREE and must reach a free structure, or it is
                // lost for good; but it still holds its last tenant's bytes, so it is filled again before its
                // next handle escapes (as an evicted page is), where a second failure is the allocator's to throw.
                // InternalError is how the JVM reports a fault in mapped memory (a file truncated under its
                // mapping); other Errors go on to the caller (below).
                unfilled[slot] = true; // plain: published to the allocator by the push (a release CAS)
                try {
                    LOG.log(System.Logger.Level.WARNING, "kvpool: filling freed slot " + slot + " failed (" + e
                        + "); it will be filled again before it is handed out", e);
                } catch (RuntimeException logging) {
                    // the page must still be pushed: a warning is not worth losing it
                }
            } catch (Error e) { // no memory, no stack: the caller's to see, but the page is not lost for it
                unfilled[slot] = true;
                throw e;
            }
        }
        // an unfilled page never enters the allocator cache: its lock-free fast path hands pages out as they are
        return published || unfilled[slot] || !cache.isOwner() || !cache.push(slot);
    }

    /**
     * @return whether the slot's fill at free failed, so it is filled before it is handed out again: after an Error of
     *         {@link #prepareFree}, whether that Error came from the fill (the page must still reach the return stack)
     */
    boolean isUnfilled(int slot) {
        return unfilled[slot];
    }

    /**
     * Adds {@code slot}, which {@link #prepareFree} left for the return stack, to the top of a run of the caller's:
     * linked through the return stack itself (see {@link ReturnStack#link}), so a run needs no scratch array.
     */
    void linkRun(int top, int slot) {
        returned.link(top, slot);
    }

    /** Puts a run of {@code n} pages linked by {@link #linkRun}, from {@code bottom} up to {@code top}, on the return stack with one CAS. */
    void returnRun(int bottom, int top, int n, boolean closed) {
        if (n > 0) {
            returned.pushRun(bottom, top, n);
            afterReturned(closed);
        }
    }

    /** An owner asked for its cached pages hands them back now, if the lock is free (never waits, never re-enters). */
    private void afterReturned(boolean closed) {
        if (!closed && cache.isOwner() && cache.flushRequested() && lock.tryLock()) {
            try {
                cache.flush(takeReturned);
            } finally {
                lock.unlock();
            }
        }
    }

    // ---- under the lock ----

    /** Binds the cache to the calling thread if it has no owner, and moves its pages back if the owner asked. */
    void bindCacheLocked() {
        cache.bindIfUnowned();
    }

    /** The owner's (or a dead owner's) cached pages back into the free structures. @return pages moved */
    int flushCacheLocked() {
        return cache.flush(takeReturned);
    }

    /**
     * Every page freed since the last call into the free structures: the return stack, and the allocator
     * cache when the caller owns it (or its owner has died).
     *
     * @return pages moved
     */
    int drainReturnedLocked() {
        return returned.drain(takeReturned) + cache.flush(takeReturned);
    }

    /**
     * Drains the return stack only when the allocator needs it (the plain stack is empty) or the cache's owner was
     * asked for its pages: the free count already includes the return stack, and a drain costs an atomic swap.
     */
    void drainIfNeededLocked() {
        if (freePages.size() == 0 || cache.flushRequested()) {
            drainReturnedLocked();
        }
    }

    /**
     * A thread that came up short takes back what the allocator cache holds: the caller's own cache, a dead
     * owner's, or a live owner's that is idle (see {@link AllocatorCache}). A busy owner is asked to hand it back.
     *
     * @return pages moved
     */
    int reclaimLocked() {
        final int n = drainReturnedLocked();
        return n + cache.takeFromIdleOwner(takeReturned);
    }

    /** @return FREE pages in the free structures (not the allocator cache) */
    long freeLocked() {
        return freePages.size() + (long) returned.sizeVolatile();
    }

    /** @return the handle of a freshly allocated page (OWNED, refcount 1), or -1 if no page is left */
    long takeFreePageLocked() {
        return takeFreePageLocked(false, slots.counts().now);
    }

    /**
     * @param pinned whether the page starts pinned for its writer (RECEIVING(1), see
     *               {@link SlotTable#allocate(int, boolean, PageCounts.Sink)})
     * @param sink   where its phase move is counted: the lock holder's delta, or {@link PageCounts#now}
     * @return the handle of a freshly allocated page (OWNED(1), or RECEIVING(1) if pinned), or -1 if no page is left
     */
    long takeFreePageLocked(boolean pinned, PageCounts.Sink sink) {
        while (true) {
            // room for this page in the fill list first: once a slot is popped nothing may throw before it is allocated
            if (toFillCount == toFill.length) {
                toFill = Arrays.copyOf(toFill, toFillCount * 2);
            }
            int slot = freePages.popPlain();
            boolean fill = false;
            if (slot < 0) {
                if (drainReturnedLocked() > 0) {
                    continue;
                }
                slot = freePages.evictLru();
                if (slot < 0) {
                    return -1;
                }
                cachedFree.decrement();
                prefix.unpublish(slot);
                count(EVICTIONS);
                fill = fillMode != FillMode.NONE; // filled by the caller after the lock is released, before the handle escapes
            }
            fill |= unfilled[slot]; // its fill at free failed: filled like an evicted page, before the handle escapes
            final long word = slots.allocate(slot, pinned, sink);
            if (word < 0) {
                // not ours (an allocator bug, a corrupt word): never queue it for a fill, which could overwrite a page in use
                throw new IllegalStateException("internal: free list held slot " + slot + " in state "
                    + SlotStateMachine.describe(slots.wordVolatile(slot)));
            }
            if (fill) {
                unfilled[slot] = false;
                toFill[toFillCount++] = slot; // room made above
            }
            if (SlotStateMachine.phase(word) == SlotStateMachine.RETIRED) {
                continue;
            }
            count(ALLOCATIONS);
            return slots.handle(slot, SlotStateMachine.generation(word));
        }
    }

    /** @return the slots this critical section must fill once it has unlocked (a copy), or null if none */
    int[] takeToFillLocked() {
        if (toFillCount == 0) {
            return null;
        }
        final int[] out = Arrays.copyOf(toFill, toFillCount);
        toFillCount = 0;
        return out;
    }

    /** Forgets the pending fills of pages that are about to be released again (their free path fills them). */
    void clearToFillLocked() {
        toFillCount = 0;
    }

    /**
     * Fills pages just evicted from the prefix cache, outside the lock (a 2 MiB fill must not stall the
     * transfer threads that take it): they belong to the caller's new tenancy (OWNED, or RECEIVING if
     * allocated pinned), whose handles have not escaped yet, so nobody else can touch them.
     */
    void fill(int[] slotsToFill) {
        if (slotsToFill != null) {
            for (int slot : slotsToFill) {
                storage.fill(slot, fillMode);
            }
        }
    }

    /** Takes a cached prefix page out of the LRU for a revival. @return whether it was there */
    boolean removeCachedLocked(int slot) {
        if (!freePages.isCached(slot)) {
            return false;
        }
        freePages.removeCached(slot);
        cachedFree.decrement();
        return true;
    }

    private void takeReturned(int slot) {
        if (prefix.isPublished(slot)) {
            freePages.pushCached(slot);
        } else {
            freePages.pushPlain(slot);
        }
    }
}
