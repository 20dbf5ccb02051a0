package io.kvpool;

/**
 * What the pool lock serializes: admission, pages for sequences (all or nothing, reservation first), loose
 * pages, reservation top-ups and forks, and publication into the prefix cache.
 *
 * <pre>
 *   allocate pages for a batch of      each sequence's from its reservation first, then from free unreserved
 *   sequences (one lock acquisition;   pages (a thread that comes up short takes back an idle owner's cache
 *   a single append is a batch of 1)   first) → every page, or none and a negative "pages short" code
 *   pages evicted from the prefix cache (or whose fill failed at free) are filled after the lock is released,
 *   before their handles escape; a fill that fails undoes the whole allocation
 * </pre>
 * Methods take the pool lock themselves, except {@link #mustCopyBeforeWrite} and the owner's fast path of
 * {@link #tryAllocate}, which need none.
 */
final class PoolAllocations {

    private final KvPool pool;
    private final HandleOps ops;
    private final SlotTable slots;
    private final PageAllocator allocator;
    private final Reservations reservations;
    private final PrefixSharing prefix;
    private final AllocatorLock lock;

    PoolAllocations(KvPool pool, HandleOps ops, SlotTable slots, PageAllocator allocator, Reservations reservations,
                    PrefixSharing prefix, AllocatorLock lock) {
        this.pool = pool;
        this.ops = ops;
        this.slots = slots;
        this.allocator = allocator;
        this.reservations = reservations;
        this.prefix = prefix;
        this.lock = lock;
    }

    /**
     * Allocates the pages planned for the sequences listed from {@code head} through {@code Sequence#stepNext}
     * (each one's {@code stepPages}, into its {@code stepOut()}) under one acquisition of the lock: each
     * sequence's pages come first from its reservation (as far as its plan's {@code stepCoverable} says), the rest from
     * unreserved free pages. All or nothing.
     * Evicted prefix pages are filled after the lock is released, before this returns.
     *
     * @param total  the sum of the planned pages, {@code > 0}
     * @param beyond the sum over the sequences of the planned pages their reservations do not cover
     * @param pinned whether the pages start pinned for a writer, RECEIVING(1), before their handles leave the
     *               allocating thread (one store each, {@link SlotTable#allocate(int, boolean, PageCounts.Sink)}); else OWNED(1)
     * @return {@code total}; or {@code -short} when the pool has {@code short} too few free unreserved pages for
     *         {@code beyond} (nothing is allocated then)
     */
    long tryAllocateEach(Sequence head, int total, long beyond, boolean pinned) {
        final int[] toFill;
        final PageCounts.Delta delta = slots.counts().locked; // RECEIVING counted once, not per page; the lock's own
        lock.lock();
        try {
            pool.ensureOpen();
            allocator.bindCacheLocked();
            allocator.flushCacheLocked(); // the owner's cached pages first (LIFO: cache-hot)
            if (beyond > 0 && beyond > unreservedLocked()) {
                allocator.reclaimLocked();
                final long available = unreservedLocked();
                if (beyond > available) {
                    return -(beyond - Math.max(0, available));
                }
            }
            int fromReservations = 0;
            for (Sequence seq = head; seq != null; seq = seq.stepNext) {
                final int pages = seq.stepPages;
                final long[] out = seq.stepOut();
                final int at = seq.stepOutFrom();
                for (int k = 0; k < pages; k++) {
                    final long handle;
                    try {
                        handle = allocator.takeFreePageLocked(pinned, delta);
                    } catch (RuntimeException | Error e) { // an invariant broke, or no memory: nothing taken may stay out
                        try { // no lambda: with the heap full, the undo must not need an allocation to start
                            releaseTakenLocked(head, seq, k, total, pinned, delta);
                        } catch (Throwable t) {
                            undoFailed(e, t);
                        }
                        throw e;
                    }
                    if (handle < 0) { // only possible when slots retired under us
                        return -releaseTakenLocked(head, seq, k, total, pinned, delta);
                    }
                    out[at + k] = handle;
                }
                final int fromReservation = seq.stepCoverable; // ≤ pages and ≤ its reservation (Sequence#planAppend)
                seq.stepFromReservation = fromReservation;
                seq.reservedPages -= fromReservation;
                fromReservations += fromReservation;
            }
            try {
                toFill = allocator.takeToFillLocked(); // a copy: with the heap full it throws, every page taken
            } catch (RuntimeException | Error e) {
                try {
                    releaseTakenLocked(head, null, 0, total, pinned, delta);
                } catch (Throwable t) {
                    undoFailed(e, t);
                }
                throw e;
            }
            reservations.remove(fromReservations);
        } finally {
            slots.counts().add(delta); // under the lock: close counts the pinned pages under it
            lock.unlock();
        }
        try {
            allocator.fill(toFill);
        } catch (RuntimeException | Error e) { // an Error too: no page may stay out of the free structures
            try { // all or nothing
                undoEach(head, pinned);
            } catch (Throwable t) {
                undoFailed(e, t);
            }
            throw e;
        }
        return total;
    }

    /**
     * What to do with {@code t}, thrown by the undo of a step that failed with {@code failure}: it is added to
     * {@code failure} as suppressed (e.g. the pool closed meanwhile), so that the caller hears of the first failure, not
     * of its undo. A VirtualMachineError of the undo (no memory left, no stack) after an exception is thrown instead,
     * with the exception suppressed: a caller that takes an exception as one request's fault must not go on as if the
     * pool were whole. Callers run the undo itself in their own catch block, with no lambda or method reference: with
     * the heap full, building one fails, and the undo would never start.
     */
    static void undoFailed(Throwable failure, Throwable t) {
        if (t instanceof VirtualMachineError vm && !(failure instanceof Error)) {
            vm.addSuppressed(failure);
            throw vm;
        }
        if (t != failure) { // one shared instance (a storage's, the JVM's preallocated OutOfMemoryError)
            failure.addSuppressed(t);
        }
    }

    /**
     * Under the lock, gives back what {@link #tryAllocateEach} took before it came up short at page {@code k} of
     * {@code failed}: the pages of the sequences before it in the list (and their reservations), and its first
     * {@code k}. With {@code failed} null, every sequence's pages (each took all its pages).
     *
     * @return the pages that were missing, at least 1
     */
    private int releaseTakenLocked(Sequence head, Sequence failed, int k, int total, boolean pinned, PageCounts.Delta delta) {
        allocator.clearToFillLocked(); // released below: the free path fills them
        slots.counts().add(delta); // the pinned pages counted in, before their unpins below count them out
        int taken = k;
        Error error = failed == null ? null : unpinAndReleaseLocked(failed.stepOut(), failed.stepOutFrom(), k, pinned, null);
        for (Sequence seq = head; seq != failed; seq = seq.stepNext) {
            error = unpinAndReleaseLocked(seq.stepOut(), seq.stepOutFrom(), seq.stepPages, pinned, error);
            taken += seq.stepPages;
            seq.reservedPages += seq.stepFromReservation;
        }
        allocator.flushCacheLocked(); // back where admission counts them (the owner may have cached them)
        if (error != null) {
            throw error;
        }
        return Math.max(1, total - taken);
    }

    /**
     * {@link #release}, after ending the pins of pages allocated pinned. Under the lock of an allocation that found the
     * pool open (and close takes the lock), so ending a pin never reaches the kept-storage release, which takes it too.
     */
    private Error unpinAndReleaseLocked(long[] handles, int from, int count, boolean pinned, Error error) {
        if (pinned) {
            ops.unpinUnwritten(handles, from, from + count);
        }
        return release(handles, from, count, error);
    }

    /**
     * Releases the {@code count} fresh pages of {@code handles} from {@code from}, unpinned and unshared: each goes FREE. An Error
     * of a freed page's fill does not stop it (that page still reaches the free pages, to be filled before reuse): the
     * undo's bookkeeping must still run, so the Error is handed back for the caller to throw after it.
     *
     * @param error the first Error of the undo so far, or {@code null}
     * @return {@code error}, or else the first Error of these releases, or {@code null}
     */
    private Error release(long[] handles, int from, int count, Error error) {
        for (int j = from; j < from + count; j++) {
            try {
                ops.tryTransition(handles[j], SlotEvent.RELEASE);
            } catch (Error e) {
                if (error == null) {
                    error = e;
                }
            }
        }
        return error;
    }

    /**
     * Undoes a {@link #tryAllocateEach} whose pages were never used: they go back free, and their reservations to
     * the sequences.
     *
     * @param pinned whether the pages were allocated pinned: their pins end first, before the lock is taken (the
     *               pool may have closed since the allocation, and the last pin to end then releases the kept storage,
     *               which takes the lock)
     * @throws IllegalStateException if the pool closed meanwhile and kept no storage (nothing is left pinned then)
     * @throws Error                  of a freed page's fill, once every page and reservation is back
     */
    void undoEach(Sequence head, boolean pinned) {
        if (pinned) {
            for (Sequence seq = head; seq != null; seq = seq.stepNext) {
                ops.unpinUnwritten(seq.stepOut(), seq.stepOutFrom(), seq.stepOutFrom() + seq.stepPages); // no writer was given them: nothing to wait for
            }
        }
        Error error = null;
        lock.lock();
        try {
            int fromReservations = 0;
            for (Sequence seq = head; seq != null; seq = seq.stepNext) {
                error = release(seq.stepOut(), seq.stepOutFrom(), seq.stepPages, error);
                seq.reservedPages += seq.stepFromReservation;
                fromReservations += seq.stepFromReservation;
            }
            allocator.flushCacheLocked(); // back where admission counts them before the reservations are re-taken
            allocator.drainReturnedLocked();
            reservations.add(fromReservations);
        } finally {
            lock.unlock();
        }
        if (error != null) {
            throw error;
        }
    }

    /**
     * Allocates one page outside any sequence (e.g. a staging buffer), from the free pages that no
     * admitted request has reserved. The caller owns the returned reference and frees it with
     * {@link KvPool#release}. Allocation-free, unless it evicts a cached prefix page.
     *
     * @return the handle of an OWNED page with refcount 1, or {@link PageHandle#EXHAUSTED}
     * @throws IllegalStateException if the pool is closed (a call racing with {@link KvPool#close()} on the
     *                               allocator thread may still return a handle; every use of it throws)
     */
    long tryAllocate() {
        if (!pool.isClosed()) {
            final long fast = allocator.popOwnerCache();
            if (fast >= 0) {
                return fast;
            }
        }
        final long handle;
        final int[] toFill;
        lock.lock();
        try {
            pool.ensureOpen();
            allocator.bindCacheLocked();
            allocator.drainIfNeededLocked();
            if (unreservedLocked() < 1) {
                allocator.reclaimLocked();
                if (unreservedLocked() < 1) {
                    return PageHandle.EXHAUSTED;
                }
            }
            handle = allocator.takeFreePageLocked();
            try {
                toFill = allocator.takeToFillLocked(); // a copy: with the heap full it throws, the page taken
            } catch (RuntimeException | Error e) {
                allocator.clearToFillLocked(); // the free path fills it
                if (handle >= 0) {
                    try {
                        ops.tryTransition(handle, SlotEvent.RELEASE);
                    } catch (Throwable t) {
                        undoFailed(e, t);
                    }
                }
                throw e;
            }
        } finally {
            lock.unlock();
        }
        if (handle < 0) {
            return PageHandle.EXHAUSTED;
        }
        try {
            allocator.fill(toFill);
        } catch (RuntimeException | Error e) {
            try {
                ops.tryTransition(handle, SlotEvent.RELEASE); // back free (filled again before reuse)
            } catch (Throwable t) {
                undoFailed(e, t);
            }
            throw e;
        }
        return handle;
    }

    /**
     * Hands the calling thread's allocator cache (see {@link KvPoolBuilder#threadCache}) back to the free pages,
     * where every thread's admission sees them. Other threads take an idle owner's pages themselves when
     * they come up short; calling this before the allocator thread goes idle saves them that step.
     * Does nothing on other threads or without a cache.
     *
     * @throws IllegalStateException if the pool is closed
     */
    void flushAllocatorCache() {
        lock.lock();
        try {
            pool.ensureOpen();
            allocator.flushCacheLocked();
        } finally {
            lock.unlock();
        }
    }

    /**
     * Adds {@code pages} to a sequence's reservation before it frees at least as many pages only it holds
     * ({@link Sequence#truncate}), so that no admission takes them between their release and the top-up. Until they
     * are free the pool's unreserved count may read below zero, and admission refuses: they are spoken for.
     * {@link #topUpReservation} gives back what no freed page backs.
     */
    void reserveAhead(Sequence seq, int pages) {
        lock.lock();
        try {
            pool.ensureOpen();
            reservations.add(pages);
            seq.reservedPages += pages;
        } finally {
            lock.unlock();
        }
    }

    /**
     * Settles a {@link #reserveAhead} of {@code ahead} pages, giving back the {@code unbacked} ones no freed page
     * backs (all of them if the pool closed meanwhile), then tries to add up to {@code pages} to the sequence's
     * reservation from free unreserved pages.
     *
     * @return pages added
     * @throws IllegalStateException if the pool is closed (after giving the ahead reservation back)
     */
    int topUpReservation(Sequence seq, int ahead, int unbacked, int pages) {
        lock.lock();
        try {
            final int back = pool.isClosed() ? ahead : unbacked; // a closed pool keeps no reservation of ours
            reservations.remove(back);
            seq.reservedPages -= back;
            pool.ensureOpen();
            allocator.drainReturnedLocked();
            if (pages > unreservedLocked()) {
                allocator.reclaimLocked();
            }
            final int add = (int) Math.max(0, Math.min(pages, unreservedLocked()));
            reservations.add(add);
            seq.reservedPages += add;
            return add;
        } finally {
            lock.unlock();
        }
    }

    /** {@link #tryReserveForFork}'s answer for a fork no wait can reserve while its parent holds what it holds. */
    static final long FORK_NEVER_FITS = Long.MIN_VALUE;

    /**
     * Reserves pages for a fork: {@code forParent} more for the parent and {@code forChild} for the child.
     *
     * @return {@code forParent}; or, nothing changed, {@code -1 - available} if the pool cannot reserve them now, and
     *         {@link #FORK_NEVER_FITS} if it could not even with every page the parent neither holds nor has reserved free
     */
    long tryReserveForFork(Sequence parent, int forParent, int forChild) {
        lock.lock();
        try {
            pool.ensureOpen();
            allocator.drainReturnedLocked();
            if (forParent + forChild > unreservedLocked()) {
                allocator.reclaimLocked();
                final long available = unreservedLocked();
                if (forParent + forChild > available) {
                    return forParent + forChild > pagesEverFreeBeside(parent) ? FORK_NEVER_FITS : -1 - Math.max(0, available);
                }
            }
            reservations.add(forParent + forChild);
            parent.reservedPages += forParent;
            reservations.sequenceOpened();
            return forParent;
        } finally {
            lock.unlock();
        }
    }

    /**
     * Undoes a {@link #tryReserveForFork} whose child was never made: the parent's {@code parentAdded} pages, the
     * child's {@code childPages} and its open-sequence count.
     */
    void undoFork(Sequence parent, int parentAdded, int childPages) {
        lock.lock();
        try {
            final int n = Math.min(parentAdded, parent.reservedPages);
            parent.reservedPages -= n;
            reservations.remove(n + childPages);
            reservations.sequenceClosed();
        } finally {
            lock.unlock();
        }
    }

    /** Returns a closing sequence's unused reservation. */
    void sequenceClosed(Sequence seq) {
        lock.lock();
        try {
            reservations.remove(seq.reservedPages);
            seq.reservedPages = 0;
            reservations.sequenceClosed();
        } finally {
            lock.unlock();
        }
    }

    long unreservedLocked() {
        return allocator.freeLocked() - reservations.reserved();
    }

    /**
     * Publishes a sequence's full pages {@code [from, to)}; see {@link Sequence#publish}. Each page is marked
     * while this call holds a reference of its own to it (taken under the lock, dropped after it): a release
     * racing the publication, even a stray one, can then never free a page between its check and its mark.
     * The references are dropped outside the lock: a last release there may retire the slot, which takes it.
     *
     * @throws IllegalSlotTransitionException if a page is not OWNED (e.g. a peer still writes it); nothing is published
     * @throws StaleHandleException           if a page was freed under the sequence; nothing is published
     * @throws IllegalStateException          if a page already holds the most references a page can; nothing is published
     */
    void publish(Sequence seq, int[] tokenIds, int from, int to, long salt) {
        final long[] held = new long[to - from];
        int holding = 0;
        try {
            lock.lock();
            try {
                pool.ensureOpen();
                for (int i = from; i < to; i++) {
                    final long handle = seq.pageHandle(i);
                    final long word = slots.apply(handle, SlotEvent.RETAIN);
                    if (word >= 0) {
                        held[holding++] = handle;
                    }
                    if (word < 0 && word != PageHandle.ILLEGAL_STATE) { // stale, or at the most references: as RETAIN says it
                        ops.countRefusal(word);
                        throw ops.refusal(handle, word, SlotEvent.RETAIN);
                    }
                    if (word < 0 || SlotStateMachine.phase(word) != SlotStateMachine.OWNED) {
                        throw new IllegalSlotTransitionException(PageHandle.slot(handle), slots.wordVolatile(PageHandle.slot(handle)),
                            null, "only OWNED pages can be published (page " + i + " of the sequence)");
                    }
                }
                prefix.publishLocked(seq, held, tokenIds, from, to, salt);
            } finally {
                lock.unlock();
            }
        } finally {
            for (int i = 0; i < holding; i++) {
                ops.tryTransition(held[i], SlotEvent.RELEASE);
            }
        }
    }

    /** @return the RETAINs so far (see {@link HandleOps#retainEpoch()}) */
    long retainEpoch() {
        return ops.retainEpoch();
    }

    /** @return whether a page the caller holds must be copied before it writes it (see {@link PrefixSharing}) */
    boolean mustCopyBeforeWrite(int slot) {
        return prefix.mustCopyBeforeWrite(slot);
    }

    /** @return the page's refcount, or -1 if it holds a published prefix (shared with the cache for good); no lock */
    int refcountUnlessPublished(int slot) {
        return prefix.refcountUnlessPublished(slot);
    }

    /** Truncate into a published page only the caller holds: the page leaves the prefix cache. */
    void unpublishIfSole(int slot) {
        lock.lock();
        try {
            prefix.unpublishIfSoleLocked(slot);
        } finally {
            lock.unlock();
        }
    }

    // ---- admission ----

    Admission admit(int prompt, int maxNewTokens, int[] promptTokenIds, long cacheSalt) {
        checkRequest(prompt, maxNewTokens);
        final Sequence[] made = new Sequence[1];
        try {
            return admit(prompt, maxNewTokens, promptTokenIds, cacheSalt, made);
        } catch (RuntimeException | Error e) {
            // the sequence was made, and then the attach (or what follows) failed: it holds the reservation and the
            // pages attached so far, and nobody else will close it; after the lock, as every close
            if (made[0] != null) {
                try {
                    made[0].close();
                } catch (Throwable t) {
                    undoFailed(e, t);
                }
            }
            throw e;
        }
    }

    /** {@link #admit(int, int, int[], long)} under the lock; leaves the sequence it made in {@code made[0]}. */
    private Admission admit(int prompt, int maxNewTokens, int[] promptTokenIds, long cacheSalt, Sequence[] made) {
        lock.lock();
        try {
            final Reservations.Grant g = decideLocked(prompt, maxNewTokens);
            Sequence seq = null;
            if (g.admitted()) {
                seq = newSequenceLocked((int) g.code(), g.admittedTokens(), cacheSalt, promptTokenIds != null);
                made[0] = seq;
                if (promptTokenIds != null) {
                    seq.setTokenCountAfterAttach(prefix.attachLocked(seq, promptTokenIds, cacheSalt) * pool.layout().tokensPerPage());
                }
            }
            final Admission.Decision d = g.admitted() ? Admission.Decision.ADMITTED : Admission.decisionOf(g.code());
            return new Admission(d, seq, (long) prompt + maxNewTokens, reservations.maxContextTokens(), g.pagesNeeded(), g.pagesAvailable(),
                inService());
        } finally {
            lock.unlock();
        }
    }

    long tryReserve(int promptTokens, int maxNewTokens) {
        checkRequest(promptTokens, maxNewTokens);
        lock.lock();
        try {
            final Reservations.Grant g = decideLocked(promptTokens, maxNewTokens);
            return g.admitted() ? reservations.open(g) : g.code();
        } finally {
            lock.unlock();
        }
    }

    Sequence openSequence(long reservationId) {
        lock.lock();
        try {
            pool.ensureOpen();
            final long[] r = new long[2];
            reservations.take(reservationId, false, r);
            return newSequenceLocked((int) r[0], r[1], 0, false);
        } finally {
            lock.unlock();
        }
    }

    void cancelReservation(long reservationId) {
        lock.lock();
        try {
            pool.ensureOpen();
            reservations.take(reservationId, true, new long[2]);
        } finally {
            lock.unlock();
        }
    }

    private static void checkRequest(int promptTokens, int maxNewTokens) {
        if (promptTokens < 1) {
            throw new IllegalArgumentException("promptTokens must be ≥ 1, was " + promptTokens);
        }
        if (maxNewTokens < 0) {
            throw new IllegalArgumentException("maxNewTokens must be ≥ 0, was " + maxNewTokens);
        }
    }

    /** Decides a request; a thread that comes up short first takes back pages an idle allocator thread holds. */
    private Reservations.Grant decideLocked(int promptTokens, int maxNewTokens) {
        pool.ensureOpen();
        allocator.drainReturnedLocked();
        if (reservations.wouldWait(promptTokens, maxNewTokens, allocator.freeLocked())) {
            allocator.reclaimLocked();
        }
        return reservations.decide(promptTokens, maxNewTokens, allocator.freeLocked(), inService());
    }

    /**
     * @return the most pages that could ever be free beside {@code seq} while it holds and reserves what it does: the
     *         pages in service it neither holds nor has reserved
     */
    long pagesEverFreeBeside(Sequence seq) {
        return inService() - seq.pageCount() - seq.reservedPages;
    }

    /** @return pages in service: the capacity less the retired slots (read without the lock) */
    long inService() {
        return slots.capacity() - slots.counts().retired.sum();
    }

    /**
     * Makes the sequence that {@code reservedPages}, reserved already (a grant, or a spent reservation id), are promised
     * to. If it cannot be made (no memory), the pages go back: nobody else would give them back.
     */
    private Sequence newSequenceLocked(int reservedPages, long admittedTokens, long salt, boolean hasSalt) {
        final Sequence seq;
        try {
            seq = new Sequence(pool, reservedPages, admittedTokens, salt, hasSalt);
        } catch (RuntimeException | Error e) {
            reservations.remove(reservedPages);
            throw e;
        }
        reservations.sequenceOpened(); // after: a sequence that could not be made is not counted open
        return seq;
    }
}
