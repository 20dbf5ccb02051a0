package io.kvpool;

/**
 * The slot state machine (internal): the one place that decides which transitions a page slot may take. Its
 * functions are pure: they map a slot's current <em>state word</em> and an event to the next state word
 * or to a negative result code, so they can be applied atomically with one compare-and-set by
 * {@link SlotTable} and checked exhaustively in tests.
 *
 * <h2>State word</h2>
 * <pre>
 *   63 62                                   25 24    22 21                  0
 *  +--+---------------------------------------+--------+---------------------+
 *  | 0|  generation (38 bits, &le; 2^32 - 1)      | phase  |   refcount (22 bits) |
 *  +--+---------------------------------------+--------+---------------------+
 *   phase: 0 FREE, 1 OWNED, 2 RECEIVING, 3 DRAINING, 4 QUARANTINED, 5 RETIRED
 * </pre>
 * Generation, phase and refcount live in one word so that "is this handle current?" and "change the
 * state" are a single atomic step: no operation can act on a handle whose slot was reused between the
 * check and the change.
 *
 * <h2>Transitions</h2>
 * Rows are the current phase, columns the event; {@code r} is the refcount. "stale" means the event is
 * refused with {@link PageHandle#STALE} (the handle's generation differs from the slot's, or the slot is
 * FREE/RETIRED, i.e. the handle's tenancy is over). "illegal" means {@link PageHandle#ILLEGAL_STATE}; the
 * pool turns it into an {@link IllegalSlotTransitionException} naming slot, generation and state.
 * <pre>
 *               ALLOCATE      RETAIN   RELEASE           PIN_WRITER  COMMIT_RECEIVE    BEGIN_DRAIN  DRAINED           QUARANTINE   RELEASE_QUARANTINE
 *  FREE         OWNED(1),g+1  stale    stale             stale       stale             stale        stale             stale        stale
 *               (RETIRED if g = MAX_GENERATION)
 *  OWNED(r)     illegal       OWNED    r>1: OWNED(r-1)   r=1:        illegal           illegal      illegal           illegal      illegal
 *                             (r+1)    r=1: FREE         RECEIVING(1)
 *                                                        r>1: illegal
 *  RECEIVING(r) illegal       illegal  r≥1: RECEIVING    illegal     r≥1: OWNED(r)     DRAINING(r)  illegal           QUARANTINED  illegal
 *                                      (r-1); r=0: ill.              r=0: FREE                                        (r)
 *  DRAINING(r)  illegal       illegal  r≥1: DRAINING     illegal     illegal           illegal      r≥1: OWNED(r)     QUARANTINED  illegal
 *                                      (r-1); r=0: ill.                                             r=0: FREE         (r)
 *  QUARANTINED  illegal       illegal  r≥1: QUARANTINED  illegal     illegal           illegal      illegal           illegal      r≥1: OWNED(r)
 *  (r)                                 (r-1); r=0: ill.                                                                            r=0: FREE
 *  RETIRED      illegal       stale    stale             stale       stale             stale        stale             stale        stale
 * </pre>
 * Every arrow into FREE above goes to RETIRED instead when the generation is
 * {@link PageHandle#MAX_GENERATION}: a tenancy that cannot be followed by a new generation ends the
 * slot's service, so the page never counts as free (and never as reservable). ALLOCATE's own rule for a
 * FREE slot at the maximum is a fallback that ordinary operation never reaches.
 *
 * Consequences, each tested:
 * <ul>
 *   <li>a page reaches FREE only with refcount 0 <em>and</em> no writer pin (RECEIVING, DRAINING and
 *       QUARANTINED are the pinned phases; releasing the last reference there leaves the pin holding it);</li>
 *   <li>only an unshared page (refcount 1) can be pinned for writing: shared pages are immutable;</li>
 *   <li>QUARANTINED leaves only through RELEASE_QUARANTINE, which the transport sends once the peer can
 *       no longer write; nothing here reacts to time;</li>
 *   <li>the generation changes exactly when a slot leaves FREE, so every tenancy has its own generation;</li>
 *   <li>exactly one event can take a given tenancy to FREE (one CAS wins), so a page is returned to the
 *       free list at most once per tenancy.</li>
 * </ul>
 */
final class SlotStateMachine {


    /** Largest refcount a page can have. */
    static final int MAX_REFCOUNT = (1 << 22) - 1;

    static final int PHASE_SHIFT = 22;
    static final int GENERATION_SHIFT = 25;
    static final long RC_MASK = MAX_REFCOUNT;
    static final long PHASE_MASK = 0x7L << PHASE_SHIFT;

    static final int FREE = 0;
    static final int OWNED = 1;
    static final int RECEIVING = 2;
    static final int DRAINING = 3;
    static final int QUARANTINED = 4;
    static final int RETIRED = 5;

    private static final SlotState[] STATES = SlotState.values();

    private SlotStateMachine() {
    }

    /** @return a state word from its parts */
    static long word(long generation, int phase, int refcount) {
        return (generation << GENERATION_SHIFT) | ((long) phase << PHASE_SHIFT) | refcount;
    }

    /** @return the generation field of a state word */
    static long generation(long word) {
        return word >>> GENERATION_SHIFT;
    }

    /** @return the phase field of a state word as an int constant */
    static int phase(long word) {
        return (int) ((word & PHASE_MASK) >>> PHASE_SHIFT);
    }

    /** @return the state a word denotes */
    static SlotState state(long word) {
        return STATES[phase(word)];
    }

    /** @return the refcount field of a state word */
    static int refcount(long word) {
        return (int) (word & RC_MASK);
    }

    /** @return whether the word denotes a writer-pinned phase (RECEIVING, DRAINING, QUARANTINED) */
    static boolean pinned(int phase) {
        return phase == RECEIVING || phase == DRAINING || phase == QUARANTINED;
    }

    /**
     * Applies one event to a state word.
     *
     * @param word             the slot's current state word
     * @param handleGeneration the generation of the handle the event came with (ignored for ALLOCATE)
     * @param event            the event
     * @return the next state word (≥ 0), or {@link PageHandle#STALE}, {@link PageHandle#ILLEGAL_STATE} or
     *         {@link PageHandle#REFCOUNT_OVERFLOW}
     */
    static long next(long word, long handleGeneration, SlotEvent event) {
        // Kept short, each event's rule in a method of its own: the JIT inlines this into the batch loops, where the
        // event is a constant and the chain of reference compares folds to the one rule that applies.
        if (event == SlotEvent.ALLOCATE) {
            return allocate(word);
        }
        final int phase = phase(word);
        if (phase == FREE || phase == RETIRED || generation(word) != handleGeneration) {
            return PageHandle.STALE;
        }
        if (phase == OWNED && refcount(word) == 0) {
            return PageHandle.ILLEGAL_STATE; // unreachable by construction; never let a corrupt word borrow into the phase bits
        }
        if (event == SlotEvent.RETAIN) {
            return retain(word, phase);
        } else if (event == SlotEvent.RELEASE) {
            return release(word, phase);
        } else if (event == SlotEvent.PIN_WRITER) {
            return phase == OWNED && refcount(word) == 1 ? word(generation(word), RECEIVING, 1) : PageHandle.ILLEGAL_STATE;
        } else if (event == SlotEvent.COMMIT_RECEIVE) {
            return phase == RECEIVING ? unpinned(word) : PageHandle.ILLEGAL_STATE;
        } else if (event == SlotEvent.BEGIN_DRAIN) {
            return phase == RECEIVING ? withPhase(word, DRAINING) : PageHandle.ILLEGAL_STATE;
        } else if (event == SlotEvent.DRAINED) {
            return phase == DRAINING ? unpinned(word) : PageHandle.ILLEGAL_STATE;
        } else if (event == SlotEvent.QUARANTINE) {
            return phase == RECEIVING || phase == DRAINING ? withPhase(word, QUARANTINED) : PageHandle.ILLEGAL_STATE;
        } else if (event == SlotEvent.RELEASE_QUARANTINE) {
            return phase == QUARANTINED ? unpinned(word) : PageHandle.ILLEGAL_STATE;
        }
        throw new AssertionError(event);
    }

    /** ALLOCATE: a FREE slot's next tenancy, OWNED(1) at the next generation (RETIRED past the last). */
    private static long allocate(long word) {
        if (phase(word) != FREE) {
            return PageHandle.ILLEGAL_STATE;
        }
        final long gen = generation(word);
        return gen >= PageHandle.MAX_GENERATION ? word(gen, RETIRED, 0) : word(gen + 1, OWNED, 1);
    }

    /** RETAIN of a current, in-use slot. */
    private static long retain(long word, int phase) {
        if (phase != OWNED) {
            return PageHandle.ILLEGAL_STATE;
        }
        return refcount(word) == MAX_REFCOUNT ? PageHandle.REFCOUNT_OVERFLOW : word + 1;
    }

    /** RELEASE of a current, in-use slot: the last reference frees an OWNED page; a pinned page keeps its pin. */
    private static long release(long word, int phase) {
        final int rc = refcount(word);
        if (phase == OWNED) {
            return rc == 1 ? freed(generation(word)) : word - 1;
        }
        return rc == 0 ? PageHandle.ILLEGAL_STATE : word - 1;
    }

    /** The same generation and refcount in another phase. */
    private static long withPhase(long word, int phase) {
        return (word & ~PHASE_MASK) | ((long) phase << PHASE_SHIFT);
    }

    /** The end of a writer pin: OWNED with the references left, or the end of the tenancy if none are. */
    private static long unpinned(long word) {
        final int rc = refcount(word);
        return rc == 0 ? freed(generation(word)) : word(generation(word), OWNED, rc);
    }

    /** The end of a tenancy: FREE, or RETIRED if the generation cannot be bumped again. */
    private static long freed(long gen) {
        return gen >= PageHandle.MAX_GENERATION ? word(gen, RETIRED, 0) : word(gen, FREE, 0);
    }

    /** @return a readable form of a state word, e.g. {@code OWNED(gen=3, refs=2)} */
    static String describe(long word) {
        return state(word) + "(gen=" + generation(word) + ", refs=" + refcount(word) + ")";
    }
}
