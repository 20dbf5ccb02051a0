package io.kvpool;

/**
 * Sharing pages between sequences through the prefix cache: attaching cached pages at admission,
 * publishing a sequence's full pages, and the copy-on-write rule.
 *
 * <pre>
 *   attach (admission)   for each full prompt page: prefix digest → candidate slot → exact key match?
 *                          OWNED  → RETAIN it; its reserved page goes back (shared, not taken)
 *                          FREE and cached → revive it (ALLOCATE), against the request's reservation
 *   publish              per page: hold a reference, check OWNED (never RECEIVING: a peer still writes it),
 *                        index it under its prefix digest with (digest before it, salt, ids), drop the reference
 *   copy before write    refcount &gt; 1, or published (immutable whoever holds it); decided at each write
 * </pre>
 * Methods named {@code …Locked} run under the pool lock; {@link #mustCopyBeforeWrite} needs none.
 */
final class PrefixSharing {

    private final SlotTable slots;
    private final PrefixCache index;
    private final PageAllocator allocator;
    private final Reservations reservations;
    private final int tokensPerPage;
    private volatile long hits;

    PrefixSharing(SlotTable slots, PrefixCache index, PageAllocator allocator, Reservations reservations, int tokensPerPage) {
        this.slots = slots;
        this.index = index;
        this.allocator = allocator;
        this.reservations = reservations;
        this.tokensPerPage = tokensPerPage;
    }

    /** @return pages attached from the prefix cache so far (any thread) */
    long hits() {
        return hits;
    }

    /** @return pages in the prefix index, free or not (any thread; racy between changes) */
    long published() {
        return index.size();
    }

    /** @return whether the slot holds a published prefix (see {@link PageAllocator#onBecameFree} for when this is safe unlocked) */
    boolean isPublished(int slot) {
        return index.isPublished(slot);
    }

    /**
     * Attaches the longest cached prefix of a prompt to a fresh sequence: at most {@code (prompt − 1) / tokensPerPage}
     * pages, so the last prompt token is always computed.
     *
     * @return pages attached
     */
    int attachLocked(Sequence seq, int[] promptTokenIds, long cacheSalt) {
        if (index.size() == 0) {
            return 0; // nothing to find: no digest to compute
        }
        final int maxPages = (promptTokenIds.length - 1) / tokensPerPage;
        PrefixDigest digest = PrefixDigest.ROOT;
        int matched = 0;
        while (matched < maxPages) {
            final int from = matched * tokensPerPage;
            final PrefixDigest own = index.digest(digest, cacheSalt, promptTokenIds, from);
            final int slot = index.lookup(own, digest, cacheSalt, promptTokenIds, from);
            if (slot < 0 || !attachOneLocked(slot, seq)) {
                break;
            }
            seq.attachedPublished(own);
            digest = own;
            matched++;
        }
        return matched;
    }

    private boolean attachOneLocked(int slot, Sequence seq) {
        seq.ensureRoomForPage(); // before the reference is taken: recording it below must not allocate
        final long word = slots.wordVolatile(slot);
        if (SlotStateMachine.phase(word) == SlotStateMachine.OWNED) {
            final long handle = slots.handle(slot, SlotStateMachine.generation(word));
            if (slots.apply(handle, SlotEvent.RETAIN) >= 0) {
                seq.addPage(handle);
                hits++;
                if (seq.reservedPages > 0) { // shared, not taken from the free pages: return its reservation
                    seq.reservedPages--;
                    reservations.remove(1);
                }
                return true;
            }
        }
        allocator.drainReturnedLocked(); // it may have been freed a moment ago and still be on its way to the LRU
        if (seq.reservedPages == 0 || !allocator.removeCachedLocked(slot)) { // reviving takes a free page: only against the reservation
            return false;
        }
        final long next = slots.allocate(slot);
        if (next < 0) {
            throw new IllegalStateException("internal: cached free slot " + slot + " was not FREE");
        }
        if (SlotStateMachine.phase(next) == SlotStateMachine.RETIRED) {
            index.unpublish(slot);
            return false;
        }
        allocator.countRevivalLocked();
        hits++;
        seq.addPage(slots.handle(slot, SlotStateMachine.generation(next)));
        seq.reservedPages--; // revived from the free pages: it consumes one reserved page
        reservations.remove(1);
        return true;
    }

    /**
     * Publishes a sequence's full pages {@code [from, to)} while the caller holds a reference to each (see
     * {@link KvPool#publish}).
     *
     * @throws IllegalSlotTransitionException if a page is not OWNED
     */
    void publishLocked(Sequence seq, long[] held, int[] tokenIds, int from, int to, long salt) {
        PrefixDigest digest = from == 0 ? PrefixDigest.ROOT : seq.pageDigest(from - 1);
        for (int i = from; i < to; i++) {
            final long handle = held[i - from];
            final PrefixDigest own = index.digest(digest, salt, tokenIds, i * tokensPerPage);
            index.publish(PageHandle.slot(handle), own, digest, salt, tokenIds, i * tokensPerPage);
            seq.setPageDigest(i, own);
            digest = own;
        }
    }

    /**
     * Decides copy-on-write for a page the calling sequence holds and is about to write: copy if anyone
     * else holds it (refcount &gt; 1) or if it holds a published prefix, which is immutable whoever holds it.
     * Decided now, never remembered: a page may be published by another holder after this sequence last
     * looked (a fork's parent publishes and leaves).
     *
     * <p>No lock is needed for the published mark: with refcount 1 only the caller holds the page, so no
     * one can publish or unpublish it concurrently, and every earlier publication by another holder
     * happened before that holder's release, which the volatile read of the state word below observes.
     */
    boolean mustCopyBeforeWrite(int slot) {
        return SlotStateMachine.refcount(slots.wordVolatile(slot)) > 1 || index.isPublished(slot);
    }

    /**
     * @return the page's refcount, or -1 if it holds a published prefix. The state word is read first, as in
     *         {@link #mustCopyBeforeWrite}: a holder that published the page and left did so before its release, which
     *         that volatile read observes, so the published mark read after it is current. Read the other way round,
     *         a publication between the two reads would be missed while its holder's release is seen.
     */
    int refcountUnlessPublished(int slot) {
        final int refcount = SlotStateMachine.refcount(slots.wordVolatile(slot));
        return index.isPublished(slot) ? -1 : refcount;
    }

    /** Truncate into a published page only the caller holds: it leaves the index, so it can be written in place. */
    void unpublishIfSoleLocked(int slot) {
        if (index.isPublished(slot) && SlotStateMachine.refcount(slots.wordVolatile(slot)) == 1) {
            index.unpublish(slot);
        }
    }

    /** A retired page can never be attached again. */
    void unpublishLocked(int slot) {
        index.unpublish(slot);
    }
}
