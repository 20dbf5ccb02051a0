package io.kvpool;

import java.util.Objects;
import java.util.concurrent.atomic.AtomicLong;

/**
 * One decode step over a batch of sequences ({@link KvPool#appendEach}): every sequence grows by the same
 * number of tokens, and the pages the step needs are allocated under one acquisition of the pool lock.
 *
 * <pre>
 *   1. plan      each sequence checks the append and decides its pages (Sequence#planAppend), no lock;
 *                one that needs none counts its tokens at once (undone if the step fails: the only change);
 *                one that needs pages joins a list linked through Sequence#stepNext. A sequence twice in the
 *                batch, or of another pool, is refused here. The last of several batch members sharing a
 *                partial page writes it in place (othersCopyFirst)
 *   2. allocate  every page of the list under one lock acquisition, each sequence's reservation first
 *                (PoolAllocations#tryAllocateEach): all pages, or none and "pages short"
 *   3. copy      the copy-on-write pages; a copy that fails gives every page back (PoolAllocations#undoEach)
 *   4. apply     the list's block tables and token counts (Sequence#applyAppend): cannot fail
 *   5. release   the shared pages the copies replaced, after every sequence is complete: a release that frees
 *                one (its other holder let go meanwhile) fills it, and an Error there must not stop the others
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
        checkTokens(tokens);
        pool.ensureOpen();
        final long maxContext = pool.maxContextTokens();
        final long epoch = pool.allocations().retainEpoch(); // before any state word is read (Sequence#lastPageShared)
        final long call = nextCall();
        Sequence head = null; // the sequences that need pages, linked through Sequence#stepNext
        Sequence tail = null;
        int total = 0;
        long beyond = 0;
        boolean copies = false;
        int i = 0;
        try {
            for (; i < count; i++) {
                final Sequence seq = batch[i];
                final int pages = plan(pool, seq, tokens, maxContext, epoch, call, head, i);
                if (pages == 0) {
                    seq.countTokens(tokens); // its only change: undone below if the step fails
                    continue;
                }
                seq.stepNext = null;
                if (tail == null) {
                    head = seq;
                } else {
                    tail.stepNext = seq;
                }
                tail = seq;
                total += pages;
                beyond += pages - seq.stepCoverable;
                copies |= seq.stepCow;
            }
            final long got = head == null ? 0 : allocateCopyApply(pool, head, total, beyond, copies, tokens);
            if (got < 0) {
                uncount(batch, count, tokens);
                return (int) Math.max(Integer.MIN_VALUE, got);
            }
        } catch (RuntimeException | Error e) {
            uncount(batch, i, tokens);
            throw e;
        }
        // every sequence is appended to, the ones that needed no page included: nothing below may undo that
        if (copies) {
            releaseReplaced(pool, head);
        }
        return total;
    }

    private static void checkTokens(int tokens) {
        if (tokens < 0) {
            throw new IllegalArgumentException("tokens must be ≥ 0, was " + tokens);
        }
    }

    /** @return a number for one step, never returned before (see {@link Sequence#stepMark}) */
    private static long nextCall() {
        return CALLS.incrementAndGet();
    }

    /**
     * Step 1 for one sequence: refuses one that is null, of another pool or already planned by this call; checks
     * and plans its append, writing in place what the sequences before it copy ({@link #othersCopyFirst}).
     * Changes nothing but the plan.
     *
     * @param head  the list of sequences planned so far that need pages
     * @param index where the sequence is in the batch, for a refusal's message
     * @return the pages it needs; 0: the caller counts its tokens
     */
    private static int plan(KvPool pool, Sequence seq, int tokens, long maxContext, long epoch, long call, Sequence head,
                            int index) {
        if (seq == null || seq.pool() != pool) {
            throw new IllegalArgumentException("batch[" + index + "] is "
                + (seq == null ? "null" : "a sequence of another pool (" + seq.pool() + ")"));
        }
        if (seq.stepMark == call) {
            throw new IllegalArgumentException("batch[" + index + "]'s sequence appears earlier in the step too: "
                + "each sequence may take part once");
        }
        seq.stepMark = call;
        final int pages;
        try {
            pages = seq.planAppend(tokens, maxContext, epoch);
        } catch (IllegalStateException e) { // a closed sequence: say which one of the batch
            throw new IllegalStateException("batch[" + index + "]: " + e.getMessage(), e);
        } catch (IllegalArgumentException e) { // past the max context: say which one of the batch
            throw new IllegalArgumentException("batch[" + index + "]: " + e.getMessage(), e);
        }
        return seq.stepCow && othersCopyFirst(pool, head, seq) ? seq.planInPlace() : pages;
    }

    /**
     * Steps 2 to 4 for the list from {@code head}. On a negative result or an exception, no sequence of the list
     * changed; the caller takes back the tokens it counted.
     *
     * @return {@code total}, or {@code -short} when the pool is {@code short} pages short
     */
    private static long allocateCopyApply(KvPool pool, Sequence head, int total, long beyond, boolean copies, int tokens) {
        final long got = pool.allocations().tryAllocateEach(head, total, beyond, false);
        if (got < 0) {
            return got;
        }
        if (copies) {
            try {
                copy(head);
            } catch (RuntimeException | Error e) {
                try { // all or nothing; no lambda (see PoolAllocations#undoFailed)
                    pool.allocations().undoEach(head, false);
                } catch (Throwable t) {
                    PoolAllocations.undoFailed(e, t);
                }
                throw e;
            }
        }
        for (Sequence seq = head; seq != null; seq = seq.stepNext) {
            seq.stepReplaced = seq.applyAppend(tokens); // released by the caller, after the step (releaseReplaced)
        }
        return got;
    }

    /**
     * Step 5: releases each page a copy-on-write replaced. One that fails does not stop the others; the first
     * failure is thrown after them (the step itself took effect).
     */
    private static void releaseReplaced(KvPool pool, Sequence head) {
        Throwable first = null;
        for (Sequence seq = head; seq != null; seq = seq.stepNext) {
            final long replaced = seq.stepReplaced;
            if (replaced == PageHandle.NONE) {
                continue;
            }
            seq.stepReplaced = PageHandle.NONE;
            try {
                pool.release(replaced);
            } catch (RuntimeException | Error e) {
                if (first == null) {
                    first = e;
                } else if (first != e) {
                    first.addSuppressed(e);
                }
            }
        }
        if (first != null) {
            throw Sequence.rethrow(first);
        }
    }

    /** Takes back the tokens counted in step 1 for {@code batch[0 .. n)} that needed no page. */
    private static void uncount(Sequence[] batch, int n, int tokens) {
        for (int j = 0; j < n; j++) {
            if (batch[j].stepPages == 0) {
                batch[j].uncountTokens(tokens);
            }
        }
    }

    /**
     * Whether {@code seq}, about to copy its shared partial last page, is its last holder once the sequences
     * before it in the batch that share it (all in the list from {@code head}) have copied it: appending to each
     * in turn, it would find itself the only holder and write in place, and so it does here (a beam-search step
     * copies n - 1 pages, not n).
     */
    private static boolean othersCopyFirst(KvPool pool, Sequence head, Sequence seq) {
        final int slot = seq.lastPageIndex();
        final int refcount = pool.allocations().refcountUnlessPublished(slot);
        if (refcount <= 1) {
            return false; // published (it stays shared), or an unshared page that the plan copies anyway
        }
        int copiedBefore = 0;
        for (Sequence s = head; s != null; s = s.stepNext) {
            if (s.stepCow && s.lastPageIndex() == slot) {
                copiedBefore++;
            }
        }
        return copiedBefore + 1 == refcount;
    }

    private static void copy(Sequence head) {
        for (Sequence seq = head; seq != null; seq = seq.stepNext) {
            if (seq.stepCow) {
                seq.copyLastPageInto(seq.allocated[0]);
            }
        }
    }
}
