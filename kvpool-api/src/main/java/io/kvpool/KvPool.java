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
import java.util.concurrent.atomic.LongAdder;
import java.util.function.BiFunction;

/**
 * A paged KV-cache pool: a fixed number of pages in a {@link PageStorage}, handed out as
 * generation-tagged {@link PageHandle handles}, shared by refcount, protected from remote writers by
 * writer pins, and admitted by a reservation-based admission that answers with a typed
 * {@link Admission.Decision} and never a placeholder. This class is the facade: it owns the pool lock and
 * delegates each job to one class.
 *
 * <pre>
 *   SlotTable        one state word per slot (pool id check, generation | phase | refcount), changed only
 *                    through SlotStateMachine by CAS; PageCounts follows every change          lock-free
 *   PageAllocator    free stack, return stack, allocator cache, fills, evictions        ┐
 *   Reservations     reserved pages, admission's rule, reservation ids, refusal counts  ├ pool lock
 *   PrefixSharing    attach, publish, copy-on-write over the PrefixCache index          ┘
 *   StorageLifetime  storage kept after close while pages are pinned
 *   AccountingCheck  the full scan behind verifyAccounting()
 *   PageStorage      the bytes; knows nothing of handles or states
 * </pre>
 *
 * <h2>Threads</h2>
 * <ul>
 *   <li><b>Lock-free, any thread</b>: {@link #retain}, {@link #release}, {@link #validate}, {@link #page},
 *       {@link #state}, {@link #metrics()} and the writer-pin steps of {@link #handles()} except
 *       {@code pinWriter}. Each is linearizable at the single CAS of its slot's state word (or its read).
 *       A release that frees a page fills it and pushes it to the return stack without the lock.</li>
 *   <li><b>Thread-safe, serialized by the pool lock</b> (typically the scheduler thread): admission
 *       ({@link #admit}, {@link #tryReserve}, {@link #openSequence}, {@link #cancelReservation}),
 *       allocation ({@link #tryAllocate} and {@link Sequence}s), {@code pinWriter}, {@link #snapshot}
 *       (briefly), {@link #verifyAccounting}, {@link #close}. Page fills happen outside the lock.</li>
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
    private final Set<Safeguard> disabled;
    private final AllocatorLock lock = new AllocatorLock();
    private final LongAdder staleRefused = new LongAdder();
    private final LongAdder foreignRefused = new LongAdder();
    private final PoolMetrics metrics = new PoolMetrics(this);
    private final TransportHandles handles = new Handles();
    private final Cleaner.Cleanable poolIdLease;
    private volatile boolean closed;
    private volatile String closeReport;

    private KvPool(Builder b, CapacityCheck.Sized size) {
        this.layout = b.layout;
        this.capacity = size.pages();
        this.disabled = b.disabled.isEmpty() ? Set.of() : Set.copyOf(b.disabled);
        this.fillMode = disabled.contains(Safeguard.FREE_PAGE_FILL) ? FillMode.NONE : b.fillMode;
        final int[] id = new int[1];
        this.poolIdLease = PoolIds.take(this, id);
        this.poolId = id[0];
        this.slots = new SlotTable(b.slotWords.apply(capacity), poolId, !disabled.contains(Safeguard.GENERATION_CHECK),
            !disabled.contains(Safeguard.POOL_IDENTITY_CHECK));
        this.reservations = new Reservations(layout, size.maxContextTokens(), b.reservationPolicy,
            !disabled.contains(Safeguard.ADMISSION_REJECTION), b.maxReservations);
        final PrefixCache index = new PrefixCache(capacity, layout.tokensPerPage());
        // the storage after the large heap structures above, which cannot leak it if they fail
        this.storage = Objects.requireNonNull(b.storageFactory.apply(layout, capacity), "storage factory returned null");
        try {
            if (storage.pageCount() != capacity || !storage.layout().equals(layout)) {
                throw new IllegalArgumentException("storage factory returned " + storage.pageCount() + " pages of "
                    + storage.layout() + ", asked for " + capacity + " pages of " + layout);
            }
            this.allocator = new PageAllocator(slots, storage, fillMode, index, b.threadCache, lock);
            this.prefix = new PrefixSharing(slots, index, allocator, reservations, layout.tokensPerPage());
            this.lifetime = new StorageLifetime(storage, slots, lock);
        } catch (RuntimeException | Error e) {
            storage.close();
            poolIdLease.clean();
            throw e;
        }
        if (!disabled.isEmpty()) {
            LOG.log(System.Logger.Level.ERROR, "UNSAFE kvpool built with safeguards DISABLED: " + disabled
                + " — for tests and incident replays only; this pool can leak one request's KV to another");
        }
    }

    /**
     * @param layout the page layout
     * @return a builder; set a size ({@link Builder#pages} or {@link Builder#byteBudget}) and
     *         {@link Builder#maxContextTokens}
     */
    public static Builder builder(KvLayout layout) {
        return new Builder(layout);
    }

    /** @return the layout */
    public KvLayout layout() {
        return layout;
    }

    /** @return the number of pages */
    public int capacity() {
        return capacity;
    }

    /** @return this pool's id, which every handle it issues carries (see {@link PageHandle}) */
    public int poolId() {
        return poolId;
    }

    /** @return the storage holding the pages' bytes */
    public PageStorage storage() {
        return storage;
    }

    /** @return the max context (after clamping, if {@link ContextPolicy#CLAMP} applied) */
    public long maxContextTokens() {
        return reservations.maxContextTokens();
    }

    /** @return the fill applied to freed pages */
    public FillMode fillMode() {
        return fillMode;
    }

    /** @return the safeguards disabled for testing (empty for every production pool) */
    public Set<Safeguard> disabledSafeguards() {
        return disabled;
    }

    /** @return whether {@link #close()} was called */
    public boolean isClosed() {
        return closed;
    }

    // ---- handles (lock-free, any thread) ----

    /**
     * Applies an event to the page a handle names, without throwing or allocating. Internal: applications
     * use {@link #retain}/{@link #release}, transports {@link #handles()}.
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
        if (closed && (!lifetime.retained() || event == SlotEvent.RETAIN)) {
            throw new IllegalStateException("kvpool is closed");
        }
        final long word = slots.apply(handle, event);
        if (word < 0) {
            countRefusal(word);
            return word;
        }
        final int phase = SlotStateMachine.phase(word);
        if (phase == SlotStateMachine.FREE) {
            allocator.onBecameFree(PageHandle.slot(handle), closed);
        } else if (phase == SlotStateMachine.RETIRED && prefix.isPublished(PageHandle.slot(handle))) {
            lock.lock();
            try {
                prefix.unpublishLocked(PageHandle.slot(handle));
            } finally {
                lock.unlock();
            }
        }
        if (closed && (event == SlotEvent.COMMIT_RECEIVE || event == SlotEvent.DRAINED || event == SlotEvent.RELEASE_QUARANTINE)) {
            lifetime.afterUnpinEvent(word);
        }
        return word;
    }

    private void countRefusal(long code) {
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
            ensureOpen();
            final long slot = slots.validate(handle);
            if (slot < 0) {
                countRefusal(slot);
                return slot;
            }
            if (prefix.isPublished((int) slot)) {
                return PageHandle.ILLEGAL_STATE;
            }
            final long word = slots.apply(handle, SlotEvent.PIN_WRITER);
            countRefusal(word);
            return word;
        } finally {
            lock.unlock();
        }
    }

    private long transition(long handle, SlotEvent event) {
        final long word = tryTransition(handle, event);
        if (word < 0) {
            throw refusal(handle, word, event);
        }
        return word;
    }

    private RuntimeException refusal(long handle, long code, SlotEvent event) {
        final String what = event == null ? "access" : event.toString();
        if (code == PageHandle.INVALID) {
            return new StaleHandleException(handle, what + " refused: " + PageHandle.toString(handle)
                + " is not a page handle of this pool (capacity " + capacity + ")");
        }
        if (code == PageHandle.FOREIGN) {
            return new StaleHandleException(handle, what + " refused: " + PageHandle.toString(handle)
                + " was issued by pool " + PageHandle.pool(handle) + ", not by this pool (" + poolId + ")");
        }
        final int slot = PageHandle.slot(handle);
        final long now = slots.wordVolatile(slot);
        if (code == PageHandle.STALE) {
            return new StaleHandleException(handle, what + " refused: stale handle " + PageHandle.toString(handle)
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

    /**
     * Adds a reference to an OWNED page.
     *
     * @param handle the page's handle
     * @throws StaleHandleException           if the handle is stale or not a handle of this pool
     * @throws IllegalSlotTransitionException if the page is not OWNED
     * @throws IllegalStateException          if the pool is closed, or the page has the most references a page can have
     */
    public void retain(long handle) {
        transition(handle, SlotEvent.RETAIN);
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
        return SlotStateMachine.phase(transition(handle, SlotEvent.RELEASE)) == SlotStateMachine.FREE;
    }

    /**
     * @return the writer-pin operations for transports (pin, commit, drain, quarantine); not application API
     */
    @SuppressWarnings("exports") // io.kvpool.spi is exported to the transport modules only
    public TransportHandles handles() {
        return handles;
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
        public void commitReceive(long handle) {
            transition(handle, SlotEvent.COMMIT_RECEIVE);
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
        final long v = slots.validate(handle);
        countRefusal(v);
        return v;
    }

    private int accessibleSlot(long handle) {
        final long v = validate(handle);
        if (v < 0) {
            throw refusal(handle, v, null);
        }
        return (int) v;
    }

    /**
     * @param handle the page's handle
     * @return the page's bytes (host storage only), after checking the handle is current and its page
     *         OWNED or RECEIVING. The caller must hold a reference (or the writer pin) while using them.
     * @throws StaleHandleException           if the handle is stale, invalid or of another pool
     * @throws IllegalSlotTransitionException if the page is DRAINING or QUARANTINED
     */
    public MemorySegment page(long handle) {
        return storage.hostPage(accessibleSlot(handle));
    }

    /**
     * @param handle    the page's handle
     * @param fromToken first token to look at
     * @param toToken   one past the last token to look at
     * @return the first token in {@code [fromToken, toToken)} of the page that still holds the free-page
     *         canary, or -1 (see {@link PageStorage#firstCanaryToken})
     * @throws StaleHandleException           if the handle is stale, invalid or of another pool
     * @throws IllegalSlotTransitionException if the page is DRAINING or QUARANTINED
     */
    public int firstCanaryToken(long handle, int fromToken, int toToken) {
        return storage.firstCanaryToken(accessibleSlot(handle), fromToken, toToken);
    }

    /**
     * @param handle the page's handle
     * @return the state of the page a handle names, or {@code null} if the handle is stale, invalid or foreign
     * @throws IllegalStateException if the pool is closed
     */
    public SlotState state(long handle) {
        ensureOpen();
        if (!PageHandle.isHandle(handle) || PageHandle.slot(handle) >= capacity || slots.validate(handle) == PageHandle.FOREIGN) {
            return null;
        }
        final long word = slots.wordVolatile(PageHandle.slot(handle));
        final int phase = SlotStateMachine.phase(word);
        if (phase == SlotStateMachine.FREE || phase == SlotStateMachine.RETIRED
            || SlotStateMachine.generation(word) != PageHandle.generation(handle)) {
            return null;
        }
        return SlotStateMachine.state(word);
    }

    /**
     * @param slot slot index
     * @return the state of the slot now (for monitoring and tests)
     * @throws IndexOutOfBoundsException if the slot is not in {@code 0..capacity-1}
     */
    public SlotState stateOfSlot(int slot) {
        Objects.checkIndex(slot, capacity);
        return SlotStateMachine.state(slots.wordVolatile(slot));
    }

    /**
     * @param slot slot index
     * @return the refcount of the slot now (for monitoring and tests)
     * @throws IndexOutOfBoundsException if the slot is not in {@code 0..capacity-1}
     */
    public int refcountOfSlot(int slot) {
        Objects.checkIndex(slot, capacity);
        return SlotStateMachine.refcount(slots.wordVolatile(slot));
    }

    // ---- admission (pool lock) ----

    /**
     * Admits a request of {@code promptTokens} prompt tokens that may generate {@code maxNewTokens} more.
     *
     * @param promptTokens prompt tokens, ≥ 1
     * @param maxNewTokens tokens the request may generate, ≥ 0
     * @return the decision; on {@link Admission.Decision#ADMITTED} it carries a new {@link Sequence} with a
     *         reservation for every page the request can need ({@link ReservationPolicy#FULL})
     * @throws IllegalArgumentException if {@code promptTokens < 1} or {@code maxNewTokens < 0}
     * @throws IllegalStateException    if the pool is closed
     */
    public Admission admit(int promptTokens, int maxNewTokens) {
        return admit(promptTokens, maxNewTokens, null, 0);
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
     * @param cacheSalt      the tenant's cache namespace; {@link PrefixHash#SHARED_SALT} only for opted-in sharing
     * @return the decision; an admitted sequence's {@link Sequence#tokenCount()} is the number of cached tokens
     * @throws IllegalArgumentException if the prompt is empty or {@code maxNewTokens < 0}
     * @throws IllegalStateException    if the pool is closed
     */
    public Admission admit(int[] promptTokenIds, int maxNewTokens, long cacheSalt) {
        Objects.requireNonNull(promptTokenIds, "promptTokenIds");
        return admit(promptTokenIds.length, maxNewTokens, promptTokenIds, cacheSalt);
    }

    private Admission admit(int prompt, int maxNewTokens, int[] promptTokenIds, long cacheSalt) {
        checkRequest(prompt, maxNewTokens);
        lock.lock();
        try {
            final Reservations.Grant g = decideLocked(prompt, maxNewTokens);
            Sequence seq = null;
            if (g.admitted()) {
                seq = newSequenceLocked((int) g.code(), g.admittedTokens(), cacheSalt, promptTokenIds != null);
                if (promptTokenIds != null) {
                    seq.setTokenCountAfterAttach(prefix.attachLocked(seq, promptTokenIds, cacheSalt) * layout.tokensPerPage());
                }
            }
            final Admission.Decision d = g.admitted() ? Admission.Decision.ADMITTED : Admission.decisionOf(g.code());
            return new Admission(d, seq, (long) prompt + maxNewTokens, maxContextTokens(), g.pagesNeeded(), g.pagesAvailable(),
                inService());
        } finally {
            lock.unlock();
        }
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
        checkRequest(promptTokens, maxNewTokens);
        lock.lock();
        try {
            final Reservations.Grant g = decideLocked(promptTokens, maxNewTokens);
            return g.admitted() ? reservations.open(g) : g.code();
        } finally {
            lock.unlock();
        }
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
        lock.lock();
        try {
            ensureOpen();
            final long[] r = new long[2];
            reservations.take(reservationId, false, r);
            return newSequenceLocked((int) r[0], r[1], 0, false);
        } finally {
            lock.unlock();
        }
    }

    /**
     * Returns a reservation's pages to the pool.
     *
     * @param reservationId the id {@link #tryReserve} returned
     * @throws IllegalArgumentException if the id is unknown, already opened or cancelled
     * @throws IllegalStateException    if the pool is closed
     */
    public void cancelReservation(long reservationId) {
        lock.lock();
        try {
            ensureOpen();
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
        ensureOpen();
        allocator.drainReturnedLocked();
        if (reservations.wouldWait(promptTokens, maxNewTokens, allocator.freeLocked())) {
            allocator.reclaimLocked();
        }
        return reservations.decide(promptTokens, maxNewTokens, allocator.freeLocked(), inService());
    }

    private long inService() {
        return capacity - slots.counts().retired.sum();
    }

    private Sequence newSequenceLocked(int reservedPages, long admittedTokens, long salt, boolean hasSalt) {
        reservations.sequenceOpened();
        return new Sequence(this, reservedPages, admittedTokens, salt, hasSalt);
    }

    // ---- allocation (pool lock), for Sequence ----

    /**
     * Allocates {@code count} pages for a sequence: first from its reservation, then from unreserved free
     * pages. All or nothing.
     *
     * @param out receives the handles, at {@code out[0..count)}
     * @return how many of them came from the sequence's reservation (for {@link #undoAllocation}), or
     *         {@code -1 - available} when the unreserved part cannot be had (nothing is allocated then)
     */
    long tryAllocateFor(Sequence seq, int count, long[] out) {
        final int fromReservation;
        final int[] toFill;
        lock.lock();
        try {
            ensureOpen();
            allocator.bindCacheLocked();
            allocator.flushCacheLocked(); // the owner's cached pages first (LIFO: cache-hot)
            fromReservation = Math.min(count, seq.reservedPages);
            final int unreserved = count - fromReservation;
            if (unreserved > 0 && unreserved > unreservedLocked()) {
                allocator.reclaimLocked();
                final long available = unreservedLocked();
                if (unreserved > available) {
                    return -1 - Math.max(0, available);
                }
            }
            int got = 0;
            for (; got < count; got++) {
                final long handle = allocator.takeFreePageLocked();
                if (handle < 0) {
                    break;
                }
                out[got] = handle;
            }
            if (got < count) { // only possible when slots retired under us
                allocator.clearToFillLocked(); // released below: the free path fills them
                for (int i = 0; i < got; i++) {
                    tryTransition(out[i], SlotEvent.RELEASE);
                }
                allocator.flushCacheLocked(); // back where admission counts them (the owner may have cached them)
                return -1 - Math.max(0, unreservedLocked());
            }
            seq.reservedPages -= fromReservation;
            reservations.remove(fromReservation);
            toFill = allocator.takeToFillLocked();
        } finally {
            lock.unlock();
        }
        try {
            allocator.fill(toFill);
        } catch (RuntimeException e) {
            undoAllocation(seq, out, count, fromReservation); // all or nothing
            throw e;
        }
        return fromReservation;
    }

    /** Undoes an allocation whose pages were never used: they go back free, and their reservation to the sequence. */
    void undoAllocation(Sequence seq, long[] handles, int count, int fromReservation) {
        lock.lock();
        try {
            for (int i = 0; i < count; i++) {
                tryTransition(handles[i], SlotEvent.RELEASE);
            }
            allocator.flushCacheLocked(); // back where admission counts them before the reservation is re-taken
            allocator.drainReturnedLocked();
            seq.reservedPages += fromReservation;
            reservations.add(fromReservation);
        } finally {
            lock.unlock();
        }
    }

    /**
     * Allocates one page outside any sequence (e.g. a staging buffer), from the free pages that no
     * admitted request has reserved. The caller owns the returned reference and frees it with
     * {@link #release}. Allocation-free.
     *
     * @return the handle of an OWNED page with refcount 1, or {@link PageHandle#EXHAUSTED}
     * @throws IllegalStateException if the pool is closed (a call racing with {@link #close()} on the
     *                               allocator thread may still return a handle; every use of it throws)
     */
    public long tryAllocate() {
        if (!closed) {
            final long fast = allocator.popOwnerCache();
            if (fast >= 0) {
                return fast;
            }
        }
        final long handle;
        final int[] toFill;
        lock.lock();
        try {
            ensureOpen();
            allocator.bindCacheLocked();
            allocator.drainReturnedLocked();
            if (unreservedLocked() < 1) {
                allocator.reclaimLocked();
                if (unreservedLocked() < 1) {
                    return PageHandle.EXHAUSTED;
                }
            }
            handle = allocator.takeFreePageLocked();
            toFill = allocator.takeToFillLocked();
        } finally {
            lock.unlock();
        }
        if (handle < 0) {
            return PageHandle.EXHAUSTED;
        }
        try {
            allocator.fill(toFill);
        } catch (RuntimeException e) {
            tryTransition(handle, SlotEvent.RELEASE); // back free (and marked to be filled again), never lost
            throw e;
        }
        return handle;
    }

    /**
     * Hands the calling thread's allocator cache (see {@link Builder#threadCache}) back to the free pages,
     * where every thread's admission sees them. Other threads take an idle owner's pages themselves when
     * they come up short; calling this before the allocator thread goes idle saves them that step.
     * Does nothing on other threads or without a cache.
     *
     * @throws IllegalStateException if the pool is closed
     */
    public void flushAllocatorCache() {
        lock.lock();
        try {
            ensureOpen();
            allocator.flushCacheLocked();
        } finally {
            lock.unlock();
        }
    }

    /** Tries to add up to {@code pages} to a sequence's reservation from free unreserved pages. @return pages added */
    int topUpReservation(Sequence seq, int pages) {
        lock.lock();
        try {
            ensureOpen();
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

    /**
     * Reserves pages for a fork: {@code forParent} more for the parent and {@code forChild} for the child.
     *
     * @return {@code forParent}, or {@code -1 - available} if the pool cannot reserve them (nothing changed)
     */
    long tryReserveForFork(Sequence parent, int forParent, int forChild) {
        lock.lock();
        try {
            ensureOpen();
            allocator.drainReturnedLocked();
            if (forParent + forChild > unreservedLocked()) {
                allocator.reclaimLocked();
                final long available = unreservedLocked();
                if (forParent + forChild > available) {
                    return -1 - Math.max(0, available);
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

    /** Gives back {@code pages} of a sequence's reservation (a failed fork undoing its copy-on-write page). */
    void returnReservation(Sequence seq, int pages) {
        lock.lock();
        try {
            final int n = Math.min(pages, seq.reservedPages);
            seq.reservedPages -= n;
            reservations.remove(n);
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

    private long unreservedLocked() {
        return allocator.freeLocked() - reservations.reserved();
    }

    // ---- prefix sharing, for Sequence ----

    /**
     * Publishes a sequence's full pages {@code [from, to)}; see {@link Sequence#publish}. Each page is marked
     * while this call holds a reference of its own to it (taken under the lock, dropped after it): a release
     * racing the publication, even a stray one, can then never free a page between its check and its mark.
     * The references are dropped outside the lock: a last release there may retire the slot, which takes it.
     *
     * @throws IllegalSlotTransitionException if a page is not OWNED (e.g. a peer still writes it); nothing is published
     */
    void publish(Sequence seq, int[] tokenIds, int from, int to, long salt) {
        final long[] held = new long[to - from];
        int holding = 0;
        try {
            lock.lock();
            try {
                ensureOpen();
                for (int i = from; i < to; i++) {
                    final long handle = seq.pageHandle(i);
                    final long word = slots.apply(handle, SlotEvent.RETAIN);
                    if (word >= 0) {
                        held[holding++] = handle;
                    }
                    if (word < 0 || SlotStateMachine.phase(word) != SlotStateMachine.OWNED) {
                        countRefusal(word);
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
                tryTransition(held[i], SlotEvent.RELEASE);
            }
        }
    }

    /** @return whether a page the caller holds must be copied before it writes it (see {@link PrefixSharing}) */
    boolean mustCopyBeforeWrite(int slot) {
        return prefix.mustCopyBeforeWrite(slot);
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

    // ---- metrics, accounting and close ----

    /** @return the pool's gauges and counters, each readable at O(1) cost from any thread without the pool lock */
    public PoolMetrics metrics() {
        return metrics;
    }

    /**
     * Takes every page freed since the last allocation into account (a short critical section under the pool
     * lock, O(pages freed since)) and reads the counts; no slot scan. Exact at a quiescent point.
     *
     * @return page counts by state and the counters
     */
    public PoolSnapshot snapshot() {
        lock.lock();
        try {
            allocator.drainReturnedLocked();
            return countedSnapshot();
        } finally {
            lock.unlock();
        }
    }

    /** @return the snapshot from the incremental counts (any thread; see {@link PageCounts}) */
    PoolSnapshot countedSnapshot() {
        final PageCounts c = slots.counts();
        final long allocations = allocator.allocations();
        final long receiving = c.receiving.sum();
        final long draining = c.draining.sum();
        final long quarantined = c.quarantined.sum();
        final long retired = c.retired.sum();
        final long inUse = allocations - c.ended.sum();
        return new PoolSnapshot(capacity, capacity - inUse - retired, inUse - receiving - draining - quarantined, receiving,
            draining, quarantined, retired, reservations.reserved(), allocator.freePages().cachedSize(), prefix.published(),
            reservations.openSequences(), reservations.openReservations(), allocations, prefix.hits(), allocator.evictions(),
            reservations.rejectedContextTooLong(), reservations.rejectedExceedsPool(), reservations.retryLater(),
            staleRefused.sum(), foreignRefused.sum(), c.quarantineEvents.sum());
    }

    /**
     * Checks the accounting invariants with a full scan of every slot and free structure (O(capacity): about
     * 5 ms and 5 MiB of scratch at a million pages, under the pool lock; see {@link AccountingCheck}). Call
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
            return AccountingCheck.verifyLocked(countedSnapshot(), slots, allocator, prefix);
        } finally {
            lock.unlock();
        }
    }

    /** @return the report written by {@link #close()} if anything was outstanding, else empty */
    public Optional<String> closeReport() {
        return Optional.ofNullable(closeReport);
    }

    /**
     * Closes the pool. Idempotent. Outstanding pages, sequences and reservations are reported loudly (an
     * ERROR log with counts by state, also available from {@link #closeReport()}). Memory is released
     * unless pages are still pinned for remote writes (RECEIVING, DRAINING, QUARANTINED): a peer may still
     * write into it, so the storage stays allocated until the last pin ends (the steps that end pins are
     * still accepted). The read-only views ({@link #snapshot()}, {@link #metrics()}, {@link #verifyAccounting()},
     * {@link #stateOfSlot}, {@link #refcountOfSlot}, {@link #closeReport()}, the getters) keep working; every
     * other operation throws {@link IllegalStateException}.
     */
    @Override
    public void close() {
        final PoolSnapshot snap;
        lock.lock();
        try {
            if (closed) {
                return;
            }
            lifetime.markRetainedLocked(); // before `closed`: an unpin racing the close is accepted from its first moment
            closed = true;
            allocator.drainReturnedLocked();
            snap = countedSnapshot();
            lifetime.retainedAtClose(snap.receiving() + snap.draining() + snap.quarantined());
        } finally {
            lock.unlock();
        }
        poolIdLease.clean();
        final long pinned = snap.receiving() + snap.draining() + snap.quarantined();
        if (snap.inUse() > 0 || snap.openSequences() > 0 || snap.openReservations() > 0) {
            final String report = "kvpool closed with outstanding pages: " + snap.inUse() + " of " + capacity + " in use (owned "
                + snap.owned() + ", receiving " + snap.receiving() + ", draining " + snap.draining() + ", quarantined "
                + snap.quarantined() + "), " + snap.openSequences() + " open sequences, " + snap.openReservations()
                + " open reservations, " + snap.reserved() + " pages reserved"
                + (pinned > 0 ? "; " + pinned + " pages are pinned for remote writes, so the storage is NOT released (a peer may still write into it)" : "");
            closeReport = report;
            LOG.log(System.Logger.Level.ERROR, report);
        }
        lifetime.releaseIfUnpinned(); // now, or with the last unpin event
    }

    private void ensureOpen() {
        if (closed) {
            throw new IllegalStateException("kvpool is closed");
        }
    }

    /** @return the slot table (tests) */
    SlotTable slotTable() {
        return slots;
    }

    /** @return the allocator (tests) */
    PageAllocator allocator() {
        return allocator;
    }

    /** @return admission's bookkeeping (tests) */
    Reservations reservations() {
        return reservations;
    }

    /** @return the storage's lifetime after close (tests) */
    StorageLifetime lifetime() {
        return lifetime;
    }

    @Override
    public String toString() {
        return "KvPool[" + capacity + " pages of " + layout + ", max context " + maxContextTokens() + " tokens, id " + poolId
            + (disabled.isEmpty() ? "" : ", UNSAFE: safeguards disabled " + disabled) + "]";
    }

    /** Builds a {@link KvPool}; runs the startup capacity check ({@link CapacityCheck}). Not thread-safe. */
    public static final class Builder {
        private final KvLayout layout;
        private long pages = -1;
        private long byteBudget = -1;
        private long maxContextTokens = -1;
        private ContextPolicy contextPolicy = ContextPolicy.FAIL;
        private ReservationPolicy reservationPolicy = ReservationPolicy.FULL;
        private FillMode fillMode = FillMode.CANARY;
        private int maxReservations = 4096;
        private int threadCache = 0;
        private BiFunction<KvLayout, Integer, PageStorage> storageFactory = HostPageStorage::allocate;
        private final EnumSet<Safeguard> disabled = EnumSet.noneOf(Safeguard.class);
        /** Test hook: the memory of the state words (a test substitutes a deliberately broken one). */
        java.util.function.IntFunction<SlotWords> slotWords = SlotWords::ofArray;

        private Builder(KvLayout layout) {
            this.layout = Objects.requireNonNull(layout, "layout");
        }

        /**
         * @param pages pool size in pages, 1 .. {@link PageHandle#MAX_SLOT} + 1 (checked at build)
         * @return this builder
         */
        public Builder pages(long pages) {
            this.pages = pages;
            this.byteBudget = -1;
            return this;
        }

        /**
         * @param bytes memory to fill with pages: the pool has the most pages that fit
         * @return this builder
         */
        public Builder byteBudget(long bytes) {
            this.byteBudget = bytes;
            this.pages = -1;
            return this;
        }

        /**
         * @param tokens the max context (prompt + generated tokens) the deployment advertises for one request. Required.
         * @return this builder
         */
        public Builder maxContextTokens(long tokens) {
            this.maxContextTokens = tokens;
            return this;
        }

        /**
         * @param policy what to do when the pool cannot hold the advertised context ({@link ContextPolicy#FAIL} by default)
         * @return this builder
         */
        public Builder contextPolicy(ContextPolicy policy) {
            this.contextPolicy = Objects.requireNonNull(policy);
            return this;
        }

        /**
         * @param policy how much admission reserves ({@link ReservationPolicy#FULL} by default)
         * @return this builder
         */
        public Builder reservationPolicy(ReservationPolicy policy) {
            this.reservationPolicy = Objects.requireNonNull(policy);
            return this;
        }

        /**
         * @param mode what freed pages are filled with ({@link FillMode#CANARY} by default)
         * @return this builder
         */
        public Builder fillMode(FillMode mode) {
            this.fillMode = Objects.requireNonNull(mode);
            return this;
        }

        /**
         * @param n how many {@link KvPool#tryReserve} reservations may be open at once (4096 by default), ≥ 1
         * @return this builder
         * @throws IllegalArgumentException if {@code n < 1}
         */
        public Builder maxReservations(int n) {
            if (n < 1) {
                throw new IllegalArgumentException("maxReservations must be ≥ 1, was " + n);
            }
            this.maxReservations = n;
            return this;
        }

        /**
         * Opt-in for a server whose allocations come from one thread (a scheduler): that thread, the first
         * to allocate, keeps up to {@code pages} of the pages it frees in a thread-confined cache and
         * allocates from it without the pool lock (see {@link AllocatorCache}). Off (0) by default. Other
         * threads that come up short take the pages back themselves when the owner is idle, or ask it to
         * hand them back at its next operation; the owner's own admissions always see them. 32 is a good size.
         *
         * @param pages pages the cache holds at most, ≥ 0
         * @return this builder
         * @throws IllegalArgumentException if {@code pages < 0}
         */
        public Builder threadCache(int pages) {
            if (pages < 0) {
                throw new IllegalArgumentException("threadCache must be ≥ 0, was " + pages);
            }
            this.threadCache = pages;
            return this;
        }

        /**
         * @param factory where pages live: {@code (layout, pages) → storage}; host memory ({@link HostPageStorage}) by default
         * @return this builder
         */
        public Builder storage(BiFunction<KvLayout, Integer, PageStorage> factory) {
            this.storageFactory = Objects.requireNonNull(factory);
            return this;
        }

        /**
         * <b>Testing only.</b> Turns safeguards off so a test can prove each one is what stops a leak. The
         * pool logs an ERROR at startup and names them in {@link KvPool#toString()}.
         *
         * @param safeguards the safeguards to turn off
         * @return this builder
         */
        public Builder unsafeDisable(Safeguard... safeguards) {
            for (Safeguard s : safeguards) {
                disabled.add(Objects.requireNonNull(s));
            }
            return this;
        }

        /**
         * @return the pool
         * @throws IllegalArgumentException if the size or max context is missing or out of range
         * @throws PoolCapacityException    if the pool cannot hold the advertised context for one request
         *                                  and the policy is {@link ContextPolicy#FAIL}
         */
        public KvPool build() {
            return new KvPool(this, CapacityCheck.resolve(layout, pages, byteBudget, maxContextTokens, contextPolicy));
        }
    }
}
