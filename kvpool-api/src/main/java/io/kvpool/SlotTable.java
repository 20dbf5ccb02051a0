package io.kvpool;


/**
 * The state words of every slot of a pool, changed only through {@link SlotStateMachine#next}: each
 * operation reads a slot's word, computes the next one and installs it with a single compare-and-set,
 * retrying if another thread changed the word in between. Every method is thread-safe, lock-free and
 * linearizable at its successful CAS (or at its last read, when it returns a result code).
 */
final class SlotTable {

    private final SlotWords words;
    private final boolean checkGeneration;
    private final int poolId;
    private final boolean checkPool;
    private final PageCounts counts = new PageCounts();

    /**
     * @param words           the word storage
     * @param poolId          the pool id this table's handles carry (see {@link PageHandle})
     * @param checkGeneration {@code false} only when {@link Safeguard#GENERATION_CHECK} was disabled for a test
     * @param checkPool       {@code false} only when {@link Safeguard#POOL_IDENTITY_CHECK} was disabled for a test
     */
    SlotTable(SlotWords words, int poolId, boolean checkGeneration, boolean checkPool) {
        this.words = words;
        this.poolId = poolId;
        this.checkGeneration = checkGeneration;
        this.checkPool = checkPool;
    }

    /** @return the page counts every successful transition keeps current */
    PageCounts counts() {
        return counts;
    }

    /** @return the handle of a slot's tenancy of generation {@code generation} in this pool */
    long handle(int slot, long generation) {
        return PageHandle.of(poolId, slot, generation);
    }

    /** @return {@link PageHandle#INVALID} or {@link PageHandle#FOREIGN} if the handle cannot name a slot here, else 0 */
    private long screen(long handle) {
        if (!PageHandle.isHandle(handle)) {
            return PageHandle.INVALID;
        }
        // the pool before the slot range: another pool's handle is FOREIGN, also when that pool is the larger one
        if (checkPool && PageHandle.pool(handle) != poolId) {
            return PageHandle.FOREIGN;
        }
        return PageHandle.slot(handle) >= words.length() ? PageHandle.INVALID : 0;
    }

    int capacity() {
        return words.length();
    }

    /** @return the slot's current state word (volatile read) */
    long wordVolatile(int slot) {
        return words.getVolatile(slot);
    }

    /**
     * Applies a handle-carrying event.
     *
     * @return the new state word (≥ 0), or a negative {@link PageHandle} result code ({@link PageHandle#FOREIGN}
     *         for a handle of another pool)
     */
    long apply(long handle, SlotEvent event) {
        return apply(handle, event, counts.now);
    }

    /**
     * As {@link #apply(long, SlotEvent)}, the phase move counted in {@code sink}: a batch's {@link PageCounts.Delta},
     * added to the counts at its end, or {@link PageCounts#now}. Never null: a batch's delta that reaches here
     * unmerged with another sink can be kept in registers by the JIT.
     */
    long apply(long handle, SlotEvent event, PageCounts.Sink sink) {
        final long refused = screen(handle);
        if (refused < 0) {
            return refused;
        }
        final int slot = PageHandle.slot(handle);
        final long handleGeneration = PageHandle.generation(handle);
        while (true) {
            final long word = words.getVolatile(slot);
            final long gen = checkGeneration ? handleGeneration : SlotStateMachine.generation(word);
            final long next = SlotStateMachine.next(word, gen, event);
            if (next < 0) {
                return next;
            }
            if (words.compareAndSet(slot, word, next)) {
                PageCounts.moved(SlotStateMachine.phase(word), SlotStateMachine.phase(next), sink);
                return next;
            }
        }
    }

    /**
     * Takes a FREE slot into service. Only the allocator calls this, under the pool lock, for a slot it has
     * just removed from the free structures. No other thread can change a FREE word: every handle event on
     * a FREE slot is refused (STALE) without a write, and a thread still holding an older word of this
     * slot fails its CAS because the generation differs. So a release-store suffices where a CAS would
     * cost an atomic instruction on the hot path; it publishes the new tenancy before the handle escapes.
     *
     * @return the new state word: OWNED with refcount 1 and the next generation, or RETIRED; or
     *         {@link PageHandle#ILLEGAL_STATE} if the slot was not FREE (an allocator bug)
     */
    long allocate(int slot) {
        return allocate(slot, false, counts.now);
    }

    /**
     * As {@link #allocate(int)}; with {@code pinned}, the new tenancy starts pinned for a writer: ALLOCATE then
     * PIN_WRITER, FREE → RECEIVING(1), in the same one store. Nobody else holds the new handle, so no event can
     * come between the two, with the generation check disabled (a test's safeguard switch) too.
     *
     * @param sink  where the phase move is counted: a batch's delta (added under the same lock), or {@link PageCounts#now}
     * @return the new state word (RECEIVING(1) when pinned, unless the slot retired), or
     *         {@link PageHandle#ILLEGAL_STATE} if the slot was not FREE
     */
    long allocate(int slot, boolean pinned, PageCounts.Sink sink) {
        final long word = words.getVolatile(slot);
        long next = SlotStateMachine.next(word, 0, SlotEvent.ALLOCATE);
        if (pinned && next >= 0 && SlotStateMachine.phase(next) == SlotStateMachine.OWNED) {
            next = SlotStateMachine.next(next, SlotStateMachine.generation(next), SlotEvent.PIN_WRITER);
        }
        if (next >= 0) {
            words.setRelease(slot, next);
            // RETIRED at the last generation
            PageCounts.moved(SlotStateMachine.FREE, SlotStateMachine.phase(next), sink);
        }
        return next;
    }

    /**
     * Checks that a handle is current and its page may be accessed (OWNED, or RECEIVING for the writer).
     *
     * @return the slot index, or a negative {@link PageHandle} result code
     */
    long validate(long handle) {
        final long refused = screen(handle);
        if (refused < 0) {
            return refused;
        }
        final int slot = PageHandle.slot(handle);
        final long word = words.getVolatile(slot);
        final int phase = SlotStateMachine.phase(word);
        if (phase == SlotStateMachine.FREE || phase == SlotStateMachine.RETIRED
            || (checkGeneration && SlotStateMachine.generation(word) != PageHandle.generation(handle))) {
            return PageHandle.STALE;
        }
        if (phase != SlotStateMachine.OWNED && phase != SlotStateMachine.RECEIVING) {
            return PageHandle.ILLEGAL_STATE;
        }
        return slot;
    }

    /** @return the state of the tenancy a handle names, or null if the handle is stale, invalid or foreign */
    SlotState stateOf(long handle) {
        if (screen(handle) < 0) {
            return null;
        }
        final long word = words.getVolatile(PageHandle.slot(handle));
        final int phase = SlotStateMachine.phase(word);
        if (phase == SlotStateMachine.FREE || phase == SlotStateMachine.RETIRED
            || SlotStateMachine.generation(word) != PageHandle.generation(handle)) {
            return null;
        }
        return SlotStateMachine.state(word);
    }

    /** Test hook: sets the generation of a FREE slot, e.g. to just below {@link PageHandle#MAX_GENERATION}. */
    void forceGenerationOfFreeSlot(int slot, long generation) {
        final long word = words.getVolatile(slot);
        if (SlotStateMachine.phase(word) != SlotStateMachine.FREE) {
            throw new IllegalStateException("slot " + slot + " is not FREE: " + SlotStateMachine.describe(word));
        }
        if (!words.compareAndSet(slot, word, SlotStateMachine.word(generation, SlotStateMachine.FREE, 0))) {
            throw new IllegalStateException("slot " + slot + " changed concurrently");
        }
    }
}
