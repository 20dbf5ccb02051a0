package io.kvpool;

/**
 * A page handle is a {@code long} naming one slot of a pool <em>and</em> the generation of that slot at
 * the time the handle was issued. Every pool operation that takes a handle compares its generation with
 * the slot's current one and refuses the handle when they differ, so a handle kept past its page's
 * release can never reach the data of whoever owns the slot next.
 *
 * <h2>Bit layout</h2>
 * <pre>
 *   63 62 61                                          24 23                     0
 *  +--+--+----------------------------------------------+-----------------------+
 *  | 0| 0|            generation (38 bits, ≥ 1)          |     slot (24 bits)    |
 *  +--+--+----------------------------------------------+-----------------------+
 * </pre>
 * A valid handle is therefore always {@code > 0}; {@code 0} is never issued ({@link #NONE}) and every
 * negative {@code long} is a result code (see {@link #STALE}, {@link #INVALID}, {@link #ILLEGAL_STATE}),
 * which the allocation-free methods of {@link KvPool} return instead of throwing.
 *
 * <h2>Generations never wrap</h2>
 * A slot's generation is incremented every time the slot leaves FREE (allocation, or revival of a cached
 * page), starting from 1. When a slot's generation reaches {@link #MAX_GENERATION} (2<sup>38</sup> − 1)
 * the slot is <em>retired</em> instead of reused: it leaves service for the life of the pool and is
 * counted in {@link PoolSnapshot#retired()}. So two handles with the same slot and generation always
 * denote the same tenancy of that slot, with no wrap-around at all. For scale: a single slot recycled
 * once every 20 ns without pause (the cost of an alloc+free pair) retires after about 1.5 hours of doing
 * nothing else; a slot reused once per request (milliseconds at least) after more than eight years.
 */
public final class PageHandle {

    /** Bits holding the slot index. */
    public static final int SLOT_BITS = 24;
    /** Bits holding the generation. */
    public static final int GENERATION_BITS = 38;
    /** Largest slot index a handle can carry; a pool has at most {@code MAX_SLOT + 1} pages. */
    public static final int MAX_SLOT = (1 << SLOT_BITS) - 1;
    /** Largest generation; a slot reaching it is retired, never reused. */
    public static final long MAX_GENERATION = (1L << GENERATION_BITS) - 1;

    /** The "no page" value; never a valid handle. */
    public static final long NONE = 0L;
    /** Result code: the handle's generation no longer matches its slot (the page was released or reused). */
    public static final long STALE = -1L;
    /** Result code: not a handle of this pool (negative, zero generation, or slot out of range). */
    public static final long INVALID = -2L;
    /** Result code: the handle is current but the slot's state does not allow the operation. */
    public static final long ILLEGAL_STATE = -3L;
    /** Result code: the page's reference count would exceed {@link SlotStateMachine#MAX_REFCOUNT}. */
    public static final long REFCOUNT_OVERFLOW = -4L;

    /** Result code: no free, unreserved page is left. */
    public static final long EXHAUSTED = -5L;

    private static final long SLOT_MASK = (1L << SLOT_BITS) - 1;

    private PageHandle() {
    }

    /**
     * @param slot       slot index, {@code 0..MAX_SLOT}
     * @param generation generation, {@code 1..MAX_GENERATION}
     * @return the handle
     */
    public static long of(int slot, long generation) {
        if (slot < 0 || slot > MAX_SLOT) {
            throw new IllegalArgumentException("slot must be in 0.." + MAX_SLOT + ", was " + slot);
        }
        if (generation < 1 || generation > MAX_GENERATION) {
            throw new IllegalArgumentException("generation must be in 1.." + MAX_GENERATION + ", was " + generation);
        }
        return (generation << SLOT_BITS) | slot;
    }

    /** @return the slot index of a handle (meaningless for a result code) */
    public static int slot(long handle) {
        return (int) (handle & SLOT_MASK);
    }

    /** @return the generation of a handle (meaningless for a result code) */
    public static long generation(long handle) {
        return handle >>> SLOT_BITS;
    }

    /** @return whether the value has the shape of a handle: positive with a generation ≥ 1 */
    public static boolean isHandle(long value) {
        return value > 0 && generation(value) >= 1;
    }

    /** @return a readable form, e.g. {@code page[slot=12, gen=3]} or the name of a result code */
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
        } else if (!isHandle(handle)) {
            return "not-a-handle(" + handle + ")";
        }
        return "page[slot=" + slot(handle) + ", gen=" + generation(handle) + "]";
    }
}
