package io.kvpool.examples.ui;

import io.kvpool.Admission;
import io.kvpool.DType;
import io.kvpool.KvLayout;
import io.kvpool.KvPool;
import io.kvpool.PageHandle;
import io.kvpool.Sequence;
import io.kvpool.SlotState;

import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashMap;
import java.util.List;
import java.util.Map;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * A real {@link KvPool} that a test drives into known page states, with the test's own model of which
 * slot is in which state ({@link #expected()}), written from the operations alone.
 * Not thread-safe: one test thread changes it; any thread may read the pool.
 */
final class PoolScene implements AutoCloseable {
    /** 2 layers × 2 heads × 4 dim × FP16 × 4 tokens/page (kvpool-api's TestPools.SMALL). */
    static final KvLayout LAYOUT = new KvLayout(2, 2, 4, DType.FP16, 4);

    final KvPool pool;
    private final char[] model;
    private final Map<Integer, Long> handles = new HashMap<>(); // pages from own(), by slot
    private final List<Sequence> sequences = new ArrayList<>();

    PoolScene(int pages) {
        pool = KvPool.builder(LAYOUT).pages(pages).maxContextTokens((long) pages * LAYOUT.tokensPerPage()).build();
        model = new char[pages];
        Arrays.fill(model, PoolView.code(SlotState.FREE));
    }

    /** Allocates {@code n} pages outside any sequence; returns their slots. */
    int[] own(int n) {
        final int[] slots = new int[n];
        for (int i = 0; i < n; i++) {
            final long h = pool.tryAllocate();
            assertTrue(h > 0, "pool exhausted after " + i + " of " + n + " pages");
            slots[i] = PageHandle.slot(h);
            handles.put(slots[i], h);
            set(slots[i], SlotState.OWNED);
        }
        return slots;
    }

    /** Admits a request of {@code tokens} tokens and appends them: OWNED pages in a sequence. */
    Sequence sequence(int tokens) {
        final Admission a = pool.admit(tokens, 0);
        assertTrue(a.admitted(), a::toString);
        final Sequence s = a.sequence();
        s.append(tokens);
        sequences.add(s);
        for (int i = 0; i < s.pageCount(); i++) {
            set(s.pageIndex(i), SlotState.OWNED);
        }
        return s;
    }

    /** Closes a sequence: its pages go back to FREE. */
    void close(Sequence s) {
        final int[] slots = new int[s.pageCount()];
        s.copyBlockTable(slots, 0);
        s.close();
        sequences.remove(s);
        for (int slot : slots) {
            set(slot, SlotState.FREE);
        }
    }

    /** OWNED → RECEIVING (a page from {@link #own}). */
    void receive(int slot) {
        pool.handles().pinWriter(handle(slot));
        set(slot, SlotState.RECEIVING);
    }

    /** RECEIVING → DRAINING. */
    void drain(int slot) {
        pool.handles().beginDrain(handle(slot));
        set(slot, SlotState.DRAINING);
    }

    /** RECEIVING or DRAINING → QUARANTINED. */
    void quarantine(int slot) {
        pool.handles().quarantine(handle(slot));
        set(slot, SlotState.QUARANTINED);
    }

    /** Winds a page from {@link #own} down to OWNED whatever its state, then releases it: FREE. */
    void free(int slot) {
        final long h = handle(slot);
        switch (pool.stateOfSlot(slot)) {
            case RECEIVING -> pool.handles().commitReceive(h);
            case DRAINING -> pool.handles().drained(h);
            case QUARANTINED -> pool.handles().releaseQuarantine(h);
            default -> {
            }
        }
        assertTrue(pool.release(h), "slot " + slot + " did not become free");
        handles.remove(slot);
        set(slot, SlotState.FREE);
    }

    /** @return the pages string the test expects, from its own model */
    String expected() {
        return new String(model);
    }

    /** @return how many slots the model has in that state */
    long expected(SlotState state) {
        return new String(model).chars().filter(c -> c == PoolView.code(state)).count();
    }

    private long handle(int slot) {
        final Long h = handles.get(slot);
        if (h == null) {
            throw new IllegalArgumentException("slot " + slot + " is not a page this scene allocated with own()");
        }
        return h;
    }

    private void set(int slot, SlotState state) {
        model[slot] = PoolView.code(state);
    }

    /** Returns every page, closes the pool and checks it closed clean. Idempotent. */
    @Override
    public void close() {
        if (pool.isClosed()) {
            return;
        }
        for (int slot : handles.keySet().stream().mapToInt(Integer::intValue).toArray()) {
            free(slot);
        }
        for (Sequence s : List.copyOf(sequences)) {
            close(s);
        }
        pool.close();
        assertEquals(java.util.Optional.empty(), pool.closeReport(), "the scene's pool closed with pages outstanding");
    }
}
