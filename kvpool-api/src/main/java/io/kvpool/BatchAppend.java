package io.kvpool;

import java.util.Objects;
import java.util.concurrent.atomic.AtomicLong;

/**
 * One decode step over a batch of sequences ({@link KvPool#appendEach}): every sequence grows by the same
 * number of tokens, and the pages the step needs are allocated under one acquisition of the pool lock.
 *
 * <pre>
 *   1. plan      each sequence checks the append and decides its pages (Sequence#planAppend):
 *                no lock, nothing changed; a sequence twice in the batch, or of another pool, is refused here;
 *                the last of several batch members sharing a partial page writes it in place (othersCopyFirst)
 *   2. allocate  every planned page under one lock acquisition, each sequence's reservation first
 *                (PoolAllocations#tryAllocateEach): all pages, or none and "pages short"
 *   3. copy      the copy-on-write pages; a copy that fails gives every page back (PoolAllocations#undoEach)
 *   4. apply     block tables and token counts (Sequence#applyAppend): cannot fail
 * </pre>
 * A step in which no sequence needs a page (15 of 16 decode steps at 16 tokens a page) takes no lock at all.
 * Threads: the caller must own every sequence of the batch (see {@link Sequence}); different threads may run
 * steps over disjoint batches at once.
 */
final class BatchAppend {

    /** A number per call, so that a sequence planned twice by one call is recognized (it is never reused). */
    private static final AtomicLong CALLS = new AtomicLong();

    private BatchAppend() {
    }

    /** See {@link KvPool#appendEach}. */
    static int appendEach(KvPool pool, Sequence[] batch, int count, int tokens) {
        Objects.checkFromIndexSize(0, count, batch.length);
        if (tokens < 0) {
            throw new IllegalArgumentException("tokens must be ≥ 0, was " + tokens);
        }
        final long call = CALLS.incrementAndGet();
        int total = 0;
        long beyond = 0;
        boolean copies = false;
        for (int i = 0; i < count; i++) {
            final Sequence seq = batch[i];
            if (seq == null || seq.pool() != pool) {
                throw new IllegalArgumentException("batch[" + i + "] is " + (seq == null ? "null" : "a sequence of another pool (" + seq.pool() + ")"));
            }
            if (seq.stepMark == call) {
                throw new IllegalArgumentException("batch[" + i + "] appears earlier in the batch too: each sequence may be in a batch once");
            }
            seq.stepMark = call;
            int pages = seq.planAppend(tokens);
            if (seq.stepCow && othersCopyFirst(pool, batch, i)) {
                pages = seq.planInPlace();
            }
            if (pages > 0) {
                total += pages;
                beyond += Math.max(0, pages - seq.reservedPages);
                copies |= seq.stepCow;
            }
        }
        if (total > 0) {
            final long got = pool.allocations().tryAllocateEach(batch, count, total, beyond);
            if (got < 0) {
                return (int) Math.max(Integer.MIN_VALUE, got);
            }
            if (copies) {
                copy(pool, batch, count);
            }
        }
        for (int i = 0; i < count; i++) {
            final Sequence seq = batch[i];
            seq.applyAppend(tokens, seq.stepPages);
        }
        return total;
    }

    /**
     * Whether {@code batch[i]}, about to copy its shared partial last page, is its last holder once the sequences
     * before it in the batch that share it have copied it: appending to each in turn, it would find itself the
     * only holder and write in place, and so it does here (a beam-search step copies n - 1 pages, not n).
     */
    private static boolean othersCopyFirst(KvPool pool, Sequence[] batch, int i) {
        final int slot = batch[i].lastPageIndex();
        final int refcount = pool.allocations().refcountUnlessPublished(slot);
        if (refcount <= 1) {
            return false; // published (it stays shared), or an unshared page that the plan copies anyway
        }
        int copiedBefore = 0;
        for (int j = 0; j < i; j++) {
            if (batch[j].stepCow && batch[j].lastPageIndex() == slot) {
                copiedBefore++;
            }
        }
        return copiedBefore + 1 == refcount;
    }

    private static void copy(KvPool pool, Sequence[] batch, int count) {
        try {
            for (int i = 0; i < count; i++) {
                final Sequence seq = batch[i];
                if (seq.stepCow) {
                    seq.copyLastPageInto(seq.allocated[0]);
                }
            }
        } catch (RuntimeException e) {
            pool.allocations().undoEach(batch, count); // all or nothing
            throw e;
        }
    }
}
