package io.kvpool;

import io.kvpool.spi.TransportHandles;
import io.kvpool.storage.FillMode;
import io.kvpool.storage.HostPageStorage;
import io.kvpool.storage.PageStorage;

import java.lang.foreign.MemorySegment;
import java.lang.ref.Cleaner;
import java.util.EnumSet;
import java.util.Objects;
import java.util.Optional;
import java.util.Set;
import java.util.function.BiFunction;

/**
 * A paged KV-cache pool: a fixed number of pages in a {@link PageStorage}, handed out as
 * generation-tagged {@link PageHandle handles}, shared by refcount, protected from remote writers by
 * writer pins, and admitted by a reservation-based admission that answers with a typed
 * {@link Admission.Decision} and never a placeholder. This class is the facade: it owns the pool lock and
 * delegates each job to one class.
 *
 * <pre>
 *   HandleOps        a handle's events: refusals, counts, the transports' view        ┐ lock-free
 *   SlotTable        one state word per slot, changed only by CAS through             │
 *                    SlotStateMachine; PageCounts follows every change                ┘
 *   PoolAllocations  admission and allocation, in that order of checks               ┐
 *   PageAllocator    free stack, return stack, allocator cache, fills, evictions      │ pool lock
 *   Reservations     reserved pages, admission's rule, reservation ids, refusals      │
 *   PrefixSharing    attach, publish, copy-on-write over the PrefixCache index        ┘
 *   StorageLifetime  storage kept after close while pages are pinned
 *   AccountingCheck  the full scan behind verifyAccounting()
 *   PageStorage      the bytes; knows nothing of handles or states
 * </pre>
 *
 * <h2>Threads</h2>
 * <ul>
 *   <li><b>Lock-free, any thread</b>: {@link #retain}, {@link #release}, {@link #validate}, {@link #page},
 *       {@link #state}, {@link #metrics()} and the writer-pin steps of {@link #handles()} except
 *       {@code pinWriter}, {@code pinWriters} and {@code appendPinned}. Each is linearizable at the single CAS of its
 *       slot's state word (or its read). A release that frees a page fills it and pushes it to the return stack
 *       without the lock; one that retires a published page takes the lock to take it out of the prefix index.</li>
 *   <li><b>Thread-safe, serialized by the pool lock</b> (typically the scheduler thread): admission
 *       ({@link #admit}, {@link #tryReserve}, {@link #openSequence}, {@link #cancelReservation}),
 *       allocation ({@link #tryAllocate} and {@link Sequence}s), {@code pinWriter}, {@link #snapshot}
 *       (briefly), {@link #verifyAccounting}, {@link #close}. Page fills happen outside the lock, but for
 *       the pages an allocation that failed part way gives back under it.</li>
 *   <li>A {@link Sequence} is not thread-safe: one thread at a time, handed over with a happens-before edge.</li>
 * </ul>
 *
 * <h2>Accounting</h2>
 * At every quiescent point {@code free + owned + receiving + draining + quarantined + retired == capacity}
 * and {@code reserved ≤ free}; {@link #verifyAccounting()} checks this with a full scan.
 */
public final class KvPool implements AutoCloseable {

    private static final System.Logger LOG = System.getLogger("io.kvpool");

    private final KvLayout layout;
    private final int capacity;
    private final int poolId;
    private final PageStorage storage;
    private final SlotTable slots;
    private final PageAllocator allocator;
    private final Reservations reservations;
    private final PrefixSharing prefix;
    private final StorageLifetime lifetime;
    private final FillMode fillMode;
    private final boolean sharedReadOnly; // Safeguard.SHARED_PAGE_READ_ONLY
    private final Set<Safeguard> disabled;
    private final AllocatorLock lock = new AllocatorLock();
    private final HandleOps ops;
    private final PoolAllocations allocations;
    private final PoolMetrics metrics;
    private final Cleaner.Cleanable poolIdLease;
    private volatile boolean closed;
    private volatile String closeReport;
    /** The thread of the first close() (under the lock), and the end of its work after the lock. */
    private Thread closer;
    private final java.util.concurrent.CountDownLatch closeDone = new java.util.concurrent.CountDownLatch(1);
    /** Test hook: runs in the first close(), after it marked the pool closed and unlocked, before its report. */
    volatile Runnable afterCloseUnlocked;

    KvPool(KvPoolBuilder b, CapacityCheck.Sized size) {
        this.layout = b.layout;
        this.capacity = size.pages();
        this.disabled = b.disabled.isEmpty() ? Set.of() : Set.copyOf(b.disabled);
        this.fillMode = disabled.contains(Safeguard.FREE_PAGE_FILL) ? FillMode.NONE : b.fillMode;
        this.sharedReadOnly = !disabled.contains(Safeguard.SHARED_PAGE_READ_ONLY);
        final int[] id = new int[1];
        this.poolIdLease = PoolIds.take(this, id);
        this.poolId = id[0];
        final PrefixCache index;
        try { // a failed build gives its id back now, not when the collector finds the half-built pool
            this.slots = new SlotTable(b.slotWords.apply(capacity), poolId, !disabled.contains(Safeguard.GENERATION_CHECK),
                !disabled.contains(Safeguard.POOL_IDENTITY_CHECK));
            this.reservations = new Reservations(layout, size.maxContextTokens(), b.reservationPolicy,
                !disabled.contains(Safeguard.ADMISSION_REJECTION), b.maxReservations, poolId);
            index = new PrefixCache(capacity, layout.tokensPerPage());
            // the storage after the large heap structures above, which cannot leak it if they fail
            this.storage = Objects.requireNonNull(b.storageFactory.apply(layout, capacity), "storage factory returned null");
        } catch (RuntimeException | Error e) {
            poolIdLease.clean();
            throw e;
        }
        try {
            if (storage.pageCount() != capacity || !storage.layout().equals(layout)) {
                throw new IllegalArgumentException("storage factory returned " + storage.pageCount() + " pages of "
                    + storage.layout() + ", asked for " + capacity + " pages of " + layout);
            }
            this.allocator = new PageAllocator(slots, storage, fillMode, index, b.threadCache, lock);
            this.prefix = new PrefixSharing(slots, index, allocator, reservations, layout.tokensPerPage());
            this.lifetime = new StorageLifetime(storage, slots, lock);
            this.ops = new HandleOps(this, slots, allocator, prefix, lifetime, lock);
            this.allocations = new PoolAllocations(this, ops, slots, allocator, reservations, prefix, lock);
            this.metrics = new PoolMetrics(capacity, slots.counts(), allocator, reservations, prefix, ops);
        } catch (RuntimeException | Error e) {
            storage.close();
            poolIdLease.clean();
            throw e;
        }
        Safeguard.warnIfDisabled(disabled);
    }

    /**
     * Starts building a pool of pages with the given layout.
     *
     * @param layout the page layout
     * @return a builder; set a size ({@link KvPoolBuilder#pages} or {@link KvPoolBuilder#byteBudget}) and
     *         {@link KvPoolBuilder#maxContextTokens}
     * @throws NullPointerException if {@code layout} is null
     */
    public static KvPoolBuilder builder(KvLayout layout) {
        return new KvPoolBuilder(layout);
    }

    /** {@return the layout} */
    public KvLayout layout() {
        return layout;
    }

    /** {@return the number of pages} */
    public int capacity() {
        return capacity;
    }

    /** {@return this pool's id, which every handle it issues carries (see {@link PageHandle})} */
    public int poolId() {
        return poolId;
    }

    /** {@return the storage holding the pages' bytes} */
    public PageStorage storage() {
        return storage;
    }

    /** {@return the max context (after clamping, if {@link ContextPolicy#CLAMP} applied)} */
    public long maxContextTokens() {
        return reservations.maxContextTokens();
    }

    /** {@return the fill applied to freed pages} */
    public FillMode fillMode() {
        return fillMode;
    }

    /** {@return the safeguards disabled for testing (empty for every production pool)} */
    public Set<Safeguard> disabledSafeguards() {
        return disabled;
    }

    /** {@return whether {@link #close()} was called} */
    public boolean isClosed() {
        return closed;
    }


    /**
     * Adds a reference to an OWNED page.
     *
     * @param handle the page's handle
     * @throws StaleHandleException           if the handle is stale or not a handle of this pool
     * @throws IllegalSlotTransitionException if the page is not OWNED
     * @throws IllegalStateException          if the pool is closed, or the page has the most references a page can have
     */
    public void retain(long handle) {
        ops.transition(handle, SlotEvent.RETAIN);
    }

    /**
     * Drops a reference. The page becomes FREE only when this was the last reference and no writer pin
     * holds it; it is then filled (see {@link FillMode}) and returned to the free pages, unless it holds a
     * published prefix, which stays intact and reusable until it is evicted (and filled then).
     *
     * <p>References carry no holder identity: a holder that releases a reference it does not have drops
     * someone else's. Release exactly what you retained or allocated; {@link Sequence} does that for its pages.
     *
     * @param handle the page's handle
     * @return whether this call freed the page
     * @throws StaleHandleException           if the handle is stale or not a handle of this pool
     * @throws IllegalSlotTransitionException if the page's state does not allow it (a pinned page with no reference)
     * @throws IllegalStateException          if the pool is closed and keeps no pinned pages
     */
    public boolean release(long handle) {
        return SlotStateMachine.phase(ops.transition(handle, SlotEvent.RELEASE)) == SlotStateMachine.FREE;
    }

    /**
     * {@link #retain} of {@code handles[from .. to)}, all or none: if one page cannot be retained, the references
     * this call added are dropped again and the refusal for that page is thrown. For a holder of many pages at
     * once, such as a transfer sender keeping a request's pages while it copies them.
     *
     * @param handles the pages' handles
     * @param from    first index, inclusive
     * @param to      last index, exclusive
     * @throws StaleHandleException           if a handle is stale or not a handle of this pool
     * @throws IllegalSlotTransitionException if a page is not OWNED
     * @throws IllegalStateException          if the pool is closed, or a page has the most references a page can have
     * @throws IndexOutOfBoundsException      if the range is not within {@code handles}
     */
    public void retainAll(long[] handles, int from, int to) {
        ops.retainAll(handles, from, to);
    }

    /**
     * {@link #release} of {@code handles[from .. to)}, the last first; the pages that become FREE reach the free
     * pages in runs. A refusal does not stop it: every other page is released, then the first refusal is thrown.
     *
     * @param handles the pages' handles
     * @param from    first index, inclusive
     * @param to      last index, exclusive
     * @throws StaleHandleException           if a handle is stale or not a handle of this pool
     * @throws IllegalSlotTransitionException if a page's state does not allow it
     * @throws IllegalStateException          if the pool is closed and keeps no pinned pages
     * @throws IndexOutOfBoundsException      if the range is not within {@code handles}
     */
    public void releaseAll(long[] handles, int from, int to) {
        java.util.Objects.checkFromToIndex(from, to, handles.length);
        ops.releaseAll(handles, from, to);
    }

    /**
     * {@return the writer-pin operations for transports (pin, commit, drain, quarantine); not application API} On the
     * module path only kvpool's transport modules can use them; on the class path nothing stops a caller, and a
     * release of a quarantined page through them frees memory a remote peer may still write. Internal.
     */
    @SuppressWarnings("exports") // io.kvpool.spi is exported to the transport modules only
    public TransportHandles handles() {
        return ops.transportView();
    }

    /**
     * Checks a handle without throwing or allocating.
     *
     * @param handle the page's handle
     * @return the slot index if the handle is current and its page accessible (OWNED or RECEIVING), else
     *         {@link PageHandle#STALE}, {@link PageHandle#INVALID}, {@link PageHandle#FOREIGN} or
     *         {@link PageHandle#ILLEGAL_STATE} (the first three are counted)
     * @throws IllegalStateException if the pool is closed
     */
    public long validate(long handle) {
        ensureOpen();
        return ops.validate(handle);
    }

    /** @return the slot of a current, accessible page; throws the refusal {@link #validate} describes (internal) */
    int accessibleSlot(long handle) {
        ensureOpen();
        return ops.accessibleSlot(handle);
    }

    /**
     * Gives access to a page's bytes in host storage, after checking that the handle is current and its
     * page OWNED or RECEIVING. The caller must hold a reference (or the writer pin) while using them.
     * Lock-free, any thread.
     *
     * <p>A shared page is immutable, so its segment is read-only: a page another reference also holds (a
     * prefix attached from the cache, a fork's pages) or one that holds a published prefix. A write into it
     * throws {@link IllegalArgumentException} instead of changing another holder's KV. To write, append
     * first: the append copies a shared last page. Decided at this call: a page shared later (a publish, a
     * {@link #retain}, a fork) does not make an earlier segment read-only. Only writes through this segment are
     * refused (a write through its {@code asByteBuffer()} throws {@link java.nio.ReadOnlyBufferException}); the
     * storage's own segments and native code given its address are not checked.
     *
     * @param handle the page's handle
     * @return a segment over the page's bytes, read-only if the page is shared
     * @throws StaleHandleException           if the handle is stale, invalid or of another pool
     * @throws IllegalSlotTransitionException if the page is DRAINING or QUARANTINED
     * @throws IllegalStateException          if the pool is closed
     * @throws UnsupportedOperationException  if the storage is not host-accessible
     */
    public MemorySegment page(long handle) {
        final int slot = accessibleSlot(handle);
        final MemorySegment page = storage.hostPage(slot);
        return sharedReadOnly && prefix.mustCopyBeforeWrite(slot) ? page.asReadOnly() : page;
    }

    /**
     * Finds the first token of a page that still holds the free-page canary ({@link FillMode#CANARY}), i.e.
     * that was not written since the page was last freed. Lock-free, any thread.
     *
     * @param handle    the page's handle
     * @param fromToken first token to look at
     * @param toToken   one past the last token to look at
     * @return the first token in {@code [fromToken, toToken)} of the page that still holds the free-page
     *         canary, or -1 (see {@link PageStorage#firstCanaryToken})
     * @throws StaleHandleException           if the handle is stale, invalid or of another pool
     * @throws IllegalSlotTransitionException if the page is DRAINING or QUARANTINED
     * @throws IllegalStateException          if the pool is closed
     * @throws IndexOutOfBoundsException      unless {@code 0 ≤ fromToken ≤ toToken ≤ tokensPerPage}
     */
    public int firstCanaryToken(long handle, int fromToken, int toToken) {
        final int slot = accessibleSlot(handle);
        Objects.checkFromToIndex(fromToken, toToken, layout.tokensPerPage()); // whatever the storage checks
        return storage.firstCanaryToken(slot, fromToken, toToken);
    }

    /**
     * Reads the state of the page a handle names, without throwing for a bad handle. Lock-free, any thread. A
     * question, not an operation: a stale or foreign handle is not counted among the refused ones.
     *
     * @param handle the page's handle
     * @return the page's state, or {@code null} if the handle is stale, invalid or foreign
     * @throws IllegalStateException if the pool is closed
     */
    public SlotState state(long handle) {
        ensureOpen();
        return slots.stateOf(handle);
    }

    /**
     * Reads a slot's state now, for monitoring and tests. Lock-free, any thread; works after close.
     *
     * @param slot slot index
     * @return the slot's state
     * @throws IndexOutOfBoundsException if the slot is not in {@code 0..capacity-1}
     */
    public SlotState stateOfSlot(int slot) {
        Objects.checkIndex(slot, capacity);
        return SlotStateMachine.state(slots.wordVolatile(slot));
    }

    /**
     * Reads a slot's refcount now, for monitoring and tests. Lock-free, any thread; works after close.
     *
     * @param slot slot index
     * @return the slot's refcount
     * @throws IndexOutOfBoundsException if the slot is not in {@code 0..capacity-1}
     */
    public int refcountOfSlot(int slot) {
        Objects.checkIndex(slot, capacity);
        return SlotStateMachine.refcount(slots.wordVolatile(slot));
    }


    /**
     * Admits a request of {@code promptTokens} prompt tokens that may generate {@code maxNewTokens} more.
     *
     * @param promptTokens prompt tokens, ≥ 1
     * @param maxNewTokens tokens the request may generate, ≥ 0
     * @return the decision; on {@link Admission.Decision#ADMITTED} it carries a new {@link Sequence} with a
     *         reservation for every page the request can need under {@link ReservationPolicy#FULL} (the default),
     *         for the prompt's pages only under {@link ReservationPolicy#PROMPT_ONLY}. The reservation is held until
     *         that sequence is closed, or the admission if nobody took the sequence ({@link Admission#close()})
     * @throws IllegalArgumentException if {@code promptTokens < 1} or {@code maxNewTokens < 0}
     * @throws IllegalStateException    if the pool is closed
     */
    public Admission admit(int promptTokens, int maxNewTokens) {
        return allocations.admit(promptTokens, maxNewTokens, null, 0);
    }

    /**
     * Admits a request and attaches the longest cached prefix of its prompt: full pages published under
     * the same {@code cacheSalt} with the same token ids. At most {@code (prompt − 1) / tokensPerPage}
     * pages are attached, so at least the last prompt token is always computed (its logits are needed).
     * Admission reserves as if nothing were cached and returns the reservation of every page it shares,
     * so a cache hit never makes a request fail later.
     *
     * @param promptTokenIds the prompt's token ids (length ≥ 1)
     * @param maxNewTokens   tokens the request may generate, ≥ 0
     * @param cacheSalt      the tenant's cache namespace, not 0; {@link PrefixHash#SHARED_SALT} only for opted-in sharing
     * @return the decision; an admitted sequence's {@link Sequence#tokenCount()} is the number of cached tokens. As
     *         for {@link #admit(int, int)}, close the sequence, or the admission if nobody took the sequence
     * @throws IllegalArgumentException if the prompt is empty, {@code maxNewTokens < 0} or {@code cacheSalt} is 0
     * @throws IllegalStateException    if the pool is closed
     */
    public Admission admit(int[] promptTokenIds, int maxNewTokens, long cacheSalt) {
        Objects.requireNonNull(promptTokenIds, "promptTokenIds");
        PrefixCache.requireSalt(cacheSalt);
        return allocations.admit(promptTokenIds.length, maxNewTokens, promptTokenIds, cacheSalt);
    }

    /**
     * Allocation-free admission: reserves the pages a request can need and returns a reservation id to
     * pass to {@link #openSequence} (or {@link #cancelReservation}).
     *
     * @param promptTokens prompt tokens, ≥ 1
     * @param maxNewTokens tokens the request may generate, ≥ 0
     * @return a reservation id ({@code > 0}), or {@link Admission#CONTEXT_TOO_LONG},
     *         {@link Admission#EXCEEDS_POOL}, {@link Admission#RETRY_LATER}
     * @throws IllegalArgumentException if {@code promptTokens < 1} or {@code maxNewTokens < 0}
     * @throws IllegalStateException    if the pool is closed
     */
    public long tryReserve(int promptTokens, int maxNewTokens) {
        return allocations.tryReserve(promptTokens, maxNewTokens);
    }

    /**
     * Turns a reservation from {@link #tryReserve} into a sequence that owns it.
     *
     * @param reservationId the id {@link #tryReserve} returned
     * @return the sequence, holding the reservation
     * @throws IllegalArgumentException if the id is unknown, already opened or cancelled
     * @throws IllegalStateException    if the pool is closed
     */
    public Sequence openSequence(long reservationId) {
        return allocations.openSequence(reservationId);
    }

    /**
     * Returns a reservation's pages to the pool.
     *
     * @param reservationId the id {@link #tryReserve} returned
     * @throws IllegalArgumentException if the id is unknown, already opened or cancelled
     * @throws IllegalStateException    if the pool is closed
     */
    public void cancelReservation(long reservationId) {
        allocations.cancelReservation(reservationId);
    }


    /**
     * Appends {@code tokens} tokens to each of {@code batch[0 .. count)}: one decode step of a batch, as
     * {@link Sequence#append} on each, with the pages the step needs allocated under one acquisition of the pool
     * lock (a step that needs none takes no lock). Allocation-free, except a step that evicts cached prefix pages: it
     * copies their slots for the fill that follows outside the lock. All or nothing: when it throws or returns a
     * negative number, no sequence changed; except, as for {@link Sequence#append}, a failure releasing the pages the
     * step's copies-on-write replaced, which comes after every sequence was appended to.
     *
     * @param batch  the sequences, each at most once, all of this pool and owned by the calling thread
     * @param count  how many of {@code batch} take part, from index 0
     * @param tokens tokens to add to each, ≥ 0 (1 for a plain decode step)
     * @return the pages allocated (≥ 0); or {@code -short} when the sequences need pages their reservations do not
     *         cover and the pool has {@code short} too few free unreserved pages: nothing changed (free pages, e.g.
     *         by preempting a sequence, and retry)
     * @throws IllegalArgumentException  if {@code tokens < 0}, a sequence is null, of another pool or in the batch
     *                                   twice, or an append would exceed the max context
     * @throws IndexOutOfBoundsException if {@code count} is negative or beyond {@code batch.length}
     * @throws StaleHandleException      if a copy-on-write finds a sequence's last-page handle no longer current (the
     *                                   page was released behind its back); no sequence changed
     * @throws IllegalStateException     if a sequence or the pool is closed
     */
    public int appendEach(Sequence[] batch, int count, int tokens) {
        return BatchAppend.appendEach(this, batch, count, tokens);
    }

    /**
     * Allocates one page outside any sequence (e.g. a staging buffer), from the free pages that no
     * admitted request has reserved. The caller owns the returned reference and frees it with
     * {@link #release}. Allocation-free, unless it evicts a cached prefix page (as {@link #appendEach}).
     *
     * @return the handle of an OWNED page with refcount 1, or {@link PageHandle#EXHAUSTED}
     * @throws IllegalStateException if the pool is closed (a call racing with {@link #close()} on the
     *                               allocator thread may still return a handle; every use of it throws)
     */
    public long tryAllocate() {
        return allocations.tryAllocate();
    }

    /**
     * Hands the calling thread's allocator cache (see {@link KvPoolBuilder#threadCache}) back to the free pages,
     * where every thread's admission sees them. Other threads take an idle owner's pages themselves when
     * they come up short; calling this before the allocator thread goes idle saves them that step.
     * Does nothing on other threads or without a cache.
     *
     * @throws IllegalStateException if the pool is closed
     */
    public void flushAllocatorCache() {
        allocations.flushAllocatorCache();
    }

    // internal: the allocations Sequence makes through the pool lock; raw transitions, for tests
    PoolAllocations allocations() { return allocations; }
    /** @return how many pages became FREE: {@link #releaseAll(long[], int, int)} with no range check, for Sequence */
    int releaseFreeing(long[] handles, int from, int to) { return ops.releaseAll(handles, from, to); }
    long tryTransition(long handle, SlotEvent event) { return ops.tryTransition(handle, event); }


    /** {@return the pool's gauges and counters, each readable at O(1) cost from any thread without the pool lock} */
    public PoolMetrics metrics() {
        return metrics;
    }

    /**
     * {@return page counts by state and the counters, exact at a quiescent point} No slot scan: a short
     * critical section under the pool lock takes in the pages freed since the last allocation. Any thread;
     * works after close.
     */
    public PoolSnapshot snapshot() {
        lock.lock();
        try {
            allocator.drainReturnedLocked();
            return metrics.read();
        } finally {
            lock.unlock();
        }
    }

    /**
     * Checks the accounting invariants with a full scan of every slot and free structure (O(capacity): about
     * 3.4 ms and 5 MiB of scratch at a million pages, under the pool lock; see {@link AccountingCheck}). Call
     * only at a quiescent point: the counted page states equal the scanned ones, they add up to the capacity,
     * {@code 0 ≤ reserved ≤ free}, and every FREE slot is in exactly one free structure.
     *
     * @return the snapshot that was checked
     * @throws IllegalStateException describing the first violation
     */
    public PoolSnapshot verifyAccounting() {
        lock.lock();
        try {
            allocator.drainReturnedLocked();
            return AccountingCheck.verifyLocked(metrics.read(), slots, allocator, prefix);
        } finally {
            lock.unlock();
        }
    }

    /** {@return the report written by {@link #close()} if anything was outstanding, else empty} */
    public Optional<String> closeReport() {
        return Optional.ofNullable(closeReport);
    }

    /**
     * Closes the pool. Idempotent: a call while another thread closes the pool returns once that close has written its
     * report and released (or kept) the storage. Outstanding pages, sequences and reservations are reported loudly (an
     * ERROR log with counts by state, also available from {@link #closeReport()}). Memory is released
     * unless pages are still pinned for remote writes (RECEIVING, DRAINING, QUARANTINED): a peer may still
     * write into it, so the storage stays allocated until the last pin ends. While it stays, the pool accepts the
     * transport's steps that move or end a pin ({@link TransportHandles}) and releases of references, so that the
     * transport can finish; no new reference or pin is taken ({@link #retain}, {@code pinWriter} throw). The
     * read-only views ({@link #snapshot()}, {@link #metrics()}, {@link #verifyAccounting()}, {@link #stateOfSlot},
     * {@link #refcountOfSlot}, {@link #closeReport()}, the getters) keep working; every other operation throws
     * {@link IllegalStateException}, as everything but those views does once the storage is released. A close that
     * fails before its report is made (an error while counting the pages) still closes the pool and releases (or keeps)
     * the storage as above, then throws what failed; a later call returns.
     */
    @Override
    public void close() {
        if (closed && lock.isHeldByCurrentThread()) {
            return; // a storage whose close closes the pool again: the release that called it holds the pool lock
        }
        PoolSnapshot snap;
        Thread first = null;
        Throwable failedClose = null;
        lock.lock();
        try {
            if (closed) {
                first = closer;
                snap = null;
            } else {
                closer = Thread.currentThread();
                try {
                    lifetime.markRetainedLocked(); // before `closed`: an unpin racing the close is accepted from its first moment
                    closed = true;
                    allocator.drainReturnedLocked();
                    snap = metrics.read();
                    // not snap's three counts: read one after another, a page moving between pinned phases may be in two
                    lifetime.retainedAtClose(slots.counts().pinnedAtMostOnce());
                } catch (RuntimeException | Error e) {
                    failedClose = e;
                    snap = null;
                }
            }
        } finally {
            lock.unlock();
        }
        if (failedClose != null) {
            // Closed without a report: the storage goes as on any close, now if no page is pinned, else with the unpin
            // that leaves none (no pinned count was added, so every unpin event scans). A later close() returns at once.
            try {
                poolIdLease.clean();
                lifetime.releaseIfUnpinned();
            } catch (RuntimeException | Error also) {
                failedClose.addSuppressed(also);
            } finally {
                closeDone.countDown();
            }
            if (failedClose instanceof RuntimeException r) {
                throw r;
            }
            throw (Error) failedClose;
        }
        if (snap == null) {
            awaitClosedBy(first); // outside the lock: the first close may need it to release the storage
            return;
        }
        try {
            final Runnable hook = afterCloseUnlocked;
            if (hook != null) {
                hook.run();
            }
            poolIdLease.clean();
            if ((closeReport = snap.outstandingReport()) != null) {
                try {
                    LOG.log(System.Logger.Level.ERROR, closeReport);
                } catch (RuntimeException logging) {
                    // the report stays readable (closeReport()); a failing log backend must not keep the storage
                }
            }
        } finally {
            try {
                lifetime.releaseIfUnpinned(); // now, or with the last unpin event; also after a failure above
            } finally {
                closeDone.countDown();
            }
        }
    }

    /**
     * A second close() returns once the first has written its report and released (or kept) the storage, as the
     * first does; at once on the closing thread itself (a storage whose close closes the pool again).
     */
    private void awaitClosedBy(Thread first) {
        if (first == Thread.currentThread()) {
            return;
        }
        boolean interrupted = false;
        while (true) {
            try {
                closeDone.await();
                break;
            } catch (InterruptedException e) {
                interrupted = true; // close() is not interruptible: the storage must be released before it returns
            }
        }
        if (interrupted) {
            Thread.currentThread().interrupt();
        }
    }

    /** Internal. @throws IllegalStateException if the pool is closed */
    void ensureOpen() {
        if (closed) {
            throw new IllegalStateException("kvpool is closed");
        }
    }

    // the parts, for tests in this package
    SlotTable slotTable() { return slots; }
    PageAllocator allocator() { return allocator; }
    Reservations reservations() { return reservations; }
    StorageLifetime lifetime() { return lifetime; }

    @Override
    public String toString() {
        return "KvPool[" + capacity + " pages of " + layout + ", max context " + maxContextTokens() + " tokens, id " + poolId
            + (disabled.isEmpty() ? "" : ", UNSAFE: safeguards disabled " + disabled) + "]";
    }
}
