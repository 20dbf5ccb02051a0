package io.kvpool;

import io.kvpool.storage.FillMode;

import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.util.Arrays;
import java.util.Objects;

/**
 * One request's KV: a block table of pages, a token count, and the reservation admission granted it.
 *
 * <ul>
 *   <li>{@link #append(int)} grows the sequence, allocating pages from its reservation (then from
 *       unreserved free pages); if the last page is partially filled and shared (by a fork, or because it
 *       holds a published prefix) it is copied first — copy-on-write — so no other owner sees the write.</li>
 *   <li>{@link #truncate(int)} shrinks it, releasing pages past the new end.</li>
 *   <li>{@link #fork()} creates a sequence sharing every page (refcount + 1 each).</li>
 *   <li>{@link #publish} offers its full pages to the prefix cache.</li>
 *   <li>{@link #close()} releases every reference and the unused reservation. Idempotent.</li>
 * </ul>
 * The block table is available without allocation: {@link #pageIndex(int)}, {@link #copyBlockTable} and
 * {@link #writeBlockTable} (for a kernel's int32 table in native or pinned memory).
 *
 * <p><b>Not thread-safe.</b> Use a sequence from one thread at a time; hand it to another thread with a
 * happens-before edge (a queue, a lock). Pages it holds may meanwhile be pinned, drained or released by
 * transfer threads through {@link KvPool}, which is safe.
 */
public final class Sequence implements AutoCloseable {

    // Field order is layout. HotSpot places fields by size (longs, ints, booleans, then references), in declaration
    // order within a size, after putting one int into the gap after the header. The fields a batch step reads for
    // every sequence (BatchAppend's plan: unsharedAtEpoch, stepMark, pageCount, tokenCount, tokensPerPage,
    // stepPages, closed, stepCow, pool; BlockTable#refresh: structureVersion, pageCount, tokenCount) are declared
    // so that they land together: on JDK 25 with compressed pointers, bytes 40-96 of the object (the header's gap
    // holds a cold int, publishedPages), so two cache lines at most. Measured: this layout makes the batch decode
    // step ~5% faster. A layout, not a guarantee: nothing depends on it but speed.

    // cold longs first
    private final long admittedTokens;
    /** The shared page a copy-on-write of a batch step replaced, until BatchAppend releases it; else NONE. */
    long stepReplaced;
    private long salt;
    /** Free unreserved pages when the last {@link #tryFork()} came up short (for fork's message). */
    private long lastForkAvailable;
    // hot longs last
    /** Counts changes to pages already in the block table (replaced or removed); appends do not count. */
    private long structureVersion;
    /**
     * The pool's retain epoch (see HandleOps#retainEpoch) read just before the partial last page was last found
     * unshared, or -1: while the epoch stands, no one can have taken a reference to it. Reset when the last page
     * changes.
     */
    private long unsharedAtEpoch = -1;
    /** The {@link KvPool#appendEach} call that last planned this sequence, to refuse it twice in one batch. */
    long stepMark;

    /** Pages of this sequence known to be in the prefix cache; a cold int, the one that fills the header's gap. */
    private int publishedPages;
    // hot ints first
    private int pageCount;
    private int tokenCount;
    private final int tokensPerPage;
    /** The plan of the append in progress (see planAppend): pages to allocate, and whether one is a copy. */
    int stepPages;
    /** Pages reserved for this sequence and not yet allocated. Guarded by the pool lock when changed. */
    int reservedPages;
    /** Pages of the append in progress taken from the reservation (for undoEach). */
    int stepFromReservation;
    /**
     * Pages of the planned step its reservation covers: the new pages, as far as it reaches, and a copy-on-write page
     * only from a credit beyond the growth the admission still needs (a fork's, or a truncate's). A copy forced by
     * another holder's retain has no credit: it comes from unreserved pages, so the admitted tokens stay covered.
     */
    int stepCoverable;

    // hot booleans first
    private boolean closed;
    boolean stepCow;
    private boolean hasSalt;

    // hot reference first
    private final KvPool pool;
    /** The next sequence of the append in progress that needs pages (see BatchAppend), or null. */
    Sequence stepNext;
    private long[] handles;
    private int[] blockTable;
    /**
     * Per page, the prefix digest (high and low halves, see {@link PrefixCache}) of the pages up to and including
     * it; {@code null} until the sequence's first published or attached page (most sequences have none), then as
     * long as {@link #handles}. An unset page reads 0.
     */
    private long[] pageDigestHi;
    private long[] pageDigestLo;
    /**
     * Scratch for the pages of a step with a copy-on-write (the copy first), reused so that append allocates nothing;
     * made by the first such step. A step with no copy needs none: its pages go straight into the page table's tail
     * (see {@link #stepOut}).
     */
    long[] allocated = NO_LONGS;
    /** The source and destination slots of a copy-on-write, for the storage's copy; made by the first such step. */
    private int[] copySlots = NO_INTS;

    private static final long[] NO_LONGS = new long[0];
    private static final int[] NO_INTS = new int[0];

    Sequence(KvPool pool, int reservedPages, long admittedTokens, long salt, boolean hasSalt) {
        // no page yet: the block table is sized on the first page (see addPage), so admitting and
        // closing a request that never gets a page allocates no table at all
        this(pool, reservedPages, admittedTokens, salt, hasSalt, 0);
    }

    private Sequence(KvPool pool, int reservedPages, long admittedTokens, long salt, boolean hasSalt, int initialPages) {
        this.pool = pool;
        this.tokensPerPage = pool.layout().tokensPerPage();
        this.reservedPages = reservedPages;
        this.admittedTokens = admittedTokens;
        this.salt = salt;
        this.hasSalt = hasSalt;
        this.handles = initialPages == 0 ? NO_LONGS : new long[initialPages];
        this.blockTable = initialPages == 0 ? NO_INTS : new int[initialPages];
    }

    // ---- queries ----

    /** {@return tokens held} */
    public int tokenCount() {
        return tokenCount;
    }

    /** {@return pages in the block table, {@code ceil(tokenCount / tokensPerPage)}} */
    public int pageCount() {
        return pageCount;
    }

    /** {@return tokens the admission guaranteed pages for (prompt + max new tokens, under the FULL policy)} */
    public long admittedTokens() {
        return admittedTokens;
    }

    /** {@return pages still reserved for this sequence} */
    public int reservedPages() {
        return reservedPages;
    }

    /** {@return whether {@link #close()} was called} */
    public boolean isClosed() {
        return closed;
    }

    /** {@return the pool} */
    public KvPool pool() {
        return pool;
    }

    /**
     * Reads one block-table entry. Allocation-free.
     *
     * @param i page number within the sequence, {@code 0 ≤ i < pageCount()}
     * @return the slot index of that page (the block-table entry a kernel uses)
     * @throws IndexOutOfBoundsException if {@code i} is out of range
     */
    public int pageIndex(int i) {
        Objects.checkIndex(i, pageCount);
        return blockTable[i];
    }

    /**
     * {@return the generation-tagged handle of page {@code i}}
     *
     * @param i page number within the sequence, {@code 0 ≤ i < pageCount()}
     * @throws IndexOutOfBoundsException if {@code i} is out of range
     */
    public long pageHandle(int i) {
        Objects.checkIndex(i, pageCount);
        return handles[i];
    }

    /**
     * Copies the block table (slot indices) into {@code dst[offset ..]}. Allocation-free.
     *
     * @param dst    the array to copy into
     * @param offset index in {@code dst} of the first page's entry
     * @return {@link #pageCount()}, the number of entries copied
     * @throws IndexOutOfBoundsException if {@code dst} has fewer than {@code offset + pageCount()} entries
     */
    public int copyBlockTable(int[] dst, int offset) {
        Objects.checkFromIndexSize(offset, pageCount, dst.length);
        System.arraycopy(blockTable, 0, dst, offset, pageCount);
        return pageCount;
    }

    /**
     * Writes the block table as little-endian int32 into {@code dst} at byte {@code offset}. Allocation-free.
     *
     * @param dst    the segment to write into, e.g. native or pinned memory a kernel reads
     * @param offset byte offset in {@code dst} of the first page's entry
     * @return {@link #pageCount()}, the number of entries written
     * @throws IndexOutOfBoundsException if {@code dst} is too small for the table at {@code offset}
     */
    public int writeBlockTable(MemorySegment dst, long offset) {
        MemorySegment.copy(blockTable, 0, dst, ValueLayout.JAVA_INT_UNALIGNED.withOrder(java.nio.ByteOrder.LITTLE_ENDIAN), offset, pageCount);
        return pageCount;
    }

    /**
     * {@return the bytes of page {@code i} (host storage), after the pool checks its handle; read-only if the page
     * is shared (an attached prefix, a fork's page, a published page): append before writing}
     *
     * @param i page number within the sequence, {@code 0 ≤ i < pageCount()}
     * @throws IndexOutOfBoundsException if {@code i} is out of range
     * @see KvPool#page(long)
     */
    public MemorySegment page(int i) {
        return pool.page(pageHandle(i));
    }

    // ---- changes ----

    /**
     * Adds {@code n} tokens, allocating pages as needed (copy-on-write of a shared partial last page
     * first). All or nothing: on an exception nothing changed, except one thrown by the release of the page a
     * copy-on-write replaced (an Error of its fill, when its other holder let go meanwhile; the pool closed under
     * the call), which comes after the append took effect. The admission's reservation covers the
     * pages for the admitted tokens and the copy-on-write after a {@link #fork()}; a copy forced because
     * someone else took a reference to the partial last page with {@link KvPool#retain} is not covered
     * and comes from unreserved free pages.
     *
     * @param n tokens to add, ≥ 0
     * @throws IllegalArgumentException if {@code n < 0} or the result would exceed the pool's max context
     * @throws PoolExhaustedException   if pages beyond the reservation are needed and none are free
     * @throws StaleHandleException     if a copy-on-write finds the last page's handle no longer current (the page was
     *                                  released behind the sequence's back); nothing changed
     * @throws IllegalStateException    if the sequence or pool is closed
     */
    public void append(int n) {
        append(n, false);
    }

    /**
     * As {@link #append}, with the new pages pinned for a writer (RECEIVING) before they enter the block table:
     * {@link io.kvpool.spi.TransportHandles#appendPinned}. Only for a sequence without pages.
     */
    void appendPinned(int n) {
        if (pageCount != 0) {
            throw new IllegalStateException("appendPinned needs a sequence without pages; this one holds " + pageCount);
        }
        append(n, true);
    }

    private void append(int n, boolean pinned) {
        final int allocate = planAppend(n);
        if (allocate > 0) {
            stepNext = null; // a batch of one: the same allocation path as KvPool#appendEach
            final long got = pool.allocations().tryAllocateEach(this, allocate, allocate - stepCoverable, pinned);
            if (got < 0) {
                final int fromRes = stepCoverable;
                final long available = Math.max(0, allocate - fromRes + got); // got = -(pages short)
                throw new PoolExhaustedException("sequence needs " + allocate + " more pages, " + fromRes
                    + " of them reserved; the pool has " + available + " free unreserved pages for the other "
                    + (allocate - fromRes) + " (capacity " + pool.capacity() + ")");
            }
            if (stepCow) { // never when pinned: a pinned append starts a sequence without pages
                try {
                    copyLastPageInto(allocated[0]);
                } catch (RuntimeException | Error e) {
                    try { // the reservation too; no lambda (see PoolAllocations#undoFailed)
                        pool.allocations().undoEach(this, pinned);
                    } catch (Throwable t) {
                        PoolAllocations.undoFailed(e, t);
                    }
                    throw e;
                }
            }
        }
        final long replaced = applyAppend(n);
        if (replaced != PageHandle.NONE) {
            pool.release(replaced); // last: freeing it may fill it, and an Error there must find the append whole
        }
    }

    // ---- an append in four steps, shared with KvPool#appendEach ----
    //   planAppend   checks and decides the pages (changes nothing but the plan's fields; grows the tables for them)
    //   the pool     allocates stepPages pages into stepOut() from stepOutFrom() (PoolAllocations#tryAllocateEach):
    //                the page table's tail, or with a copy the `allocated` scratch; fills evicted ones
    //   copy         copyLastPageInto, when stepCow (the only step that can fail after the allocation: undoEach)
    //   applyAppend  puts the pages in the block table and counts the tokens (cannot fail)
    //   release      the shared page a copy-on-write replaced: its other holder may have let go meanwhile, and then
    //                this release frees and fills it, which can throw an Error (after the append took effect)

    /**
     * Checks an append of {@code n} tokens and decides its pages. Changes nothing but the plan's fields, and grows the
     * page tables to hold the pages planned (so that applying the plan allocates nothing).
     *
     * @return pages to allocate: new pages, plus one for a copy-on-write of the shared partial last page
     */
    int planAppend(int n) {
        ensureOpen();
        return planAppend(n, pool.maxContextTokens(), pool.allocations().retainEpoch());
    }

    /**
     * {@link #planAppend(int)} with what is the same for every sequence of a batch read once by the caller, which
     * has checked that the pool is open.
     *
     * @param maxContext the pool's max context
     * @param epoch      the pool's retain epoch, read before this call (see {@link #lastPageShared})
     */
    int planAppend(int n, long maxContext, long epoch) {
        if (closed) {
            throw new IllegalStateException("sequence is closed");
        }
        if (n < 0) {
            throw new IllegalArgumentException("n must be ≥ 0, was " + n);
        }
        final long target = (long) tokenCount + n;
        if (target > maxContext) {
            throw new IllegalArgumentException("appending " + n + " tokens to " + tokenCount + " would exceed the max context of "
                + maxContext + " tokens");
        }
        // token slots left in the last page (pageCount = ceil(tokenCount / tokensPerPage) always): no division on
        // the path of an append that needs no page, which is 15 of 16 decode steps
        final long room = (long) pageCount * tokensPerPage - tokenCount;
        stepCow = room != 0 && n != 0 && lastPageShared(epoch);
        final int newPages = n <= room ? 0 : (int) ((n - room + tokensPerPage - 1) / tokensPerPage);
        final int allocate = newPages + (stepCow ? 1 : 0);
        stepPages = allocate;
        if (allocate != 0) {
            stepCoverable = coverable(newPages);
        }
        if (stepCow && allocated.length < allocate) { // the array's header is another cache line: only when needed
            allocated = new long[Math.max(allocate, Math.max(2, allocated.length * 2))];
        }
        if (stepCow && copySlots.length == 0) {
            copySlots = new int[2];
        }
        // the tables grow here, before anything is allocated, not in applyAppend: an OutOfMemoryError there would leave
        // pages taken and recorded nowhere (an append past the admitted tokens, every decode step under PROMPT_ONLY)
        ensureRoom(pageCount + newPages);
        return allocate;
    }

    /**
     * Whether the partial last page must be copied before a write: shared, or a published prefix.
     *
     * @param epoch the pool's retain epoch, read before this call: a RETAIN after that read moves it
     */
    private boolean lastPageShared(long epoch) {
        if (epoch == unsharedAtEpoch) {
            return false; // no RETAIN anywhere since the page was found unshared (a partial page is never published)
        }
        if (pool.allocations().mustCopyBeforeWrite(blockTable[pageCount - 1])) {
            return true;
        }
        unsharedAtEpoch = epoch;
        return false;
    }

    /**
     * Where the pool puts the pages of the planned step ({@link #stepPages} of them, from {@link #stepOutFrom()}): with
     * a copy-on-write, the {@link #allocated} scratch, the copy first (the page it replaces stays in the table until
     * {@link #applyAppend}); else the page table's tail past the last page, which {@link #planAppend} grew for them and
     * which nothing reads before {@link #applyAppend} counts them in. Pages an undo gives back may stay written there,
     * past {@link #pageCount()}, as in the scratch.
     */
    long[] stepOut() {
        return stepCow ? allocated : handles;
    }

    /** @return the index in {@link #stepOut()} of the planned step's first page */
    int stepOutFrom() {
        return stepCow ? 0 : pageCount;
    }

    /**
     * Drops the copy from the plan: the sequences before this one in a batch copy the shared page, after which this
     * sequence holds it alone (see BatchAppend).
     *
     * @return pages to allocate now
     */
    int planInPlace() {
        stepCow = false;
        stepCoverable = Math.min(stepCoverable, --stepPages);
        return stepPages;
    }

    /** @return the pages of a step of {@code newPages} (plus the copy, if {@link #stepCow}) its reservation covers */
    private int coverable(int newPages) {
        int covered = Math.min(newPages, reservedPages);
        if (stepCow && covered < reservedPages) {
            final long growthNeed = Math.max(0, pool.layout().pagesFor(admittedTokens) - pageCount); // before this step
            if (reservedPages > growthNeed) {
                covered++; // a copy-on-write credit
            }
        }
        return covered;
    }

    /** @return the slot of the last page; only when {@code pageCount() > 0} */
    int lastPageIndex() {
        return blockTable[pageCount - 1];
    }

    /** Completes an append planned by {@link #planAppend} that needs no page: the tokens fit the last page. */
    void countTokens(int n) {
        tokenCount += n;
    }

    /** Takes back tokens counted by {@link #countTokens} (a batch step that failed). */
    void uncountTokens(int n) {
        tokenCount -= n;
    }

    /**
     * Copies the partial last page into the freshly allocated page {@code fresh} (copy-on-write), after checking the last
     * page's handle: a page released behind this sequence's back may be another request's now, and copying it would hand
     * that request's KV to this sequence under a current handle.
     *
     * @throws StaleHandleException if the last page's handle is stale (or not of this pool); nothing is copied
     */
    void copyLastPageInto(long fresh) {
        copySlots[0] = checkedSlot(pageCount - 1, -1);
        copySlots[1] = PageHandle.slot(fresh);
        pool.storage().copyPages(copySlots, 0, copySlots, 1, 1); // made by planAppend with the plan's copy
    }

    /**
     * @param truncateTo the tokens of the truncate that checks, or -1 for a copy-on-write: where the page was met, put
     *                   into words only for a refusal, so that a check that passes allocates nothing
     * @return the slot of page {@code i}, after checking that its handle is still current
     * @throws StaleHandleException if it is not (or not of this pool), naming where it was met
     */
    private int checkedSlot(int i, int truncateTo) {
        final long h = handles[i];
        try {
            return pool.accessibleSlot(h);
        } catch (StaleHandleException e) { // the pool's refusal, with where it met this sequence
            final String where = truncateTo < 0 ? "copy-on-write of page " + i + " of the sequence"
                : "truncate to " + truncateTo + " tokens, whose last page is page " + i;
            throw new StaleHandleException(h, e.refusal(), where + ": " + e.getMessage()
                + " (the page was released behind the sequence's back)");
        }
    }

    /**
     * Completes an append planned by {@link #planAppend} whose {@link #stepPages} pages are in {@link #stepOut()}.
     * Cannot fail. The caller releases the page a copy-on-write replaced, once every sequence of its step is complete.
     *
     * @return the handle of the replaced shared page, still referenced for the caller to release; or
     *         {@link PageHandle#NONE} when the step copied nothing
     */
    long applyAppend(int n) {
        final int allocate = stepPages;
        if (!stepCow) {
            // the handles are in place (the allocation wrote the table's tail, stepOut) and the table has room (planAppend)
            final int end = pageCount + allocate;
            for (int i = pageCount; i < end; i++) {
                blockTable[i] = PageHandle.slot(handles[i]);
            }
            if (allocate > 0) {
                pageCount = end;
                unsharedAtEpoch = -1;
            }
            tokenCount += n;
            return PageHandle.NONE;
        }
        final long fresh = allocated[0];
        final long replaced = handles[pageCount - 1];
        handles[pageCount - 1] = fresh;
        blockTable[pageCount - 1] = PageHandle.slot(fresh);
        unsharedAtEpoch = -1;
        structureVersion++;
        if (publishedPages > pageCount - 1) {
            publishedPages = pageCount - 1;
        }
        for (int k = 1; k < allocate; k++) {
            addPage(allocated[k]);
        }
        tokenCount += n;
        return replaced;
    }

    /**
     * Shrinks the sequence to {@code n} tokens, releasing pages past the new end (last page first). The
     * reservation is topped up again so the sequence can regrow to the tokens it was admitted for. A
     * released page that another owner still shares does not return to the free pages, so re-reserving
     * it needs a free unreserved page; if none is left the growth guarantee shrinks by that page, and a
     * later append past it may throw {@link PoolExhaustedException}. Truncating pages only this sequence
     * holds never weakens the guarantee (a partial last page it published leaves the prefix cache instead of
     * being copied) — except a page still pinned for a receive: it is not free when the reservation is topped
     * up, and nothing re-reserves it when its pin ends; and a page whose slot reached its last generation: it
     * retires instead of returning (the pool has one page fewer), so it too is re-reserved only if another page is
     * free and unreserved. A partial last page that another holder still shares is
     * copied before the next append writes it, and stays so if it is a published prefix even once the other holder
     * left (the copy keeps the cached prefix whole): that copy needs one more page, reserved now if one is free and
     * unreserved; if none is, the guarantee shrinks by that page too.
     *
     * @param n tokens to keep, {@code 0 ≤ n ≤ tokenCount()}
     * @throws IllegalArgumentException if {@code n < 0} or {@code n > tokenCount()}
     * @throws IllegalStateException    if the sequence or pool is closed
     * @throws StaleHandleException     if the page that becomes the partial last one was released behind the sequence's
     *                                  back (its handle is stale); nothing changed
     */
    public void truncate(int n) {
        ensureOpen();
        if (n < 0 || n > tokenCount) {
            throw new IllegalArgumentException("truncate to " + n + " tokens: must be in 0.." + tokenCount);
        }
        final int keep = (int) pool.layout().pagesFor(n);
        if (n % tokensPerPage != 0) {
            // a partial last page is unpublished below if the cache holds it and only its holder does: through a stale
            // handle that would take another request's page out of the cache (and leave it to be written in place)
            checkedSlot(keep - 1, n);
        }
        final int dropped = pageCount - keep;
        final long regrowth = Math.max(0, pool.layout().pagesFor(admittedTokens) - keep); // pages the admission still owes
        unsharedAtEpoch = -1;
        if (dropped > 0) {
            structureVersion++;
        }
        Throwable failed = null;
        int ahead = 0, freed = 0;
        if (dropped > 0) {
            // Reserve now what the pages freed here will back: released first and re-reserved after, they could be
            // taken by an admission on another thread in between, and the regrowth this sequence was admitted for
            // would then fail. What no freed page backs is given back below.
            ahead = (int) Math.min(dropped, Math.max(0, regrowth - reservedPages));
            if (ahead > 0) {
                pool.allocations().reserveAhead(this, ahead);
            }
            final int end = pageCount;
            pageCount = keep;
            try {
                freed = pool.releaseFreeing(handles, keep, end); // last page first, one return-stack CAS a run; allocates nothing
            } catch (RuntimeException | Error e) {
                failed = e; // every page was released but the refused ones: finish the bookkeeping, then throw
            }
            Arrays.fill(handles, keep, end, 0);
        }
        tokenCount = n;
        publishedPages = Math.min(publishedPages, keep);
        final boolean partialLast = n % tokensPerPage != 0 && keep > 0;
        if (partialLast && keep <= publishedPages) {
            publishedPages = keep - 1; // the partial page is no longer a full page of ours; the copy will be republished
        }
        if (partialLast) {
            // a page only this sequence holds stops being a published prefix: writing it in place again costs no
            // copy, so the guarantee holds (copying it would need a page beyond the reservation — in a full pool, none)
            pool.allocations().unpublishIfSole(blockTable[keep - 1]);
        }
        final boolean cowNext = partialLast && pool.allocations().mustCopyBeforeWrite(blockTable[keep - 1]);
        final int unbacked = Math.max(0, ahead - freed); // pages still shared elsewhere, or a release that threw
        if (dropped > 0 || cowNext) {
            final long want = regrowth + (cowNext ? 1 : 0); // pageCount is keep now
            final long backed = reservedPages - unbacked;
            if (want > backed || ahead > 0) { // ahead: settled even when nothing is wanted (and refused if closed)
                pool.allocations().topUpReservation(this, ahead, unbacked, (int) Math.max(0, want - backed));
            }
        }
        if (failed != null) {
            throw rethrow(failed);
        }
    }

    /** @return nothing: throws {@code t}, a RuntimeException or an Error */
    static RuntimeException rethrow(Throwable t) {
        if (t instanceof Error e) {
            throw e;
        }
        throw (RuntimeException) t;
    }

    /**
     * Creates a sequence that shares every page of this one (each page's refcount + 1) and can grow to
     * the same admitted size: it gets its own reservation, and this sequence gets one more page if the
     * shared last page is partial (whichever appends first copies it).
     *
     * @return the child sequence; the caller owns it and must close it
     * @throws PoolExhaustedException if that reservation cannot be had now ({@link PoolExhaustedException#retryLater()}
     *                                true; see {@link #tryFork()} for the exception-free form), or ever while this
     *                                sequence holds and reserves what it does (false)
     * @throws IllegalStateException  if this sequence or the pool is closed, or a page is not OWNED (e.g. still receiving)
     */
    public Sequence fork() {
        final Sequence child = tryFork();
        if (child == null) {
            throw new PoolExhaustedException(forkNeeds() + "; " + lastForkAvailable + " are free and unreserved");
        }
        return child;
    }

    /** @return what a fork of this sequence needs reserved, in words with the numbers */
    private String forkNeeds() {
        final int cowPage = forkCowPage(), growth = forkGrowth();
        final int parentCredit = forkParentCredit(cowPage, growth);
        return "fork needs " + (parentCredit + growth + cowPage) + " pages reserved: " + (growth + cowPage) + " for the child ("
            + cowPage + " of them for copy-on-write of the shared last page)"
            + (parentCredit > 0 ? " and " + parentCredit + " for this sequence's own copy of it" : "");
    }

    /**
     * The parent's copy-on-write credit for a fork: added only if its reservation does not already cover its growth
     * plus one copy, so a parent forked (and its children closed) many times never accumulates credits.
     */
    private int forkParentCredit(int cowPage, int growth) {
        return Math.max(0, Math.min(cowPage, growth + cowPage - reservedPages));
    }

    /**
     * {@link #fork()} for a hot loop: when the pool cannot reserve the child's pages now it returns {@code null}
     * instead of throwing, allocating nothing and changing nothing (the same condition as admission's
     * RETRY_LATER: retry when pages are freed, or give up the fork). A fork that no freed page can make fit, as
     * admission's EXCEEDS_POOL, throws instead, so that no loop waits for it.
     *
     * @return the child sequence, or {@code null} when its reservation cannot be had now
     * @throws PoolExhaustedException if the pool could not reserve the fork even with every page this sequence neither
     *                                holds nor has reserved free ({@link PoolExhaustedException#retryLater()} false;
     *                                nothing changed): it may fit once this sequence has grown, or in a larger pool
     * @throws IllegalStateException  if this sequence or the pool is closed, or a page is not OWNED (e.g. still receiving)
     */
    public Sequence tryFork() {
        ensureOpen();
        final int cowPage = forkCowPage();
        final int growth = forkGrowth();
        final int parentCredit = forkParentCredit(cowPage, growth);
        final long parentAdded = pool.allocations().tryReserveForFork(this, parentCredit, growth + cowPage);
        if (parentAdded == PoolAllocations.FORK_NEVER_FITS) {
            throw new PoolExhaustedException(forkNeeds() + "; at most " + pool.allocations().pagesEverFreeBeside(this) + " can ever be "
                + "free beside this sequence (the pool's " + pool.allocations().inService() + " pages in service less its " + pageCount
                + " held and " + reservedPages + " reserved): no wait helps while it holds them", false);
        }
        if (parentAdded < 0) {
            lastForkAvailable = -1 - parentAdded; // refused: nothing allocated (a hot loop may retry)
            return null;
        }
        final Sequence child;
        int retained = 0;
        try {
            child = new Sequence(pool, growth + cowPage, admittedTokens, salt, hasSalt, Math.max(4, pageCount + growth + cowPage));
            if (pageDigestHi != null) {
                child.pageDigestHi = Arrays.copyOf(pageDigestHi, child.handles.length);
                child.pageDigestLo = Arrays.copyOf(pageDigestLo, child.handles.length);
            }
            for (; retained < pageCount; retained++) {
                pool.retain(handles[retained]);
            }
        } catch (RuntimeException | Error e) { // an Error too (no memory for the child): nothing of the fork may stay
            try {
                if (retained > 0) {
                    pool.releaseAll(handles, 0, retained); // goes on past a page's failure, then throws it
                }
            } catch (RuntimeException | Error second) {
                e.addSuppressed(second);
            } finally { // the reservation is not left taken, whatever the releases did
                pool.allocations().undoFork(this, (int) parentAdded, growth + cowPage);
            }
            throw e;
        }
        System.arraycopy(handles, 0, child.handles, 0, pageCount);
        System.arraycopy(blockTable, 0, child.blockTable, 0, pageCount);
        child.pageCount = pageCount;
        child.tokenCount = tokenCount;
        child.publishedPages = publishedPages;
        return child;
    }

    private int forkCowPage() {
        return tokenCount % tokensPerPage != 0 ? 1 : 0;
    }

    private int forkGrowth() {
        return (int) Math.max(0, pool.layout().pagesFor(admittedTokens) - pageCount);
    }

    /**
     * Publishes every full page not yet published to the prefix cache, keyed by the chained SHA-256 digest of
     * the token ids up to and including it under {@code cacheSalt} (see {@link PrefixHash#SHARED_SALT} for
     * salts). Published pages are immutable: a later append into one copies it first.
     *
     * @param tokenIds  the sequence's token ids from its first token, at least {@code tokenCount()} rounded
     *                  down to full pages
     * @param cacheSalt the tenant's cache namespace, not 0; must equal the salt the sequence was admitted with, if any
     * @throws IllegalStateException    with {@link FillMode#CANARY}, if a page to publish still holds the
     *                                  canary somewhere (its KV was never written, entirely or for some
     *                                  layer); or if the sequence or pool is closed; an
     *                                  {@link IllegalSlotTransitionException} if a page to publish is pinned
     *                                  for a remote writer (RECEIVING); a {@link StaleHandleException} if one was
     *                                  freed under the sequence; or if one already holds the most references a page
     *                                  can (the message names the count)
     * @throws IllegalArgumentException if {@code cacheSalt} is 0, the sequence has a salt and {@code cacheSalt} differs
     *                                  from it, or {@code tokenIds} is too short
     */
    public void publish(int[] tokenIds, long cacheSalt) {
        ensureOpen();
        Objects.requireNonNull(tokenIds, "tokenIds");
        PrefixCache.requireSalt(cacheSalt);
        if (hasSalt && cacheSalt != salt) {
            throw new IllegalArgumentException("sequence belongs to cache salt " + salt + ", cannot publish under " + cacheSalt);
        }
        final int full = tokenCount / tokensPerPage;
        if (tokenIds.length < full * tokensPerPage) {
            throw new IllegalArgumentException("need token ids for " + full * tokensPerPage + " tokens (" + full
                + " full pages), got " + tokenIds.length);
        }
        if (full > publishedPages) {
            if (pool.fillMode() == FillMode.CANARY) { // outside the pool lock: these pages are ours and stable
                for (int i = publishedPages; i < full; i++) {
                    final int unwritten = pool.firstCanaryToken(handles[i], 0, tokensPerPage);
                    if (unwritten >= 0) {
                        throw new IllegalStateException("page " + i + " (slot " + blockTable[i] + ") still holds the free-page canary at token "
                            + unwritten + ": write its KV before publishing it, or another request would attach unwritten pages");
                    }
                }
            }
            pool.allocations().publish(this, tokenIds, publishedPages, full, cacheSalt);
            publishedPages = full;
            salt = cacheSalt;
            hasSalt = true;
        }
    }

    /**
     * {@return a number that changes whenever a page already in the block table is replaced (copy-on-write)
     * or removed (truncate)} Appends leave it unchanged, so a cached block table with the same version
     * needs only the pages from its old length on.
     */
    public long structureVersion() {
        return structureVersion;
    }

    /** {@return pages of this sequence known to be in the prefix cache (published or attached)} */
    public int publishedPages() {
        return publishedPages;
    }

    /**
     * Releases every page reference (last page first, so the tail of a cached prefix is evicted before
     * its head) and the unused reservation. Idempotent. Once the pool is closed it releases nothing, but the sequence
     * still becomes empty: no page and no token, so a block table's row for it reads empty.
     */
    @Override
    public void close() {
        if (closed) {
            return;
        }
        closed = true;
        if (pool.isClosed()) {
            pageCount = 0; // nothing to release into a closed pool, but nothing named either (BlockTable, pageIndex)
            tokenCount = 0;
            return;
        }
        Throwable first = null;
        try {
            pool.releaseFreeing(handles, 0, pageCount); // last page first: a cached prefix's tail is evicted first; allocates nothing
        } catch (RuntimeException | Error e) { // every page was released but the refused ones: the reservation goes too
            first = e;
        }
        pageCount = 0;
        tokenCount = 0;
        pool.allocations().sequenceClosed(this);
        if (first != null) {
            throw rethrow(first);
        }
    }

    @Override
    public String toString() {
        return "Sequence[tokens=" + tokenCount + ", pages=" + pageCount + ", reserved=" + reservedPages
            + (closed ? ", closed" : "") + "]";
    }

    // ---- pool-side helpers ----

    void addPage(long handle) {
        ensureRoomForPage();
        handles[pageCount] = handle;
        blockTable[pageCount] = PageHandle.slot(handle);
        pageCount++;
        unsharedAtEpoch = -1;
    }

    /**
     * Grows the page tables if they are full, so that the next {@link #addPage} allocates nothing: a caller that takes
     * a page's reference first and records it after (a prefix attach) calls this before, so that an OutOfMemoryError
     * cannot fall between the two and leave a reference nobody holds.
     */
    void ensureRoomForPage() {
        ensureRoom(pageCount + 1);
    }

    /** @return how many pages the page tables hold before they must grow (for tests) */
    int pageTableCapacity() {
        return handles.length;
    }

    /** Grows the page tables, if they are smaller, to hold {@code pages} pages. */
    private void ensureRoom(int pages) {
        if (pages > handles.length) {
            // first growth: room for every page the admitted tokens need (plus a copy-on-write), so a
            // sequence that stays within its admission never grows its table again
            final long admittedPages = pool.layout().pagesFor(admittedTokens) + 1;
            final int n = (int) Math.max(Math.max(Math.max(8, handles.length * 2L), pages),
                Math.min(admittedPages, PageHandle.MAX_SLOT + 1L));
            final long[] grownHandles = Arrays.copyOf(handles, n);
            final int[] grownTable = Arrays.copyOf(blockTable, n);
            if (pageDigestHi != null) {
                final long[] hi = Arrays.copyOf(pageDigestHi, n), lo = Arrays.copyOf(pageDigestLo, n);
                pageDigestHi = hi;
                pageDigestLo = lo;
            }
            handles = grownHandles; // last: an allocation that failed above leaves the tables as they were
            blockTable = grownTable;
        }
    }

    void attachedPublished(PrefixDigest digest) {
        setPageDigest(pageCount - 1, digest);
        publishedPages = pageCount;
    }

    void setTokenCountAfterAttach(int tokens) {
        tokenCount = tokens;
    }

    PrefixDigest pageDigest(int i) {
        Objects.checkIndex(i, handles.length);
        return pageDigestHi == null ? PrefixDigest.ROOT : new PrefixDigest(pageDigestHi[i], pageDigestLo[i]);
    }

    void setPageDigest(int i, PrefixDigest digest) {
        if (pageDigestHi == null) { // the first: made as long as the block table (addPage grows them together)
            pageDigestHi = new long[handles.length];
            pageDigestLo = new long[handles.length];
        }
        pageDigestHi[i] = digest.hi();
        pageDigestLo[i] = digest.lo();
    }

    private void ensureOpen() {
        if (closed) {
            throw new IllegalStateException("sequence is closed");
        }
        if (pool.isClosed()) {
            throw new IllegalStateException("kvpool is closed");
        }
    }
}
