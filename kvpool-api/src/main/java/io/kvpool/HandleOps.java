package io.kvpool;

import io.kvpool.spi.TransportHandles;
import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.atomic.LongAdder;

/**
 * Applies events to the pages handles name: the one path from a handle to a state change, with the refusals
 * turned into exceptions that carry the numbers, and the stale and foreign handles counted.
 *
 * <pre>
 *   handle ──SlotTable.apply (one CAS; pool id and generation checked)──► new state word, or a refusal code
 *     → FREE:     PageAllocator.onBecameFree (fill, return stack / allocator cache)
 *     → RETIRED:  out of the prefix index (pool lock)
 *     after close: an unpin counts down StorageLifetime
 *   PIN_WRITER takes the pool lock: no publication slips between its "not published" check and the pin
 *   RETAIN:     after its CAS, the retain epoch moves on (Sequence skips its copy-on-write check while it stands)
 * </pre>
 * Lock-free and thread-safe except PIN_WRITER (pool lock, briefly) and the retirement of a published page.
 */
final class HandleOps {

    private final KvPool pool;
    private final SlotTable slots;
    private final PageAllocator allocator;
    private final PrefixSharing prefix;
    private final StorageLifetime lifetime;
    private final AllocatorLock lock;
    private final int capacity;
    private final int poolId;
    private final LongAdder staleRefused = new LongAdder();
    private final LongAdder foreignRefused = new LongAdder();
    /** Successful RETAINs so far, each counted after its CAS (see {@link #retainEpoch()}). */
    private final AtomicLong retains = new AtomicLong();
    private final TransportHandles transportView = new Handles();

    HandleOps(KvPool pool, SlotTable slots, PageAllocator allocator, PrefixSharing prefix, StorageLifetime lifetime,
              AllocatorLock lock) {
        this.pool = pool;
        this.slots = slots;
        this.allocator = allocator;
        this.prefix = prefix;
        this.lifetime = lifetime;
        this.lock = lock;
        this.capacity = slots.capacity();
        this.poolId = pool.poolId();
    }

    /** @return the transports' view of these operations */
    TransportHandles transportView() {
        return transportView;
    }

    /**
     * A number that moves on after every RETAIN's CAS (volatile read). A thread that reads it, then finds a page's
     * refcount at 1, and later reads the same number, knows that no RETAIN took effect since its first read: the
     * page is still unshared (the only other ways to share an OWNED page, publication and prefix attach, apply to
     * full pages). {@link Sequence} uses this to skip reading its partial last page's state word on every append.
     *
     * @return the number of RETAINs so far
     */
    long retainEpoch() {
        return retains.get();
    }

    /** @return operations refused for a stale or invalid handle */
    long staleRefused() {
        return staleRefused.sum();
    }

    /** @return operations refused for a handle of another pool */
    long foreignRefused() {
        return foreignRefused.sum();
    }

    /**
     * Checks a handle without throwing or allocating.
     *
     * @return the slot index, or a negative {@link PageHandle} result code (stale, invalid and foreign ones counted)
     */
    long validate(long handle) {
        final long v = slots.validate(handle);
        countRefusal(v);
        return v;
    }

    /** @return the slot of a current, accessible page, or throws the refusal {@link #validate} describes */
    int accessibleSlot(long handle) {
        final long v = validate(handle);
        if (v < 0) {
            throw refusal(handle, v, null);
        }
        return (int) v;
    }

    /**
     * Applies an event to the page a handle names, without throwing or allocating. Internal: applications
     * use {@link KvPool#retain}/{@link KvPool#release}, transports {@link KvPool#handles()}.
     *
     * @return the slot's new state word (≥ 0), or a negative {@link PageHandle} result code (stale, invalid and
     *         foreign handles are counted)
     * @throws IllegalArgumentException for ALLOCATE, which only the allocator issues
     * @throws IllegalStateException    if the pool is closed (after a close that kept the storage for pinned pages,
     *                                  every event but RETAIN and PIN_WRITER is still accepted)
     */
    long tryTransition(long handle, SlotEvent event) {
        if (event == SlotEvent.ALLOCATE) {
            throw new IllegalArgumentException("ALLOCATE is issued by the pool's allocator only");
        }
        if (event == SlotEvent.PIN_WRITER) {
            return tryPinWriter(handle);
        }
        if (pool.isClosed() && (!lifetime.retained() || event == SlotEvent.RETAIN)) {
            throw new IllegalStateException("kvpool is closed");
        }
        final long word = slots.apply(handle, event);
        if (word < 0) {
            countRefusal(word);
            return word;
        }
        if (event == SlotEvent.RETAIN) {
            retains.incrementAndGet(); // after the CAS: see retainEpoch
        }
        afterTransition(handle, event, word);
        return word;
    }

    /** What a successful transition to {@code word} leads to beyond the state word: the free structures, the prefix index, the kept storage. */
    private void afterTransition(long handle, SlotEvent event, long word) {
        afterTransitionInPool(handle, word);
        if (pool.isClosed() && endsPin(event)) {
            lifetime.afterUnpinEvent(word);
        }
    }

    /** The free structures and the prefix index after a successful transition to {@code word}. */
    private void afterTransitionInPool(long handle, long word) {
        final int phase = SlotStateMachine.phase(word);
        if (phase == SlotStateMachine.FREE) {
            allocator.onBecameFree(PageHandle.slot(handle), pool.isClosed());
        } else if (phase == SlotStateMachine.RETIRED) {
            unpublishRetired(PageHandle.slot(handle));
        }
    }

    /**
     * RETAIN of {@code handles[from .. to)}, all or none: on a refusal the pages this call retained are released
     * again and the refusal is thrown. The retain epoch moves on once, after the last CAS.
     *
     * @throws IllegalStateException if the pool is closed
     */
    void retainAll(long[] handles, int from, int to) {
        java.util.Objects.checkFromToIndex(from, to, handles.length);
        if (from == to && pool.isClosed()) { // an empty range reaches no page's check below; refused as any range is
            throw new IllegalStateException("kvpool is closed");
        }
        int i = from;
        long word = 0;
        boolean closed = false;
        for (; i < to; i++) {
            if (pool.isClosed()) { // as RETAIN of one page is refused once the pool is closed
                closed = true;
                break;
            }
            word = slots.apply(handles[i], SlotEvent.RETAIN);
            if (word < 0) {
                break;
            }
        }
        if (i > from) {
            retains.addAndGet(i - from); // after the CASes: see retainEpoch
        }
        if (i < to) {
            // Our own references first, before the refusal is built: building it allocates, and an OutOfMemoryError
            // there must not leave them taken. Dropped even if the pool closed meanwhile (RELEASE of one page would
            // refuse then).
            for (int j = from; j < i; j++) {
                final long released = slots.apply(handles[j], SlotEvent.RELEASE);
                if (released >= 0) {
                    afterTransition(handles[j], SlotEvent.RELEASE, released);
                }
            }
            if (closed) {
                throw new IllegalStateException("kvpool is closed");
            }
            countRefusal(word);
            throw refusal(handles[i], word, SlotEvent.RETAIN);
        }
    }

    /**
     * An event that ends a pin ({@link SlotEvent#COMMIT_RECEIVE} and the like) on {@code handles[from .. to)}: what
     * {@code transition(h, event)} on each would do, the page counts added once. A refusal does not stop it:
     * every other page is moved, then the first refusal is thrown. Nor does an Error of a freed page's fill (the page
     * still reaches the free pages, filled before reuse): it is thrown after the rest, the first refusal suppressed.
     */
    void transitionAll(long[] handles, int from, int to, SlotEvent event) {
        java.util.Objects.checkFromToIndex(from, to, handles.length);
        if (event == SlotEvent.ALLOCATE || event == SlotEvent.PIN_WRITER || event == SlotEvent.RETAIN) {
            throw new IllegalArgumentException(event + " has its own batch operation, or none");
        }
        if (pool.isClosed() && !lifetime.retained()) {
            throw new IllegalStateException("kvpool is closed");
        }
        final PageCounts.Delta delta = new PageCounts.Delta();
        RuntimeException first = null;
        Error error = null;
        int unpinned = 0;
        try {
            for (int i = from; i < to; i++) {
                final long word = slots.apply(handles[i], event, delta);
                if (word < 0) {
                    countRefusal(word);
                    if (first == null) {
                        first = refusal(handles[i], word, event);
                    }
                    continue;
                }
                if (endsPin(event) && !SlotStateMachine.pinned(SlotStateMachine.phase(word))) {
                    unpinned++; // its CAS took effect, whatever follows
                }
                try {
                    afterTransitionInPool(handles[i], word);
                } catch (Error e) { // a freed page's fill: the page reached the stack unfilled (onBecameFree); go on
                    if (error == null) {
                        error = e;
                    }
                }
            }
        } finally {
            slots.counts().add(delta);
            // Only now, after the counts: a close that counted these pages as still pinned set its flag before it
            // read the counts, so this read sees it and counts them down (as the one-page path does after its CAS).
            if (unpinned > 0 && pool.isClosed()) {
                lifetime.afterUnpinEvents(unpinned);
            }
        }
        if (error != null) {
            if (first != null) {
                error.addSuppressed(first);
            }
            throw error;
        }
        if (first != null) {
            throw first;
        }
    }

    /** @return whether the event ends a writer pin, after which a closed pool may release its kept storage */
    private static boolean endsPin(SlotEvent event) {
        return event == SlotEvent.COMMIT_RECEIVE || event == SlotEvent.DRAINED || event == SlotEvent.RELEASE_QUARANTINE;
    }

    /**
     * RELEASE of {@code handles[from .. to)}, last first: what {@code transition(h, RELEASE)} on each would do, except
     * that the pages that become FREE reach the return stack in runs of up to {@value #RELEASE_RUN}, one CAS a run. A
     * refusal does not stop it: every other page is released, then the first refusal is thrown. Nor does an Error of a
     * freed page's fill: that page goes to the return stack unfilled (filled before reuse), and the Error is thrown
     * after the rest. Allocates nothing but a refusal: a run is linked through the return stack, not kept in an array
     * (a sequence's close and truncate allocate nothing, see OomRecoveryTest).
     *
     * @return how many of the pages became FREE and reached a free structure (the return stack or the owner's cache)
     * @throws IllegalStateException if the pool is closed and keeps no pinned pages
     */
    int releaseAll(long[] handles, int from, int to) {
        final boolean closed = pool.isClosed();
        if (closed && !lifetime.retained()) {
            throw new IllegalStateException("kvpool is closed");
        }
        RuntimeException first = null;
        Error error = null;
        int n = 0, bottom = -1, top = -1, freed = 0; // the run: n pages linked from bottom up to top
        try {
            for (int i = to - 1; i >= from; i--) {
                final long handle = handles[i];
                final long word = slots.apply(handle, SlotEvent.RELEASE);
                if (word < 0) {
                    countRefusal(word);
                    if (first == null) {
                        first = refusal(handle, word, SlotEvent.RELEASE);
                    }
                    continue;
                }
                final int slot = PageHandle.slot(handle);
                final int phase = SlotStateMachine.phase(word);
                if (phase == SlotStateMachine.FREE) {
                    boolean toStack;
                    try {
                        toStack = allocator.prepareFree(slot, closed);
                    } catch (Error e) { // the other pages are still released
                        if (error == null) {
                            error = e;
                        }
                        // the fill's Error marked the page unfilled: to the stack, filled before reuse; an Error from
                        // elsewhere (before the fill, or after the page reached the cache) leaves it out, as lost
                        toStack = allocator.isUnfilled(slot);
                        if (!toStack) {
                            freed--; // lost, not free: counted back below
                        }
                    }
                    freed++;
                    if (toStack) {
                        if (n == 0) {
                            bottom = slot;
                        } else {
                            allocator.linkRun(top, slot);
                        }
                        top = slot;
                        if (++n == RELEASE_RUN) {
                            n = 0; // first: the finally below must not push the run again if what follows the push throws
                            allocator.returnRun(bottom, top, RELEASE_RUN, closed);
                        }
                    }
                } else if (phase == SlotStateMachine.RETIRED) {
                    unpublishRetired(slot);
                }
            }
        } finally {
            allocator.returnRun(bottom, top, n, closed); // a FREE page never stays out of the free structures
        }
        if (error != null) {
            if (first != null) {
                error.addSuppressed(first);
            }
            throw error;
        }
        if (first != null) {
            throw first;
        }
        return freed;
    }

    /** Most freed pages {@link #releaseAll} holds out of the free structures before it pushes them, with one CAS. */
    static final int RELEASE_RUN = 64;

    /** A page that just RETIRED leaves the prefix index, if it was there (pool lock): it can never be attached again. */
    private void unpublishRetired(int slot) {
        if (prefix.isPublished(slot)) {
            lock.lock();
            try {
                prefix.unpublishLocked(slot);
            } finally {
                lock.unlock();
            }
        }
    }

    void countRefusal(long code) {
        if (code == PageHandle.STALE || code == PageHandle.INVALID) {
            staleRefused.increment();
        } else if (code == PageHandle.FOREIGN) {
            foreignRefused.increment();
        }
    }

    /** PIN_WRITER under the lock: no publication slips between the "not published" check and the pin, nor a pin past close's count. */
    private long tryPinWriter(long handle) {
        lock.lock();
        try {
            return pinWriterLocked(handle, slots.counts().now);
        } finally {
            lock.unlock();
        }
    }

    /** Most pages pinned under one hold of the lock, so that allocation elsewhere waits no longer than that. */
    private static final int PINS_PER_LOCK = 64;

    /** PIN_WRITER with the lock held, its phase move counted in {@code sink} (the lock's delta, or at once). */
    private long pinWriterLocked(long handle, PageCounts.Sink sink) {
        pool.ensureOpen();
        final long slot = slots.validate(handle);
        if (slot < 0) {
            countRefusal(slot);
            return slot;
        }
        if (prefix.isPublished((int) slot)) {
            return PageHandle.ILLEGAL_STATE;
        }
        final long word = slots.apply(handle, SlotEvent.PIN_WRITER, sink);
        countRefusal(word);
        return word;
    }

    /**
     * Ends the pins of {@code handles[from .. to)}, pages this thread just pinned and gave no writer: RECEIVING →
     * DRAINING → OWNED, nothing to wait for. For the rollback of a pin batch.
     */
    void unpinUnwritten(long[] handles, int from, int to) {
        for (int j = from; j < to; j++) {
            transition(handles[j], SlotEvent.BEGIN_DRAIN);
            transition(handles[j], SlotEvent.DRAINED);
        }
    }

    long transition(long handle, SlotEvent event) {
        final long word = tryTransition(handle, event);
        if (word < 0) {
            throw refusal(handle, word, event);
        }
        return word;
    }

    RuntimeException refusal(long handle, long code, SlotEvent event) {
        final String what = event == null ? "access" : event.toString();
        if (code == PageHandle.INVALID) {
            return new StaleHandleException(handle, StaleHandleException.Refusal.INVALID, what + " refused: " + PageHandle.toString(handle)
                + " is not a page handle of this pool (capacity " + capacity + ")");
        }
        if (code == PageHandle.FOREIGN) {
            return new StaleHandleException(handle, StaleHandleException.Refusal.FOREIGN, what + " refused: " + PageHandle.toString(handle)
                + " was issued by pool " + PageHandle.pool(handle) + ", not by this pool (" + poolId + ")");
        }
        final int slot = PageHandle.slot(handle);
        final long now = slots.wordVolatile(slot);
        if (code == PageHandle.STALE) {
            return new StaleHandleException(handle, StaleHandleException.Refusal.STALE, what + " refused: stale handle " + PageHandle.toString(handle)
                + "; slot " + slot + " is now " + SlotStateMachine.describe(now));
        }
        if (code == PageHandle.REFCOUNT_OVERFLOW) {
            return new IllegalStateException(what + " refused: " + PageHandle.toString(handle) + " already has "
                + SlotStateMachine.MAX_REFCOUNT + " references");
        }
        if (event == SlotEvent.PIN_WRITER && prefix.isPublished(slot)) {
            return new IllegalSlotTransitionException(slot, now, event, "page holds a published prefix and is immutable");
        }
        return new IllegalSlotTransitionException(slot, now, event, null);
    }

    /** The transports' view: see {@link TransportHandles} for the contract. */
    private final class Handles implements TransportHandles {
        @Override
        public void pinWriter(long handle) {
            final long word = tryPinWriter(handle);
            if (word < 0) {
                throw refusal(handle, word, SlotEvent.PIN_WRITER);
            }
        }

        @Override
        public void pinWriters(long[] handles, int from, int to) {
            java.util.Objects.checkFromToIndex(from, to, handles.length);
            int i = from;
            long word = 0;
            final PageCounts.Delta delta = slots.counts().locked; // touched only with the lock held
            try {
                while (i < to && word >= 0) {
                    final int end = Math.min(to, i + PINS_PER_LOCK);
                    lock.lock();
                    try {
                        for (; i < end && (word = pinWriterLocked(handles[i], delta)) >= 0; i++) {
                            // pinned: on to the next
                        }
                    } finally {
                        slots.counts().add(delta); // before the lock goes: close counts the pinned pages under it
                        lock.unlock();
                    }
                }
            } catch (RuntimeException e) { // the pool closed meanwhile
                unpinUnwritten(handles, from, i);
                throw e;
            }
            if (i < to) {
                unpinUnwritten(handles, from, i);
                throw refusal(handles[i], word, SlotEvent.PIN_WRITER);
            }
        }

        @Override
        public void appendPinned(Sequence seq, int tokens) {
            if (seq.pool() != pool) {
                throw new IllegalArgumentException(seq + " belongs to another pool");
            }
            seq.appendPinned(tokens);
        }

        @Override
        public void commitReceiveAll(long[] handles, int from, int to) {
            transitionAll(handles, from, to, SlotEvent.COMMIT_RECEIVE);
        }

        @Override
        public void commitReceive(long handle) {
            transition(handle, SlotEvent.COMMIT_RECEIVE);
        }

        @Override
        public void fillUnwrittenTail(long handle, int fromToken) {
            final int slot = accessibleSlot(handle);
            final SlotState state = slots.stateOf(handle);
            if (state != SlotState.RECEIVING) { // the writer pin keeps every other holder off the page while it is filled
                throw new IllegalStateException("slot " + slot + " is " + state + ", not RECEIVING: only a page pinned for a "
                    + "receive has a tail to fill");
            }
            pool.storage().fillTail(slot, fromToken, pool.fillMode()); // it checks the range; NONE or no tail writes nothing
        }

        @Override
        public void beginDrain(long handle) {
            transition(handle, SlotEvent.BEGIN_DRAIN);
        }

        @Override
        public void drained(long handle) {
            transition(handle, SlotEvent.DRAINED);
        }

        @Override
        public void quarantine(long handle) {
            transition(handle, SlotEvent.QUARANTINE);
        }

        @Override
        public void releaseQuarantine(long handle) {
            transition(handle, SlotEvent.RELEASE_QUARANTINE);
        }
    }
}
