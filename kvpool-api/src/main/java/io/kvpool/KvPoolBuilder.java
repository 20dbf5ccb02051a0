package io.kvpool;

import io.kvpool.storage.FillMode;
import io.kvpool.storage.HostPageStorage;
import io.kvpool.storage.PageStorage;

import java.util.EnumSet;
import java.util.Objects;
import java.util.function.BiFunction;

/** Builds a {@link KvPool}; runs the startup capacity check ({@link CapacityCheck}). Not thread-safe. */
public final class KvPoolBuilder {
    final KvLayout layout;
    // null: not set. Every long a caller passes is a value, checked with its number by build().
    Long pages;
    Long byteBudget;
    Long maxContextTokens;
    ContextPolicy contextPolicy = ContextPolicy.FAIL;
    ReservationPolicy reservationPolicy = ReservationPolicy.FULL;
    FillMode fillMode = FillMode.CANARY;
    int maxReservations = 4096;
    int threadCache = 0;
    BiFunction<KvLayout, Integer, PageStorage> storageFactory = HostPageStorage::allocate;
    final EnumSet<Safeguard> disabled = EnumSet.noneOf(Safeguard.class);
    /** Test hook: the memory of the state words (a test substitutes a deliberately broken one). */
    java.util.function.IntFunction<SlotWords> slotWords = SlotWords::ofArray;

    KvPoolBuilder(KvLayout layout) {
        this.layout = Objects.requireNonNull(layout, "layout");
    }

    /**
     * Sizes the pool by page count, replacing a byte budget.
     *
     * @param pages pool size in pages, 1 .. {@link PageHandle#MAX_SLOT} + 1 (checked by {@link #build})
     * @return this builder
     */
    public KvPoolBuilder pages(long pages) {
        this.pages = pages;
        this.byteBudget = null;
        return this;
    }

    /**
     * Sizes the pool by memory: the pool has the most pages that fit. Replaces a page count.
     *
     * @param bytes memory to fill with pages (checked by {@link #build})
     * @return this builder
     */
    public KvPoolBuilder byteBudget(long bytes) {
        this.byteBudget = bytes;
        this.pages = null;
        return this;
    }

    /**
     * Sets the max context the deployment advertises for one request. Required; {@link #build} checks
     * that the pool can hold it.
     *
     * @param tokens the max context (prompt + generated tokens)
     * @return this builder
     */
    public KvPoolBuilder maxContextTokens(long tokens) {
        this.maxContextTokens = tokens;
        return this;
    }

    /**
     * Sets what {@link #build} does when the pool cannot hold the advertised context.
     *
     * @param policy the policy; {@link ContextPolicy#FAIL} by default
     * @return this builder
     * @throws NullPointerException if {@code policy} is null
     */
    public KvPoolBuilder contextPolicy(ContextPolicy policy) {
        this.contextPolicy = Objects.requireNonNull(policy);
        return this;
    }

    /**
     * Sets how much admission reserves for a request.
     *
     * @param policy the policy; {@link ReservationPolicy#FULL} by default
     * @return this builder
     * @throws NullPointerException if {@code policy} is null
     */
    public KvPoolBuilder reservationPolicy(ReservationPolicy policy) {
        this.reservationPolicy = Objects.requireNonNull(policy);
        return this;
    }

    /**
     * Sets what freed pages are filled with.
     *
     * @param mode the fill; {@link FillMode#CANARY} by default
     * @return this builder
     * @throws NullPointerException if {@code mode} is null
     */
    public KvPoolBuilder fillMode(FillMode mode) {
        this.fillMode = Objects.requireNonNull(mode);
        return this;
    }

    /**
     * Sets how many {@link KvPool#tryReserve} reservations may be open at once.
     *
     * @param n the limit, 1 to 2<sup>24</sup>; 4096 by default
     * @return this builder
     * @throws IllegalArgumentException if {@code n} is out of range
     */
    public KvPoolBuilder maxReservations(int n) {
        CapacityCheck.atLeast("maxReservations", n, 1);
        if (n > Reservations.MAX_RESERVATIONS) {
            throw new IllegalArgumentException("maxReservations must be at most " + Reservations.MAX_RESERVATIONS + " (what a "
                + "reservation id can name), was " + n);
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
    public KvPoolBuilder threadCache(int pages) {
        this.threadCache = CapacityCheck.atLeast("threadCache", pages, 0);
        return this;
    }

    /**
     * Sets where the pages live. {@link #build} calls the factory once; the pool closes the storage.
     *
     * @param factory {@code (layout, pages) → storage}; host memory ({@link HostPageStorage}) by default
     * @return this builder
     * @throws NullPointerException if {@code factory} is null
     */
    public KvPoolBuilder storage(BiFunction<KvLayout, Integer, PageStorage> factory) {
        this.storageFactory = Objects.requireNonNull(factory);
        return this;
    }

    /**
     * <b>Testing only.</b> Turns safeguards off so a test can prove each one is what stops a leak. The
     * pool logs an ERROR at startup and names them in {@link KvPool#toString()}.
     *
     * @param safeguards the safeguards to turn off
     * @return this builder
     * @throws NullPointerException if {@code safeguards} or one of them is null
     */
    public KvPoolBuilder unsafeDisable(Safeguard... safeguards) {
        for (Safeguard s : safeguards) {
            disabled.add(Objects.requireNonNull(s));
        }
        return this;
    }

    /**
     * Builds the pool and allocates its storage, after the capacity check. The default host storage writes the
     * canary into every page first, whatever the {@link #fillMode fill mode}: building a pool touches all of its
     * memory (seconds for tens of GiB), so a machine without it fails here, not under load.
     *
     * @return the pool
     * @throws IllegalArgumentException if the size or max context is missing or out of range, or the
     *                                  storage factory returns another page count or layout
     * @throws PoolCapacityException    if the pool cannot hold the advertised context for one request
     *                                  and the policy is {@link ContextPolicy#FAIL}
     * @throws IllegalStateException    if the default host storage cannot allocate its memory (with the numbers)
     */
    public KvPool build() {
        return new KvPool(this, CapacityCheck.resolve(layout, pages, byteBudget, maxContextTokens, contextPolicy));
    }
}
