package io.kvpool.spi;

import io.kvpool.IllegalSlotTransitionException;
import io.kvpool.StaleHandleException;

/**
 * The writer-pin side of a pool's handles, for transports (kvpool-transfer, kvpool-cuda): pin a page as the
 * target of remote writes, then end the pin by commit, drain or quarantine. Obtain it with
 * {@link io.kvpool.KvPool#handles()}. Not application API: an application holds pages through sequences and
 * never pins them.
 *
 * <pre>
 *   OWNED(1) ──pinWriter──► RECEIVING ──commitReceive──────────────────────────► OWNED, or FREE if unreferenced
 *                              │
 *                              ├──beginDrain──► DRAINING ──drained──────────────► OWNED, or FREE
 *                              │                   │
 *                              └──quarantine──┬────┘
 *                                             ▼
 *                                        QUARANTINED ──releaseQuarantine──────► OWNED, or FREE
 * </pre>
 * Every method is thread-safe; all but {@link #pinWriter}, {@link #pinWriters} and {@link #appendPinned} (which take
 * the pool lock) are lock-free (one CAS on the slot's state word). Each throws {@link StaleHandleException} for a stale
 * handle or one of another pool, and {@link IllegalSlotTransitionException} when the page's state does not allow the
 * step. After the pool is closed, while pages are still pinned (the storage is kept until the last pin ends), the
 * steps that move or end a pin are accepted and the pins throw {@link IllegalStateException}; once the storage is
 * released, every step throws it.
 */
public interface TransportHandles {

    /**
     * Pins an unshared, unpublished OWNED page as the target of remote writes (RECEIVING). While pinned the
     * page cannot become FREE, whatever happens to its references. Takes the pool lock briefly, to check that
     * the page holds no published prefix.
     *
     * @param handle the page's handle
     * @throws StaleHandleException           if the handle is stale or not a handle of this pool
     * @throws IllegalSlotTransitionException if the page is shared, published or not OWNED
     */
    void pinWriter(long handle);

    /**
     * Pins {@code handles[from .. to)} as {@link #pinWriter} does, all or none: if one page cannot be pinned,
     * the pages this call pinned are unpinned again (RECEIVING → DRAINING → OWNED: no writer can have been
     * given them yet) and the refusal for that page is thrown. The pool's own implementation takes its lock once
     * per up to 64 pages rather than once per page; this default pins one page at a time.
     *
     * @param handles the pages' handles
     * @param from    first index, inclusive
     * @param to      last index, exclusive
     * @throws StaleHandleException           if a handle is stale or not a handle of this pool
     * @throws IllegalSlotTransitionException if a page is shared, published or not OWNED
     * @throws IndexOutOfBoundsException      if the range is not within {@code handles}
     */
    default void pinWriters(long[] handles, int from, int to) {
        java.util.Objects.checkFromToIndex(from, to, handles.length);
        int i = from;
        try {
            for (; i < to; i++) {
                pinWriter(handles[i]);
            }
        } catch (RuntimeException e) {
            for (int j = from; j < i; j++) {
                beginDrain(handles[j]);
                drained(handles[j]);
            }
            throw e;
        }
    }

    /**
     * Appends {@code tokens} to a sequence without pages, its new pages pinned for a writer (RECEIVING) from the
     * start: what {@link io.kvpool.Sequence#append} and then {@link #pinWriters} of its pages do. The pool's own
     * implementation checks the sequence's pool first and is all or none: it pins each fresh page with a plain
     * store under the allocation's lock (nobody else holds its handle yet), not a CAS per page. This default
     * appends, then pins; if the pin is refused, the pages stay in the sequence, unpinned, and the refusal is
     * thrown.
     *
     * @param seq    a sequence of this pool that holds no page yet
     * @param tokens tokens to append
     * @throws IllegalArgumentException if {@code seq} belongs to another pool (the pool's implementation; the
     *                                  default throws the pin's {@link StaleHandleException} instead)
     * @throws IllegalStateException    if {@code seq} holds pages, is closed, or the pool is closed
     * @throws io.kvpool.PoolExhaustedException if the pool cannot supply the pages (nothing is appended)
     */
    default void appendPinned(io.kvpool.Sequence seq, int tokens) {
        if (seq.pageCount() != 0) {
            throw new IllegalStateException("appendPinned needs a sequence without pages; this one holds " + seq.pageCount());
        }
        seq.append(tokens);
        final long[] handles = new long[seq.pageCount()];
        for (int i = 0; i < handles.length; i++) {
            handles[i] = seq.pageHandle(i);
        }
        pinWriters(handles, 0, handles.length);
    }

    /**
     * The transfer into the page was verified: RECEIVING → OWNED (or FREE if no reference is left).
     *
     * @param handle the page's handle
     * @throws StaleHandleException           if the handle is stale or not a handle of this pool
     * @throws IllegalSlotTransitionException if the page is not RECEIVING
     */
    void commitReceive(long handle);

    /**
     * Writes the pool's free-page fill ({@link io.kvpool.KvPool#fillMode()}: the canary, or zeros; nothing for
     * {@link io.kvpool.storage.FillMode#NONE}) into tokens {@code [fromToken, tokensPerPage)} of a page pinned
     * RECEIVING ({@link io.kvpool.storage.PageStorage#fillTail}). A receiver calls it on a partial last page before
     * the commit: transports copy whole pages, so its tail holds the sender page's bytes past the sender's tokens.
     *
     * @param handle    the page's handle
     * @param fromToken the first token past the received ones, in {@code [0, tokensPerPage]}
     * @throws IllegalStateException     if the page is not RECEIVING, or its storage was released
     * @throws IndexOutOfBoundsException if {@code fromToken} is out of range
     */
    void fillUnwrittenTail(long handle, int fromToken);

    /**
     * {@link #commitReceive} of {@code handles[from .. to)}. A refusal does not stop it: every other page is
     * committed, then the refusal for the first page that could not be is thrown.
     *
     * @param handles the pages' handles
     * @param from    first index, inclusive
     * @param to      last index, exclusive
     * @throws StaleHandleException           if a handle is stale or not a handle of this pool
     * @throws IllegalSlotTransitionException if a page is not RECEIVING
     * @throws IndexOutOfBoundsException      if the range is not within {@code handles}
     */
    default void commitReceiveAll(long[] handles, int from, int to) {
        java.util.Objects.checkFromToIndex(from, to, handles.length);
        RuntimeException first = null;
        for (int i = from; i < to; i++) {
            try {
                commitReceive(handles[i]);
            } catch (RuntimeException e) {
                if (first == null) {
                    first = e;
                }
            }
        }
        if (first != null) {
            throw first;
        }
    }

    /**
     * The transfer failed or was aborted: RECEIVING → DRAINING, waiting for the sender's confirmation.
     *
     * @param handle the page's handle
     * @throws StaleHandleException           if the handle is stale or not a handle of this pool
     * @throws IllegalSlotTransitionException if the page is not RECEIVING
     */
    void beginDrain(long handle);

    /**
     * Every expected sender confirmed its writes are over: DRAINING → OWNED, or FREE if no reference is left.
     *
     * @param handle the page's handle
     * @throws StaleHandleException           if the handle is stale or not a handle of this pool
     * @throws IllegalSlotTransitionException if the page is not DRAINING
     */
    void drained(long handle);

    /**
     * No drain confirmation in time, or the peer was lost: RECEIVING/DRAINING → QUARANTINED. Never freed on a timer.
     *
     * @param handle the page's handle
     * @throws StaleHandleException           if the handle is stale or not a handle of this pool
     * @throws IllegalSlotTransitionException if the page is neither RECEIVING nor DRAINING
     */
    void quarantine(long handle);

    /**
     * The transport proved the peer can no longer write: QUARANTINED → OWNED, or FREE if no reference is left.
     *
     * @param handle the page's handle
     * @throws StaleHandleException           if the handle is stale or not a handle of this pool
     * @throws IllegalSlotTransitionException if the page is not QUARANTINED
     */
    void releaseQuarantine(long handle);
}
