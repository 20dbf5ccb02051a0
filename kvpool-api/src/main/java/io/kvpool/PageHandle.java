package io.kvpool;

/**
 * A page handle is a {@code long} naming one pool, one slot of it <em>and</em> the generation of that slot
 * at the time the handle was issued. Every pool operation that takes a handle compares its pool and its
 * generation with its own and refuses the handle when they differ, so a handle kept past its page's
 * release can never reach the data of whoever owns the slot next, and a handle of one pool (a prefill
 * pool) can never reach a page of another (the decode pool of the same process).
 *
 * <h2>Bit layout</h2>
 * <pre>
 *   63 62         56 55                             24 23                     0
 *  +--+-------------+---------------------------------+-----------------------+
 *  | 0|  pool (7)   |   generation (32 bits, &ge; 1)      |     slot (24 bits)    |
 *  +--+-------------+---------------------------------+-----------------------+
 * </pre>
 * A valid handle is therefore always {@code > 0}; {@code 0} is never issued ({@link #NONE}) and every
 * negative {@code long} is a result code (see {@link #STALE}, {@link #INVALID}, {@link #FOREIGN},
 * {@link #ILLEGAL_STATE}), which the allocation-free methods of {@link KvPool} return instead of throwing.
 *
 * <h2>Pool identity</h2>
 * Each pool takes an id in {@code 1..}{@link #MAX_POOL} when it is built and gives it back when it is closed
 * (or collected). Ids are handed out least recently used first, so a closed pool's id comes back only after
 * every other free id was used. While at most {@link #MAX_POOL} pools are open in one JVM their ids are
 * distinct, and a handle of one is refused by every other ({@link #FOREIGN}). Beyond that ids are shared
 * and the generation check alone protects a pool from another's handles; the builder logs a warning.
 * {@link #of(int, long)} makes handles with pool id 0, which no pool accepts.
 *
 * <h2>Generations never wrap</h2>
 * A slot's generation is incremented every time the slot leaves FREE (allocation, or revival of a cached
 * page), starting from 1. When a slot's generation reaches {@link #MAX_GENERATION} (2<sup>32</sup> &minus; 1)
 * the slot is <em>retired</em> instead of reused: it leaves service for the life of the pool and is
 * counted in {@link PoolSnapshot#retired()}. So two handles with the same pool, slot and generation always
 * denote the same tenancy of that slot, with no wrap-around at all. For scale: a slot reused once per
 * millisecond without pause retires after 49 days; a pool allocating 100,000 pages a second, all from
 * one hot slot (the allocator cache's worst case), loses about 730 of its pages a year.
 */
public final class PageHandle {

    /** Bits holding the slot index. */
    public static final int SLOT_BITS = 24;
    /** Bits holding the generation. */
    public static final int GENERATION_BITS = 32;
    /** Bits holding the pool id. */
    public static final int POOL_BITS = 7;
    /** Largest slot index a handle can carry; a pool has at most {@code MAX_SLOT + 1} pages. */
    public static final int MAX_SLOT = (1 << SLOT_BITS) - 1;
    /** Largest generation; a slot reaching it is retired, never reused. */
    public static final long MAX_GENERATION = (1L << GENERATION_BITS) - 1;
    /** Largest pool id; pools take ids {@code 1..MAX_POOL}. */
    public static final int MAX_POOL = (1 << POOL_BITS) - 1;

    /** The "no page" value; never a valid handle. */
    public static final long NONE = 0L;
    /** Result code: the handle's generation no longer matches its slot (the page was released or reused). */
    public static final long STALE = -1L;
    /** Result code: not a handle of this pool (negative, zero generation, or slot out of range). */
    public static final long INVALID = -2L;
    /** Result code: the handle is current but the slot's state does not allow the operation. */
    public static final long ILLEGAL_STATE = -3L;
    /** Result code: the page's reference count would exceed the largest reference count a slot holds (2<sup>22</sup> &minus; 1). */
    public static final long REFCOUNT_OVERFLOW = -4L;

    /** Result code: no free, unreserved page is left. */
    public static final long EXHAUSTED = -5L;

    /** Result code: the handle names another pool. Refused wherever a stale handle is, and counted apart. */
    public static final long FOREIGN = -6L;

    private static final long SLOT_MASK = (1L << SLOT_BITS) - 1;
    private static final long GENERATION_MASK = (1L << GENERATION_BITS) - 1;
    private static final int POOL_SHIFT = SLOT_BITS + GENERATION_BITS;

    private PageHandle() {
    }

    /**
     * Makes a handle that belongs to no pool (pool id 0): every pool refuses it. For tests and tools.
     *
     * @param slot       slot index, {@code 0..MAX_SLOT}
     * @param generation generation, {@code 1..MAX_GENERATION}
     * @return the handle
     * @throws IllegalArgumentException if an argument is out of range
     */
    public static long of(int slot, long generation) {
        return of(0, slot, generation);
    }

    /**
     * Makes a handle.
     *
     * @param pool       pool id, {@code 0..MAX_POOL}
     * @param slot       slot index, {@code 0..MAX_SLOT}
     * @param generation generation, {@code 1..MAX_GENERATION}
     * @return the handle
     * @throws IllegalArgumentException if an argument is out of range
     */
    public static long of(int pool, int slot, long generation) {
        if (pool < 0 || pool > MAX_POOL) {
            throw new IllegalArgumentException("pool must be in 0.." + MAX_POOL + ", was " + pool);
        }
        if (slot < 0 || slot > MAX_SLOT) {
            throw new IllegalArgumentException("slot must be in 0.." + MAX_SLOT + ", was " + slot);
        }
        if (generation < 1 || generation > MAX_GENERATION) {
            throw new IllegalArgumentException("generation must be in 1.." + MAX_GENERATION + ", was " + generation);
        }
        return ((long) pool << POOL_SHIFT) | (generation << SLOT_BITS) | slot;
    }

    /**
     * Extracts a handle's slot index.
     *
     * @param handle a handle
     * @return its slot index (meaningless for a result code)
     */
    public static int slot(long handle) {
        return (int) (handle & SLOT_MASK);
    }

    /**
     * Extracts a handle's generation.
     *
     * @param handle a handle
     * @return its generation (meaningless for a result code)
     */
    public static long generation(long handle) {
        return (handle >>> SLOT_BITS) & GENERATION_MASK;
    }

    /**
     * Extracts the id of the pool that issued a handle.
     *
     * @param handle a handle
     * @return the pool id, 0 for {@link #of(int, long)}'s (meaningless for a result code)
     */
    public static int pool(long handle) {
        return (int) (handle >>> POOL_SHIFT);
    }

    /**
     * Tells a handle from a result code by its shape; says nothing about whether the handle is current.
     *
     * @param value any long
     * @return whether the value has the shape of a handle: positive with a generation &ge; 1
     */
    public static boolean isHandle(long value) {
        return value > 0 && generation(value) >= 1;
    }

    /**
     * Formats a handle or result code for logs and messages.
     *
     * @param handle a handle or a result code
     * @return a readable form, e.g. {@code page[pool=2, slot=12, gen=3]} or the name of a result code
     */
    public static String toString(long handle) {
        if (handle == STALE) {
            return "STALE";
        } else if (handle == INVALID) {
            return "INVALID";
        } else if (handle == ILLEGAL_STATE) {
            return "ILLEGAL_STATE";
        } else if (handle == REFCOUNT_OVERFLOW) {
            return "REFCOUNT_OVERFLOW";
        } else if (handle == EXHAUSTED) {
            return "EXHAUSTED";
        } else if (handle == FOREIGN) {
            return "FOREIGN";
        } else if (!isHandle(handle)) {
            return "not-a-handle(" + handle + ")";
        }
        return pool(handle) == 0 ? "page[slot=" + slot(handle) + ", gen=" + generation(handle) + "]"
            : "page[pool=" + pool(handle) + ", slot=" + slot(handle) + ", gen=" + generation(handle) + "]";
    }
}
