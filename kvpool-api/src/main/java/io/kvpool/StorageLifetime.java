package io.kvpool;

import io.kvpool.storage.PageStorage;

import java.util.concurrent.atomic.AtomicLong;

/**
 * When a pool's storage may be released. At close, pages still pinned for remote writes (RECEIVING,
 * DRAINING, QUARANTINED) may be written by a peer at any moment, so the storage is kept until the last of
 * them is unpinned; the events that unpin are still accepted after close for that reason.
 *
 * <pre>
 *   open ──close()──► retained (pinnedAfterClose = pages pinned at close) ──last unpin──► released
 *          └─ nothing pinned ─────────────────────────────────────────────────────────► released
 * </pre>
 * {@link #retainedAtClose} runs under the pool lock; {@link #afterUnpinEvent} on any thread.
 */
final class StorageLifetime {

    private final PageStorage storage;
    private final SlotTable slots;
    private final AllocatorLock lock;
    /** Closed, but pages were pinned: storage kept until the last unpin. Written before the pool's closed flag. */
    private volatile boolean retained;
    private final AtomicLong pinnedAfterClose = new AtomicLong();

    StorageLifetime(PageStorage storage, SlotTable slots, AllocatorLock lock) {
        this.storage = storage;
        this.slots = slots;
        this.lock = lock;
    }

    /** @return whether a closed pool still keeps its storage for pinned pages */
    boolean retained() {
        return retained;
    }

    /** Under the lock, before the pool's closed flag is set: an unpin racing the close is accepted from its first moment. */
    void markRetainedLocked() {
        retained = true;
    }

    /**
     * Under the lock, after close counted its pages: adds the pinned count (added, not set: an unpin that raced
     * the count, its slot already read as pinned, may have counted down already, and set() would erase that).
     */
    void retainedAtClose(long pinnedPages) {
        pinnedAfterClose.addAndGet(pinnedPages);
    }

    /**
     * After close, an event that may have unpinned a page counts down the pages that were pinned at close;
     * at zero (or below: a thread racing the close may count a page the count did not, which only makes
     * this run early), an exact scan decides whether the storage can be released. A page counted at close
     * is unpinned by a CAS that follows close's count, so its thread sees the pool closed: the count can
     * run ahead, never behind, and the last unpin always triggers the scan.
     */
    void afterUnpinEvent(long word) {
        if (!SlotStateMachine.pinned(SlotStateMachine.phase(word)) && pinnedAfterClose.decrementAndGet() <= 0) {
            releaseIfUnpinned();
        }
    }

    /**
     * As {@link #afterUnpinEvent} for {@code pages} pages a batch unpinned, called once the batch's page counts are
     * added (so the same argument holds: a page close counted is counted down by a thread that sees the pool closed).
     */
    void afterUnpinEvents(int pages) {
        if (pages > 0 && pinnedAfterClose.addAndGet(-pages) <= 0) {
            releaseIfUnpinned();
        }
    }

    /** @return pages pinned at close not yet counted down (tests) */
    long pinnedAfterClose() {
        return pinnedAfterClose.get();
    }

    /** Releases the storage kept at close once no page is pinned (an exact scan, under the lock). */
    void releaseIfUnpinned() {
        lock.lock();
        try {
            if (!retained) {
                return;
            }
            for (int s = 0; s < slots.capacity(); s++) {
                if (SlotStateMachine.pinned(SlotStateMachine.phase(slots.wordVolatile(s)))) {
                    return;
                }
            }
            retained = false;
            storage.close();
        } finally {
            lock.unlock();
        }
    }
}
