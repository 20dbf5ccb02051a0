package io.kvpool;

import io.kvpool.SlotStateMachine.Event;
import io.kvpool.storage.FillMode;
import io.kvpool.storage.HostPageStorage;
import io.kvpool.storage.PageStorage;

import java.lang.foreign.MemorySegment;
import java.util.Arrays;
import java.util.EnumSet;
import java.util.Objects;
import java.util.Optional;
import java.util.Set;
import java.util.concurrent.atomic.LongAdder;
import java.util.function.BiFunction;
import java.util.function.IntConsumer;

/**
 * A paged KV-cache pool: a fixed number of pages in a {@link PageStorage}, handed out as
 * generation-tagged {@link PageHandle handles}, shared by refcount, protected from remote writers by
 * writer pins, and admitted by a reservation-based admission that answers with a typed
 * {@link Admission.Decision} and never a placeholder.
 *
 * <h2>Structure</h2>
 * <pre>
 *   SlotTable       one state word per slot (generation | phase | refcount); the only place states change,
 *                   through SlotStateMachine, lock-free (CAS)
 *   ReturnStack     slots that became FREE on any thread, pushed lock-free
 *   AllocatorCache  opt-in: a few FREE slots confined to the allocator thread, which frees into and
 *                   allocates from them with no lock (one CAS per alloc+free pair: the release's)
 *   FreePages       the allocator's plain free stack + LRU of cached free pages     ┐
 *   PrefixCache     content hash → slot, with the full key for verification         ├ guarded by the pool lock
 *   reservations    pages promised to admitted requests (reserved ≤ free)           ┘
 *   PageStorage     the bytes; knows nothing of handles or states
 * </pre>
 *
 * <h2>Threads</h2>
 * <ul>
 *   <li><b>Thread-safe and lock-free</b> (any thread, e.g. transfer threads): {@link #retain},
 *       {@link #release}, {@link #commitReceive}, {@link #beginDrain}, {@link #drained},
 *       {@link #quarantine}, {@link #releaseQuarantine}, {@link #tryTransition} (except PIN_WRITER),
 *       {@link #validate}, {@link #page}, {@link #state}. Each is linearizable at the single CAS of its
 *       slot's state word (or its read, for queries). A transition that frees a page fills it and pushes it
 *       to the return stack without taking the lock.</li>
 *   <li><b>Thread-safe, serialized by the pool lock</b> (typically the scheduler thread): admission
 *       ({@link #admit}, {@link #tryReserve}, {@link #openSequence}, {@link #cancelReservation}),
 *       allocation ({@link #tryAllocate} and by {@link Sequence}s), {@link #pinWriter} (held only for the
 *       "not published" check and the CAS), {@link #snapshot}, {@link #verifyAccounting}, {@link #close}.
 *       Critical sections are short: page fills (canary) happen outside the lock.</li>
 *   <li>A {@link Sequence} is not thread-safe: one thread at a time, handed over with a happens-before edge.</li>
 * </ul>
 *
 * <h2>Accounting</h2>
 * At every quiescent point {@code free + owned + receiving + draining + quarantined + retired == capacity}
 * and {@code reserved ≤ free} ({@link #verifyAccounting()} checks this and that every FREE slot is in
 * exactly one free structure). {@code retired} is zero in practice (see {@link PageHandle}).
 */
public final class KvPool implements AutoCloseable {

    private static final System.Logger LOG = System.getLogger("io.kvpool");

    private final KvLayout layout;
    private final int capacity;
    private final PageStorage storage;
    private final SlotTable slots;
    private final ReturnStack returned;
    private final FreePages freePages;
    private final PrefixCache prefix;
    private final long maxContextTokens;
    private final ReservationPolicy reservationPolicy;
    private final FillMode fillMode;
    private final Set<Safeguard> disabled;
    private final boolean rejectOverCapacity;
    private final AllocatorLock lock = new AllocatorLock();
    private final IntConsumer takeReturned = this::takeReturned;
    private final LongAdder staleRefused = new LongAdder();
    private final AllocatorCache cache;
    private final LongAdder quarantineEvents = new LongAdder();
    private final java.util.concurrent.atomic.AtomicLong retired = new java.util.concurrent.atomic.AtomicLong();
    private final org.agrona.collections.IntArrayList evicted = new org.agrona.collections.IntArrayList(); // under lock
    /** Per slot: its fill when it was freed failed, so it must be filled before it is handed out again. */
    private final boolean[] unfilled;
    private volatile boolean storageRetained; // closed, but pages were pinned: storage kept until the last unpin
    private final java.util.concurrent.atomic.AtomicLong pinnedAfterClose = new java.util.concurrent.atomic.AtomicLong();
    private volatile boolean closed;
    private volatile String closeReport;
    private final PoolMetrics metrics = new PoolMetrics(this);

    // ---- guarded by lock ----
    private long reserved;
    private long allocations;
    private long prefixHits;
    private long evictions;
    private long rejectedContextTooLong;
    private long rejectedExceedsPool;
    private long retryLater;
    private long openSequences;
    private long openReservations;
    private final int[] resPages;
    private final long[] resTokens;
    private final int[] resGeneration;
    private final int[] resFreeStack;
    /** Free reservation indices: a FIFO ring of {@code resFreeTop} entries from {@code resFreeHead}. */
    private int resFreeTop;
    private int resFreeHead;
    // scratch for the numbers of the last admission decision (read under the same lock hold)
    private long lastNeeded;
    private long lastAvailable;
    private long lastAdmittedTokens;

    private KvPool(Builder b, int pages, long maxContext) {
        this.layout = b.layout;
        this.capacity = pages;
        this.maxContextTokens = maxContext;
        this.reservationPolicy = b.reservationPolicy;
        this.disabled = b.disabled.isEmpty() ? Set.of() : Set.copyOf(b.disabled);
        this.fillMode = disabled.contains(Safeguard.FREE_PAGE_FILL) ? FillMode.NONE : b.fillMode;
        this.rejectOverCapacity = !disabled.contains(Safeguard.ADMISSION_REJECTION);
        this.slots = new SlotTable(b.slotWords.apply(pages), !disabled.contains(Safeguard.GENERATION_CHECK));
        this.returned = new ReturnStack(pages);
        this.cache = new AllocatorCache(Math.min(b.threadCache, pages));
        this.freePages = new FreePages(pages);
        this.unfilled = new boolean[pages];
        this.prefix = new PrefixCache(pages, layout.tokensPerPage());
        for (int s = pages - 1; s >= 0; s--) {
            freePages.pushPlain(s); // slot 0 on top
        }
        this.resPages = new int[b.maxReservations];
        this.resTokens = new long[b.maxReservations];
        this.resGeneration = new int[b.maxReservations];
        this.resFreeStack = new int[b.maxReservations];
        Arrays.fill(resPages, -1);
        for (int i = 0; i < b.maxReservations; i++) {
            resFreeStack[i] = i;
        }
        this.resFreeTop = b.maxReservations;
        // the storage last: every bookkeeping structure above is heap and cannot leak it if it fails
        this.storage = Objects.requireNonNull(b.storageFactory.apply(layout, pages), "storage factory returned null");
        if (storage.pageCount() != pages || !storage.layout().equals(layout)) {
            storage.close();
            throw new IllegalArgumentException("storage factory returned " + storage.pageCount() + " pages of " + storage.layout()
                + ", asked for " + pages + " pages of " + layout);
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

    // ------------------------------------------------------------------------------------------------
    // Properties

    /** @return the layout */
    public KvLayout layout() {
        return layout;
    }

    /** @return the number of pages */
    public int capacity() {
        return capacity;
    }

    /** @return the storage holding the pages' bytes */
    public PageStorage storage() {
        return storage;
    }

    /** @return the max context (after clamping, if {@link ContextPolicy#CLAMP} applied) */
    public long maxContextTokens() {
        return maxContextTokens;
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

    // ------------------------------------------------------------------------------------------------
    // Handles (lock-free, any thread)

    /**
     * Applies an event to the page a handle names, without throwing or allocating.
     *
     * @param handle the page's handle
     * @return the slot's new state word (≥ 0; decode with {@link SlotStateMachine#state(long)} etc.), or
     *         {@link PageHandle#STALE}, {@link PageHandle#INVALID}, {@link PageHandle#ILLEGAL_STATE},
     *         {@link PageHandle#REFCOUNT_OVERFLOW}. Stale and invalid handles are counted.
     * @throws IllegalArgumentException for {@link Event#ALLOCATE}, which only the pool itself issues
     * @throws IllegalStateException    if the pool is closed (after a close that kept the storage because
     *                                  pages were pinned, the events that wind pins down — RELEASE,
     *                                  BEGIN_DRAIN, QUARANTINE, COMMIT_RECEIVE, DRAINED, RELEASE_QUARANTINE —
     *                                  are still accepted, and the last unpin releases the storage)
     */
    public long tryTransition(long handle, Event event) {
        if (event == Event.ALLOCATE) {
            throw new IllegalArgumentException("ALLOCATE is issued by the pool's allocator only");
        }
        if (event == Event.PIN_WRITER) {
            return tryPinWriter(handle);
        }
        if (closed && (!storageRetained || event == Event.RETAIN)) {
            throw new IllegalStateException("kvpool is closed");
        }
        final long word = slots.apply(handle, event);
        if (word < 0) {
            countRefusal(word);
            return word;
        }
        if (event == Event.QUARANTINE) {
            quarantineEvents.increment();
        }
        final int phase = SlotStateMachine.phase(word);
        if (phase == SlotStateMachine.FREE) {
            onBecameFree(PageHandle.slot(handle));
        } else if (phase == SlotStateMachine.RETIRED) {
            retired.incrementAndGet();
            if (prefix.isPublished(PageHandle.slot(handle))) {
                lock.lock();
                try {
                    prefix.unpublish(PageHandle.slot(handle)); // a retired page can never be attached again
                } finally {
                    lock.unlock();
                }
            }
        }
        if (closed && (event == Event.COMMIT_RECEIVE || event == Event.DRAINED || event == Event.RELEASE_QUARANTINE)) {
            afterCloseTransition(word);
        }
        return word;
    }

    private void countRefusal(long code) {
        if (code == PageHandle.STALE || code == PageHandle.INVALID) {
            staleRefused.increment();
        }
    }

    /**
     * PIN_WRITER under the pool lock: no publication can slip between the "not published" check and the
     * pin, and no pin can appear after {@link #close()} counted the pinned pages.
     */
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
            final long word = slots.apply(handle, Event.PIN_WRITER);
            countRefusal(word);
            return word;
        } finally {
            lock.unlock();
        }
    }

    private long transition(long handle, Event event) {
        final long word = tryTransition(handle, event);
        if (word < 0) {
            throw refusal(handle, word, event);
        }
        return word;
    }

    private RuntimeException refusal(long handle, long code, Event event) {
        final String what = event == null ? "access" : event.toString();
        if (code == PageHandle.INVALID) {
            return new StaleHandleException(handle, what + " refused: " + PageHandle.toString(handle)
                + " is not a page handle of this pool (capacity " + capacity + ")");
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
        return new IllegalSlotTransitionException(slot, now, event, null);
    }

    /**
     * Adds a reference to an OWNED page.
     *
     * @param handle the page's handle
     * @throws StaleHandleException          if the handle is stale or not a handle of this pool
     * @throws IllegalSlotTransitionException if the page's state does not allow the event (see {@link SlotStateMachine})
     */
    public void retain(long handle) {
        transition(handle, Event.RETAIN);
    }

    /**
     * Drops a reference. The page becomes FREE only when this was the last reference and no writer pin
     * holds it; it is then filled (see {@link FillMode}) and returned to the free pages — unless it holds
     * a published prefix, which stays intact and reusable until it is evicted (and filled then).
     *
     * <p>References carry no holder identity: a holder that releases a reference it does not have (twice, or
     * one it never retained) drops someone else's, and the page can be freed while another sequence still
     * lists it — its handle is then refused as stale, but code that reads by slot index would not know. Release
     * exactly what you retained or allocated; {@link Sequence} does that for its pages.
     *
     * @param handle the page's handle
     * @return whether this call freed the page
     * @throws StaleHandleException          if the handle is stale or not a handle of this pool
     * @throws IllegalSlotTransitionException if the page's state does not allow the event (see {@link SlotStateMachine})
     */
    public boolean release(long handle) {
        return SlotStateMachine.phase(transition(handle, Event.RELEASE)) == SlotStateMachine.FREE;
    }

    /**
     * Pins an unshared, unpublished OWNED page as the target of remote writes (RECEIVING). While pinned
     * the page cannot become FREE, whatever happens to its references. Unlike the other handle
     * operations this one takes the pool lock (briefly), to check the page holds no published prefix.
     *
     * @param handle the page's handle
     * @throws StaleHandleException          if the handle is stale or not a handle of this pool
     * @throws IllegalSlotTransitionException if the page's state does not allow the event (see {@link SlotStateMachine})
     */
    public void pinWriter(long handle) {
        final long word = tryPinWriter(handle);
        if (word < 0) {
            final RuntimeException e = refusal(handle, word, Event.PIN_WRITER);
            if (e instanceof IllegalSlotTransitionException && slots.validate(handle) >= 0 && isPublishedLocked(PageHandle.slot(handle))) {
                throw new IllegalSlotTransitionException(PageHandle.slot(handle), slots.wordVolatile(PageHandle.slot(handle)),
                    Event.PIN_WRITER, "page holds a published prefix and is immutable");
            }
            throw e;
        }
    }

    private boolean isPublishedLocked(int slot) {
        lock.lock();
        try {
            return prefix.isPublished(slot);
        } finally {
            lock.unlock();
        }
    }

    /**
     * The transfer into the page was verified: RECEIVING → OWNED (or FREE if no reference is left).
     *
     * @param handle the page's handle
     * @throws StaleHandleException          if the handle is stale or not a handle of this pool
     * @throws IllegalSlotTransitionException if the page's state does not allow the event (see {@link SlotStateMachine})
     */
    public void commitReceive(long handle) {
        transition(handle, Event.COMMIT_RECEIVE);
    }

    /**
     * The transfer failed or was aborted: RECEIVING → DRAINING, waiting for the sender's confirmation.
     *
     * @param handle the page's handle
     * @throws StaleHandleException          if the handle is stale or not a handle of this pool
     * @throws IllegalSlotTransitionException if the page's state does not allow the event (see {@link SlotStateMachine})
     */
    public void beginDrain(long handle) {
        transition(handle, Event.BEGIN_DRAIN);
    }

    /**
     * Every expected sender confirmed its writes are over: DRAINING → OWNED, or FREE if no reference is left.
     *
     * @param handle the page's handle
     * @throws StaleHandleException          if the handle is stale or not a handle of this pool
     * @throws IllegalSlotTransitionException if the page's state does not allow the event (see {@link SlotStateMachine})
     */
    public void drained(long handle) {
        transition(handle, Event.DRAINED);
    }

    /**
     * No drain confirmation in time, or the peer was lost: RECEIVING/DRAINING → QUARANTINED. Never freed on a timer.
     *
     * @param handle the page's handle
     * @throws StaleHandleException          if the handle is stale or not a handle of this pool
     * @throws IllegalSlotTransitionException if the page's state does not allow the event (see {@link SlotStateMachine})
     */
    public void quarantine(long handle) {
        transition(handle, Event.QUARANTINE);
    }

    /**
     * The transport proved the peer can no longer write: QUARANTINED → OWNED, or FREE if no reference is left.
     *
     * @param handle the page's handle
     * @throws StaleHandleException          if the handle is stale or not a handle of this pool
     * @throws IllegalSlotTransitionException if the page's state does not allow the event (see {@link SlotStateMachine})
     */
    public void releaseQuarantine(long handle) {
        transition(handle, Event.RELEASE_QUARANTINE);
    }

    /**
     * @param handle the page's handle
     * @return the slot index if the handle is current and its page accessible (OWNED or RECEIVING), else
     *         {@link PageHandle#STALE}, {@link PageHandle#INVALID} or {@link PageHandle#ILLEGAL_STATE}
     *         (stale and invalid handles are counted). Allocation-free.
     */
    public long validate(long handle) {
        ensureOpen();
        final long v = slots.validate(handle);
        countRefusal(v);
        return v;
    }

    /** @return the slot of a current, accessible page, or throws the refusal {@link #validate} describes */
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
     * @throws StaleHandleException          if the handle is stale or invalid
     * @throws IllegalSlotTransitionException if the page is DRAINING or QUARANTINED
     */
    public MemorySegment page(long handle) {
        return storage.hostPage(accessibleSlot(handle));
    }

    /**
     * @param handle the page's handle
     * @return the first token in {@code [fromToken, toToken)} of the handle's page that still holds the
     *         free-page canary, or -1 (see {@link PageStorage#firstCanaryToken})
     */
    public int firstCanaryToken(long handle, int fromToken, int toToken) {
        return storage.firstCanaryToken(accessibleSlot(handle), fromToken, toToken);
    }

    /**
     * @param handle the page's handle
     * @return the state of the page a handle names, or {@code null} if the handle is stale or invalid
     */
    public SlotState state(long handle) {
        ensureOpen();
        if (!PageHandle.isHandle(handle) || PageHandle.slot(handle) >= capacity) {
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

    /** @return the state of a slot now (for monitoring and tests) */
    public SlotState stateOfSlot(int slot) {
        Objects.checkIndex(slot, capacity);
        return SlotStateMachine.state(slots.wordVolatile(slot));
    }

    /** @return the refcount of a slot now (for monitoring and tests) */
    public int refcountOfSlot(int slot) {
        Objects.checkIndex(slot, capacity);
        return SlotStateMachine.refcount(slots.wordVolatile(slot));
    }

    private void onBecameFree(int slot) {
        if (closed) {
            // nothing will allocate again and the storage is (being) released: no fill; but the page goes where
            // free pages are counted, so verifyAccounting() still balances after close
            returned.push(slot);
            return;
        }
        // The last releaser's CAS is ordered after every earlier CAS on this word, including the publisher's
        // own release, so a page's "published" mark set under the lock while it was owned is visible here.
        final boolean published = prefix.isPublished(slot);
        if (fillMode != FillMode.NONE && !published) {
            try {
                storage.fill(slot, fillMode);
            } catch (RuntimeException e) {
                if (closed) {
                    returned.push(slot); // the pool closed while this page was being freed: the release took effect
                    return;
                }
                // The release took effect (its CAS): the page is FREE and must reach a free structure, or it is
                // lost for good; but it still holds its last tenant's bytes, so it is filled again before its
                // next handle escapes (as an evicted page is), where a second failure is the allocator's to throw.
                unfilled[slot] = true; // plain: published to the allocator by the push below (a release CAS)
                LOG.log(System.Logger.Level.WARNING, "kvpool: filling freed slot " + slot + " failed (" + e
                    + "); it will be filled again before it is handed out", e);
            }
        }
        // an unfilled page never enters the allocator cache: its lock-free fast path hands pages out as they are
        if (published || unfilled[slot] || !cache.isOwner() || cache.flushRequested() || !cache.push(slot)) {
            returned.push(slot);
            if (cache.isOwner() && cache.flushRequested() && lock.tryLock()) { // never waits, never re-enters
                try {
                    cache.flush(takeReturned);
                } finally {
                    lock.unlock();
                }
            }
        }
    }

    /**
     * After close, an event that may have unpinned a page counts down the pages that were pinned at close;
     * at zero (or below: a thread racing the close may count a page the snapshot did not, which only makes
     * this run early), an exact scan decides whether the storage can be released. A page counted at close
     * is unpinned by a CAS that follows close's snapshot, so its thread sees {@code closed}: the count can
     * run ahead, never behind, and the last unpin always triggers the scan.
     */
    private void afterCloseTransition(long word) {
        if (!SlotStateMachine.pinned(SlotStateMachine.phase(word)) && pinnedAfterClose.decrementAndGet() <= 0) {
            releaseStorageIfUnpinned();
        }
    }

    /** Releases the storage kept at close once no page is pinned (an exact scan, under the lock). */
    private void releaseStorageIfUnpinned() {
        lock.lock();
        try {
            if (!storageRetained) {
                return;
            }
            for (int s = 0; s < capacity; s++) {
                if (SlotStateMachine.pinned(SlotStateMachine.phase(slots.wordVolatile(s)))) {
                    return;
                }
            }
            storageRetained = false;
            storage.close();
        } finally {
            lock.unlock();
        }
    }

    // ------------------------------------------------------------------------------------------------
    // Admission (pool lock)

    /**
     * Admits a request of {@code promptTokens} prompt tokens that may generate {@code maxNewTokens} more.
     *
     * @return the decision; on {@link Admission.Decision#ADMITTED} it carries a new {@link Sequence} with a
     *         reservation for every page the request can need ({@link ReservationPolicy#FULL})
     * @throws IllegalArgumentException if {@code promptTokens < 1} or {@code maxNewTokens < 0}
     */
    public Admission admit(int promptTokens, int maxNewTokens) {
        checkRequest(promptTokens, maxNewTokens);
        lock.lock();
        try {
            final long code = reserveLocked(promptTokens, maxNewTokens);
            if (code < 0) {
                return rejection(code, promptTokens, maxNewTokens);
            }
            final Sequence seq = newSequenceLocked((int) lastNeeded, lastAdmittedTokens, 0, false);
            return new Admission(Admission.Decision.ADMITTED, seq, (long) promptTokens + maxNewTokens, maxContextTokens,
                lastNeeded, lastAvailable, capacity - retired.get());
        } finally {
            lock.unlock();
        }
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
     */
    public Admission admit(int[] promptTokenIds, int maxNewTokens, long cacheSalt) {
        Objects.requireNonNull(promptTokenIds, "promptTokenIds");
        final int prompt = promptTokenIds.length;
        checkRequest(prompt, maxNewTokens);
        final int tpp = layout.tokensPerPage();
        lock.lock();
        try {
            final long code = reserveLocked(prompt, maxNewTokens);
            if (code < 0) {
                return rejection(code, prompt, maxNewTokens);
            }
            final Sequence seq = newSequenceLocked((int) lastNeeded, lastAdmittedTokens, cacheSalt, true);
            final int maxPages = (prompt - 1) / tpp;
            long parent = PrefixHash.ROOT;
            long digestHi = PrefixCache.ROOT_DIGEST_HI;
            long digestLo = PrefixCache.ROOT_DIGEST_LO;
            int matched = 0;
            while (matched < maxPages) {
                final long h = PrefixHash.of(parent, cacheSalt, promptTokenIds, matched * tpp, tpp);
                final int slot = prefix.lookup(h, digestHi, digestLo, cacheSalt, promptTokenIds, matched * tpp);
                if (slot < 0 || !attachLocked(slot, seq)) {
                    break;
                }
                prefix.digest(digestHi, digestLo, cacheSalt, promptTokenIds, matched * tpp);
                digestHi = prefix.digestHi;
                digestLo = prefix.digestLo;
                seq.attachedPublished(h, digestHi, digestLo);
                parent = h;
                matched++;
            }
            seq.setTokenCountAfterAttach(matched * tpp);
            return new Admission(Admission.Decision.ADMITTED, seq, (long) prompt + maxNewTokens, maxContextTokens,
                lastNeeded, lastAvailable, capacity - retired.get());
        } finally {
            lock.unlock();
        }
    }

    /**
     * Allocation-free admission: reserves the pages a request can need and returns a reservation id to
     * pass to {@link #openSequence} (or {@link #cancelReservation}).
     *
     * @return a reservation id ({@code > 0}), or {@link Admission#CONTEXT_TOO_LONG},
     *         {@link Admission#EXCEEDS_POOL}, {@link Admission#RETRY_LATER}
     * @throws IllegalArgumentException if {@code promptTokens < 1} or {@code maxNewTokens < 0}
     */
    public long tryReserve(int promptTokens, int maxNewTokens) {
        checkRequest(promptTokens, maxNewTokens);
        lock.lock();
        try {
            final long code = reserveLocked(promptTokens, maxNewTokens);
            if (code < 0) {
                return code;
            }
            if (resFreeTop == 0) {
                reserved -= lastNeeded;
                retryLater++;
                return Admission.RETRY_LATER;
            }
            // oldest free index first (a FIFO ring): an index comes back only after every other free one did, so a
            // generation wraps only after 2^31 × maxReservations reservations, not after 2^31 of them
            final int idx = resFreeStack[resFreeHead];
            resFreeHead = (resFreeHead + 1) % resFreeStack.length;
            resFreeTop--;
            int gen = resGeneration[idx] + 1;
            if (gen <= 0) {
                gen = 1;
            }
            resGeneration[idx] = gen;
            resPages[idx] = (int) lastNeeded;
            resTokens[idx] = lastAdmittedTokens;
            openReservations++;
            return ((long) gen << 32) | idx;
        } finally {
            lock.unlock();
        }
    }

    /**
     * Turns a reservation from {@link #tryReserve} into a sequence that owns it.
     *
     * @throws IllegalArgumentException if the id is unknown, already opened or cancelled
     */
    public Sequence openSequence(long reservationId) {
        lock.lock();
        try {
            final int idx = takeReservationLocked(reservationId);
            final Sequence seq = newSequenceLocked(resPages[idx], resTokens[idx], 0, false);
            resPages[idx] = -1;
            return seq;
        } finally {
            lock.unlock();
        }
    }

    /**
     * Returns a reservation's pages to the pool.
     *
     * @throws IllegalArgumentException if the id is unknown, already opened or cancelled
     */
    public void cancelReservation(long reservationId) {
        lock.lock();
        try {
            final int idx = takeReservationLocked(reservationId);
            reserved -= resPages[idx];
            resPages[idx] = -1;
        } finally {
            lock.unlock();
        }
    }

    private int takeReservationLocked(long reservationId) {
        ensureOpen();
        final int idx = (int) reservationId;
        final int gen = (int) (reservationId >>> 32);
        if (reservationId <= 0 || idx < 0 || idx >= resPages.length || resGeneration[idx] != gen || resPages[idx] < 0) {
            throw new IllegalArgumentException("unknown, opened or cancelled reservation id " + reservationId);
        }
        resFreeStack[(resFreeHead + resFreeTop++) % resFreeStack.length] = idx;
        openReservations--;
        return idx;
    }

    private static void checkRequest(int promptTokens, int maxNewTokens) {
        if (promptTokens < 1) {
            throw new IllegalArgumentException("promptTokens must be ≥ 1, was " + promptTokens);
        }
        if (maxNewTokens < 0) {
            throw new IllegalArgumentException("maxNewTokens must be ≥ 0, was " + maxNewTokens);
        }
    }

    /** Decides and, when admitted, adds the pages to {@code reserved}. @return pages reserved, or a negative code */
    private long reserveLocked(int promptTokens, int maxNewTokens) {
        ensureOpen();
        drainReturnedLocked();
        final long tokens = (long) promptTokens + maxNewTokens;
        lastAdmittedTokens = reservationPolicy == ReservationPolicy.FULL ? tokens : promptTokens;
        final long inService = capacity - retired.get();
        long needed = layout.pagesFor(reservationPolicy == ReservationPolicy.FULL ? tokens : promptTokens);
        lastNeeded = needed;
        lastAvailable = unreservedLocked();
        if (tokens > maxContextTokens || needed > inService) {
            if (rejectOverCapacity) {
                if (tokens > maxContextTokens) {
                    rejectedContextTooLong++;
                    return Admission.CONTEXT_TOO_LONG;
                }
                rejectedExceedsPool++;
                return Admission.EXCEEDS_POOL;
            }
            // Safeguard.ADMISSION_REJECTION disabled: the 2026 incident's one-token placeholder.
            needed = 1;
            lastNeeded = 1;
            lastAdmittedTokens = 1;
        }
        if (needed > lastAvailable) {
            retryLater++;
            if (!cache.isOwner()) {
                cache.requestFlush(); // the allocator thread may be sitting on free pages: ask it to hand them back
            }
            return Admission.RETRY_LATER;
        }
        reserved += needed;
        return needed;
    }

    private Admission rejection(long code, int prompt, int maxNew) {
        final Admission.Decision d = code == Admission.CONTEXT_TOO_LONG ? Admission.Decision.REJECTED_CONTEXT_TOO_LONG
            : code == Admission.EXCEEDS_POOL ? Admission.Decision.REJECTED_EXCEEDS_POOL : Admission.Decision.RETRY_LATER;
        return new Admission(d, null, (long) prompt + maxNew, maxContextTokens, lastNeeded, lastAvailable, capacity - retired.get());
    }

    private Sequence newSequenceLocked(int reservedPages, long admittedTokens, long salt, boolean hasSalt) {
        openSequences++;
        return new Sequence(this, reservedPages, admittedTokens, salt, hasSalt);
    }

    // ------------------------------------------------------------------------------------------------
    // Allocation (pool lock), called by Sequence

    /**
     * Allocates {@code count} pages for a sequence: first from its reservation, then from unreserved free
     * pages. All or nothing.
     *
     * @param out receives the handles, at {@code out[0..count)}
     * @return how many of them came from the sequence's reservation (for {@link #undoAllocation})
     * @throws PoolExhaustedException if the unreserved part cannot be had; nothing is allocated then
     */
    int allocateFor(Sequence seq, int count, long[] out) {
        final int fromReservation;
        final int[] toFill;
        lock.lock();
        try {
            ensureOpen();
            cache.bindIfUnowned();
            cache.flush(takeReturned); // the owner's cached pages first (LIFO: cache-hot)
            fromReservation = Math.min(count, seq.reservedPages);
            final int unreserved = count - fromReservation;
            if (unreserved > 0) {
                drainReturnedLocked();
                final long available = unreservedLocked();
                if (unreserved > available) {
                    throw new PoolExhaustedException("sequence needs " + count + " more pages, " + fromReservation
                        + " of them reserved; the pool has " + Math.max(0, available) + " free unreserved pages for the other "
                        + unreserved + " (capacity " + capacity + ", free " + freeLocked() + ", reserved " + reserved + ")");
                }
            }
            int got = 0;
            for (; got < count; got++) {
                final long handle = takeFreePageLocked();
                if (handle < 0) {
                    break;
                }
                out[got] = handle;
            }
            if (got < count) { // only possible when slots retired under us
                evicted.clear(); // released below: the free path fills them
                for (int i = 0; i < got; i++) {
                    tryTransition(out[i], Event.RELEASE);
                }
                cache.flush(takeReturned); // back where admission counts them (the owner may have cached them)
                throw new PoolExhaustedException("pool ran out of pages while allocating " + count + " (retired " + retired.get() + ")");
            }
            seq.reservedPages -= fromReservation;
            reserved -= fromReservation;
            toFill = takeEvictedLocked();
        } finally {
            lock.unlock();
        }
        try {
            fillEvicted(toFill);
        } catch (RuntimeException e) {
            undoAllocation(seq, java.util.Arrays.copyOf(out, count), fromReservation); // all or nothing
            throw e;
        }
        return fromReservation;
    }

    /**
     * Undoes an {@link #allocateFor} whose pages were never used (a copy-on-write copy failed): the pages go back
     * free, and the reservation they took is the sequence's again, so its admission's guarantee still holds.
     */
    void undoAllocation(Sequence seq, long[] handles, int fromReservation) {
        lock.lock();
        try {
            for (long h : handles) {
                tryTransition(h, Event.RELEASE);
            }
            cache.flush(takeReturned); // back where admission counts them before the reservation is re-taken
            drainReturnedLocked();
            seq.reservedPages += fromReservation;
            reserved += fromReservation;
        } finally {
            lock.unlock();
        }
    }

    /** @return the slots evicted from the cache by this critical section (to fill after unlocking), or null */
    private int[] takeEvictedLocked() {
        if (evicted.isEmpty()) {
            return null;
        }
        final int[] slotsToFill = evicted.toIntArray();
        evicted.clear();
        return slotsToFill;
    }

    /**
     * Fills pages just evicted from the prefix cache, outside the lock (a 2 MiB fill must not stall the
     * transfer threads that take it): they are OWNED by the caller's new tenancy, whose handles have
     * not escaped yet, so nobody else can touch them.
     */
    private void fillEvicted(int[] slotsToFill) {
        if (slotsToFill != null) {
            for (int slot : slotsToFill) {
                storage.fill(slot, fillMode);
            }
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
        if (cache.isOwner() && !closed && !cache.flushRequested()) {
            // the allocator thread's own freed pages: no lock, no reservation check (admission never counted them)
            final int slot = cache.pop();
            if (slot >= 0) {
                final long word = slots.allocate(slot);
                if (word >= 0 && SlotStateMachine.phase(word) == SlotStateMachine.OWNED) {
                    cache.countAllocation();
                    return PageHandle.of(slot, SlotStateMachine.generation(word));
                }
                if (word >= 0) {
                    retired.incrementAndGet(); // retired at allocation (only reachable through a test hook)
                } else {
                    throw new IllegalStateException("internal: the allocator cache held slot " + slot + " in state "
                        + SlotStateMachine.describe(slots.wordVolatile(slot)));
                }
            }
        }
        final long handle;
        final int[] toFill;
        lock.lock();
        try {
            ensureOpen();
            cache.bindIfUnowned();
            if (freePages.size() == 0 || cache.flushRequested()) {
                drainReturnedLocked(); // (the owner hands its cache back here when asked)
            }
            if (unreservedLocked() < 1) {
                if (!cache.isOwner()) {
                    cache.requestFlush();
                }
                return PageHandle.EXHAUSTED;
            }
            handle = takeFreePageLocked();
            toFill = takeEvictedLocked();
            if (handle < 0 && !cache.isOwner()) {
                cache.requestFlush(); // the allocator thread may be sitting on free pages: ask it to hand them back
            }
        } finally {
            lock.unlock();
        }
        try {
            fillEvicted(toFill);
        } catch (RuntimeException e) {
            tryTransition(handle, Event.RELEASE); // back free (and marked to be filled again), never lost
            throw e;
        }
        return handle < 0 ? PageHandle.EXHAUSTED : handle;
    }

    /**
     * Hands the calling thread's allocator cache (see {@link Builder#threadCache}) back to the free
     * pages, where every thread's admission sees them; e.g. before the allocator thread goes idle.
     * Does nothing on other threads or without a cache.
     */
    public void flushAllocatorCache() {
        lock.lock();
        try {
            ensureOpen();
            cache.flush(takeReturned);
        } finally {
            lock.unlock();
        }
    }

    /** Tries to add up to {@code pages} to a sequence's reservation from free unreserved pages. @return pages added */
    int topUpReservation(Sequence seq, int pages) {
        lock.lock();
        try {
            ensureOpen();
            drainReturnedLocked();
            final int add = (int) Math.max(0, Math.min(pages, unreservedLocked()));
            reserved += add;
            seq.reservedPages += add;
            return add;
        } finally {
            lock.unlock();
        }
    }

    /**
     * Reserves pages for a fork: {@code forParent} more for the parent and {@code forChild} for the child.
     *
     * @return {@code forParent}
     */
    int reserveForFork(Sequence parent, int forParent, int forChild) {
        lock.lock();
        try {
            ensureOpen();
            drainReturnedLocked();
            final long available = unreservedLocked();
            if (forParent + forChild > available) {
                throw new PoolExhaustedException("fork needs " + (forParent + forChild) + " pages reserved (" + forChild
                    + " for the child's growth, " + forParent + " for copy-on-write of the shared last page); "
                    + Math.max(0, available) + " are free and unreserved");
            }
            reserved += forParent + forChild;
            parent.reservedPages += forParent;
            openSequences++;
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
            reserved -= n;
        } finally {
            lock.unlock();
        }
    }

    /** Returns a closing sequence's unused reservation. */
    void sequenceClosed(Sequence seq) {
        lock.lock();
        try {
            reserved -= seq.reservedPages;
            seq.reservedPages = 0;
            openSequences--;
        } finally {
            lock.unlock();
        }
    }

    /**
     * Publishes a sequence's full pages {@code [from, to)}; see {@link Sequence#publish}. Each page is marked
     * while this call holds a reference of its own to it (taken under the lock, dropped after it): a release
     * racing the publication — even a stray one by a caller that does not own the page — can then never free
     * a page between its check and its mark, and whoever frees it later sees the mark (and keeps it indexed,
     * unfilled, in the cached free pages). The references are dropped outside the lock: a last release there
     * may retire the slot, which takes the lock.
     */
    void publish(Sequence seq, int[] tokenIds, int from, int to, long salt) {
        final int tpp = layout.tokensPerPage();
        final long[] held = new long[to - from];
        int holding = 0;
        try {
            lock.lock();
            try {
                ensureOpen();
                long parent = from == 0 ? PrefixHash.ROOT : seq.pageHash(from - 1);
                long digestHi = from == 0 ? PrefixCache.ROOT_DIGEST_HI : seq.pageDigestHi(from - 1);
                long digestLo = from == 0 ? PrefixCache.ROOT_DIGEST_LO : seq.pageDigestLo(from - 1);
                for (int i = from; i < to; i++) {
                    final long handle = seq.pageHandle(i);
                    final long word = slots.apply(handle, Event.RETAIN);
                    if (word >= 0) {
                        held[holding++] = handle;
                    }
                    if (word < 0 || SlotStateMachine.phase(word) != SlotStateMachine.OWNED) {
                        countRefusal(word);
                        throw new IllegalSlotTransitionException(PageHandle.slot(handle), slots.wordVolatile(PageHandle.slot(handle)), null,
                            "only OWNED pages can be published (page " + i + " of the sequence)");
                    }
                    parent = PrefixHash.of(parent, salt, tokenIds, i * tpp, tpp);
                    prefix.publish(PageHandle.slot(handle), parent, digestHi, digestLo, salt, tokenIds, i * tpp);
                    prefix.digest(digestHi, digestLo, salt, tokenIds, i * tpp);
                    digestHi = prefix.digestHi;
                    digestLo = prefix.digestLo;
                    seq.setPageHash(i, parent, digestHi, digestLo);
                }
            } finally {
                lock.unlock();
            }
        } finally {
            for (int i = 0; i < holding; i++) {
                tryTransition(held[i], Event.RELEASE);
            }
        }
    }

    /**
     * Decides copy-on-write for a page the calling sequence holds and is about to write: copy if anyone
     * else holds it (refcount > 1) or if it holds a published prefix, which is immutable whoever holds it.
     * Decided now, never remembered: a page may be published by another holder after this sequence last
     * looked (a fork's parent publishes and leaves).
     *
     * <p>No lock is needed for the published mark: with refcount 1 only the caller holds the page, so no
     * one can publish or unpublish it concurrently, and every earlier publication by another holder
     * happened before that holder's release, which the volatile read of the state word below observes.
     */
    boolean mustCopyBeforeWrite(int slot) {
        return SlotStateMachine.refcount(slots.wordVolatile(slot)) > 1 || prefix.isPublished(slot);
    }

    /**
     * Truncate into a published page that only the calling sequence holds: the page leaves the prefix cache, so it
     * can be written in place again (under the lock: no admission can attach it meanwhile).
     */
    void unpublishIfSole(int slot) {
        lock.lock();
        try {
            if (prefix.isPublished(slot) && SlotStateMachine.refcount(slots.wordVolatile(slot)) == 1) {
                prefix.unpublish(slot);
            }
        } finally {
            lock.unlock();
        }
    }

    private boolean attachLocked(int slot, Sequence seq) {
        final long word = slots.wordVolatile(slot);
        if (SlotStateMachine.phase(word) == SlotStateMachine.OWNED) {
            final long handle = PageHandle.of(slot, SlotStateMachine.generation(word));
            if (slots.apply(handle, Event.RETAIN) >= 0) {
                seq.addPage(handle);
                prefixHits++;
                if (seq.reservedPages > 0) { // shared, not taken from the free pages: return its reservation
                    seq.reservedPages--;
                    reserved--;
                }
                return true;
            }
        }
        drainReturnedLocked(); // it may have been freed a moment ago and still be on its way to the LRU
        if (!freePages.isCached(slot) || seq.reservedPages == 0) { // reviving takes a free page: only against the reservation
            return false;
        }
        freePages.removeCached(slot);
        final long next = slots.allocate(slot);
        if (next < 0) {
            throw new IllegalStateException("internal: cached free slot " + slot + " was not FREE");
        }
        if (SlotStateMachine.phase(next) == SlotStateMachine.RETIRED) {
            prefix.unpublish(slot);
            retired.incrementAndGet();
            return false;
        }
        allocations++;
        prefixHits++;
        seq.addPage(PageHandle.of(slot, SlotStateMachine.generation(next)));
        seq.reservedPages--; // revived from the free pages: it consumes one reserved page
        reserved--;
        return true;
    }

    /** @return the handle of a freshly allocated page (OWNED, refcount 1), or -1 if no page is left */
    private long takeFreePageLocked() {
        while (true) {
            int slot = freePages.popPlain();
            if (slot < 0) {
                if (drainReturnedLocked() > 0) {
                    continue;
                }
                slot = freePages.evictLru();
                if (slot < 0) {
                    return -1;
                }
                prefix.unpublish(slot);
                evictions++;
                if (fillMode != FillMode.NONE) {
                    evicted.addInt(slot); // filled by the caller after the lock is released, before the handle escapes
                    unfilled[slot] = false;
                }
            }
            if (unfilled[slot]) { // its fill at free failed: filled like an evicted page, before the handle escapes
                unfilled[slot] = false;
                evicted.addInt(slot);
            }
            final long word = slots.allocate(slot);
            if (word < 0) {
                throw new IllegalStateException("internal: free list held slot " + slot + " in state "
                    + SlotStateMachine.describe(slots.wordVolatile(slot)));
            }
            if (SlotStateMachine.phase(word) == SlotStateMachine.RETIRED) {
                retired.incrementAndGet();
                continue;
            }
            allocations++;
            return PageHandle.of(slot, SlotStateMachine.generation(word));
        }
    }

    /**
     * Moves every page freed since the last call into the free structures: the return stack, and the
     * allocator cache when the caller owns it (or its owner has died).
     *
     * @return pages moved
     */
    private int drainReturnedLocked() {
        return returned.drain(takeReturned) + cache.flush(takeReturned);
    }

    private void takeReturned(int slot) {
        if (prefix.isPublished(slot)) {
            freePages.pushCached(slot);
        } else {
            freePages.pushPlain(slot);
        }
    }

    /** @return free pages no admission has promised (may be negative only through retirement) */
    private long unreservedLocked() {
        return freeLocked() - reserved;
    }

    private long freeLocked() {
        return freePages.size() + (long) returned.sizeVolatile();
    }

    // ------------------------------------------------------------------------------------------------
    // Accounting and close

    /** @return the pool's gauges and counters, each readable at O(1) cost from any thread */
    public PoolMetrics metrics() {
        return metrics;
    }

    /** @return page counts by state and the counters (see {@link PoolSnapshot} for when they are exact) */
    public PoolSnapshot snapshot() {
        lock.lock();
        try {
            drainReturnedLocked();
            return snapshotLocked();
        } finally {
            lock.unlock();
        }
    }

    private PoolSnapshot snapshotLocked() {
        final long[] byState = new long[SlotState.values().length];
        for (int s = 0; s < capacity; s++) {
            byState[SlotStateMachine.phase(slots.wordVolatile(s))]++;
        }
        return new PoolSnapshot(capacity, byState[SlotStateMachine.FREE], byState[SlotStateMachine.OWNED],
            byState[SlotStateMachine.RECEIVING], byState[SlotStateMachine.DRAINING], byState[SlotStateMachine.QUARANTINED],
            byState[SlotStateMachine.RETIRED], reserved, freePages.cachedSize(), prefix.size(), openSequences, openReservations,
            allocations + cache.allocationsQuiescent(), prefixHits, evictions, rejectedContextTooLong, rejectedExceedsPool, retryLater, staleRefused.sum(),
            quarantineEvents.sum());
    }

    /**
     * Checks the accounting invariants. Call only at a quiescent point (no operation in flight on any
     * thread): every FREE slot is in exactly one free structure and nothing else is; the state counts add
     * up to the capacity; {@code 0 ≤ reserved ≤ free}.
     *
     * @return the snapshot that was checked
     * @throws IllegalStateException describing the first violation
     */
    public PoolSnapshot verifyAccounting() {
        lock.lock();
        try {
            drainReturnedLocked();
            final PoolSnapshot snap = snapshotLocked();
            if (!snap.balanced()) {
                throw new IllegalStateException("accounting does not balance: " + snap);
            }
            final byte[] seen = new byte[capacity];
            final int[] plain = new int[capacity];
            int n = 0;
            for (int s; (s = freePages.popPlain()) >= 0; ) {
                plain[n++] = s;
            }
            for (int i = n - 1; i >= 0; i--) {
                freePages.pushPlain(plain[i]);
                seen[plain[i]]++;
            }
            cache.forEachQuiescent(s -> seen[s]++); // a live owner's cache, when checked from another thread
            for (int s = 0; s < capacity; s++) {
                if (freePages.isCached(s)) {
                    seen[s]++;
                    if (!prefix.isPublished(s)) {
                        throw new IllegalStateException("cached free slot " + s + " holds no published prefix");
                    }
                }
            }
            for (int s = 0; s < capacity; s++) {
                final boolean free = SlotStateMachine.phase(slots.wordVolatile(s)) == SlotStateMachine.FREE;
                if (seen[s] != (free ? 1 : 0)) {
                    throw new IllegalStateException("slot " + s + " is " + SlotStateMachine.describe(slots.wordVolatile(s))
                        + " but appears " + seen[s] + " times in the free structures");
                }
            }
            if (freePages.size() + cache.sizeQuiescent() != snap.free()) {
                throw new IllegalStateException("free structures hold " + freePages.size() + " pages and the allocator cache "
                    + cache.sizeQuiescent() + " but " + snap.free() + " slots are FREE");
            }
            return snap;
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
     * unless pages are still pinned for remote writes (RECEIVING, DRAINING, QUARANTINED): then a peer may
     * still write into it, so the storage is deliberately left allocated and the report says so; then the
     * events that wind the pins down are still accepted (see {@link #tryTransition}), and the last unpin
     * releases the storage. The read-only views ({@link #snapshot()}, {@link #verifyAccounting()},
     * {@link #stateOfSlot}, {@link #refcountOfSlot}, {@link #closeReport()}, and the configuration getters)
     * keep working; every other operation on a closed pool throws {@link IllegalStateException}.
     */
    @Override
    public void close() {
        final PoolSnapshot snap;
        lock.lock();
        try {
            if (closed) {
                return;
            }
            // Provisionally retained, and written before `closed`, so an unpin event racing with close is
            // accepted from the first moment `closed` is visible (never refused in a window).
            storageRetained = true;
            closed = true;
            drainReturnedLocked();
            snap = snapshotLocked();
            // added, not set: an unpin that raced this scan (its slot already read as pinned) may have counted down
            // already, and set() would erase that — the count would run behind and the storage never be released
            pinnedAfterClose.addAndGet(snap.receiving() + snap.draining() + snap.quarantined());
        } finally {
            lock.unlock();
        }
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
        releaseStorageIfUnpinned(); // now, or with the last unpin event
    }

    private void ensureOpen() {
        if (closed) {
            throw new IllegalStateException("kvpool is closed");
        }
    }

    @Override
    public String toString() {
        return "KvPool[" + capacity + " pages of " + layout + ", max context " + maxContextTokens + " tokens"
            + (disabled.isEmpty() ? "" : ", UNSAFE: safeguards disabled " + disabled) + "]";
    }

    // ------------------------------------------------------------------------------------------------

    /** Builds a {@link KvPool}; runs the startup capacity check. */
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

        /** Sizes the pool as a number of pages (1 .. {@link PageHandle#MAX_SLOT} + 1). */
        public Builder pages(long pages) {
            this.pages = pages;
            this.byteBudget = -1;
            return this;
        }

        /** Sizes the pool as the most pages that fit in {@code bytes}. */
        public Builder byteBudget(long bytes) {
            this.byteBudget = bytes;
            this.pages = -1;
            return this;
        }

        /** The max context (prompt + generated tokens) the deployment advertises for one request. Required. */
        public Builder maxContextTokens(long tokens) {
            this.maxContextTokens = tokens;
            return this;
        }

        /** What to do when the pool cannot hold the advertised context ({@link ContextPolicy#FAIL} by default). */
        public Builder contextPolicy(ContextPolicy policy) {
            this.contextPolicy = Objects.requireNonNull(policy);
            return this;
        }

        /** How much admission reserves ({@link ReservationPolicy#FULL} by default). */
        public Builder reservationPolicy(ReservationPolicy policy) {
            this.reservationPolicy = Objects.requireNonNull(policy);
            return this;
        }

        /** What freed pages are filled with ({@link FillMode#CANARY} by default). */
        public Builder fillMode(FillMode mode) {
            this.fillMode = Objects.requireNonNull(mode);
            return this;
        }

        /** How many {@link KvPool#tryReserve} reservations may be open at once (4096 by default). */
        public Builder maxReservations(int n) {
            if (n < 1) {
                throw new IllegalArgumentException("maxReservations must be ≥ 1, was " + n);
            }
            this.maxReservations = n;
            return this;
        }

        /**
         * Opt-in for a server whose allocations come from one thread (a scheduler): that thread — the first
         * to allocate — keeps up to {@code pages} of the pages it frees in a thread-confined cache and
         * allocates from it without the pool lock (see {@link AllocatorCache}; alloc+free then costs one
         * CAS instead of three). Off (0) by default. While the owner lives, admissions and allocations on
         * <em>other</em> threads do not see the cached pages; when one of them comes up short it asks the
         * owner to hand its cache back, which the owner does on its next allocation or free, and the owner
         * can do so itself with {@link KvPool#flushAllocatorCache()}. The owner's own admissions always
         * see them. 32 is a good size.
         */
        public Builder threadCache(int pages) {
            if (pages < 0) {
                throw new IllegalArgumentException("threadCache must be ≥ 0, was " + pages);
            }
            this.threadCache = pages;
            return this;
        }

        /** Where pages live: {@code (layout, pages) → storage}; host memory ({@link HostPageStorage}) by default. */
        public Builder storage(BiFunction<KvLayout, Integer, PageStorage> factory) {
            this.storageFactory = Objects.requireNonNull(factory);
            return this;
        }

        /**
         * <b>Testing only.</b> Turns safeguards off so a test can prove each one is what stops a leak. The
         * pool logs an ERROR at startup and names them in {@link KvPool#toString()}.
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
            final long bytesPerPage = layout.bytesPerPage();
            final long n;
            if (pages >= 0) {
                n = pages;
            } else if (byteBudget >= 0) {
                n = byteBudget / bytesPerPage;
                if (n < 1) {
                    throw new IllegalArgumentException("byte budget of " + byteBudget + " bytes holds no page of " + bytesPerPage
                        + " bytes (" + layout + ")");
                }
            } else {
                throw new IllegalArgumentException("set the pool size with pages(n) or byteBudget(bytes)");
            }
            if (n < 1 || n > PageHandle.MAX_SLOT + 1L) {
                throw new IllegalArgumentException("a pool has 1.." + (PageHandle.MAX_SLOT + 1L) + " pages, asked for " + n);
            }
            if (maxContextTokens < 1) {
                throw new IllegalArgumentException(maxContextTokens == -1
                    ? "set maxContextTokens(n): the context length the deployment advertises"
                    : "maxContextTokens must be ≥ 1, was " + maxContextTokens);
            }
            final long allTokens = Math.multiplyExact(n, (long) layout.tokensPerPage());
            // one request is one sequence, which counts its tokens in an int
            final long poolTokens = Math.min(allTokens, Integer.MAX_VALUE);
            long context = maxContextTokens;
            if (context > poolTokens) {
                final String numbers = String.format(
                    "advertised max context of %,d tokens exceeds what this pool can hold for one request: %,d tokens "
                        + "(%,d pages × %,d tokens/page, %,d bytes%s)", context, poolTokens, n, layout.tokensPerPage(), n * bytesPerPage,
                    allTokens > poolTokens ? String.format("; a sequence counts at most %,d tokens", Integer.MAX_VALUE) : "");
                if (contextPolicy == ContextPolicy.FAIL) {
                    throw new PoolCapacityException(context, poolTokens, numbers + String.format(
                        "; the largest safe context is %,d tokens. Lower the advertised context, give the pool more memory "
                            + "(at least %,d bytes), or opt in to ContextPolicy.CLAMP", poolTokens,
                        saturatingMultiply(layout.pagesFor(context), bytesPerPage)));
                }
                LOG.log(System.Logger.Level.WARNING, numbers + String.format("; clamping the max context to %,d tokens", poolTokens));
                context = poolTokens;
            }
            return new KvPool(this, (int) n, context); // context ≤ poolTokens ≤ Integer.MAX_VALUE
        }

        /** @return {@code a × b} for non-negative operands, or {@link Long#MAX_VALUE} where it would overflow (a hint's size) */
        private static long saturatingMultiply(long a, long b) {
            return Math.multiplyHigh(a, b) != 0 || a * b < 0 ? Long.MAX_VALUE : a * b;
        }
    }
}
