package io.kvpool.examples.ui;

import java.util.Locale;
import io.kvpool.KvPool;
import io.kvpool.PoolSnapshot;
import io.kvpool.SlotState;

import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Objects;

/**
 * One pool as the live page shows it: its role, one character per page slot, and its counters.
 *
 * <p>{@code pages} holds one character per slot, slot 0 first:
 * <pre>
 *   F free   O owned   R receiving   D draining   Q quarantined   X retired
 * </pre>
 * The view is a copy taken at one moment; it holds no reference to the pool. In one JVM it is built
 * with {@link #of}; a router whose roles run in other processes receives it as JSON from each role.
 *
 * @param role     "prefill" or "decode" (or any name the server gives the pool)
 * @param capacity number of page slots
 * @param pages    one state character per slot (length == capacity)
 * @param counters the pool's {@link PoolSnapshot} fields by name, plus anything the role adds, in
 *                 display order (kept)
 * @param holders  the live requests holding pages of this pool, from the role's own bookkeeping
 *                 ({@link PageHolders}); empty when the role books none
 * @throws IllegalArgumentException if {@code pages} is not {@code capacity} characters of {@link #CODES}, or a
 *                                  holder names a slot outside the pool
 */
public record PoolView(String role, int capacity, String pages, Map<String, Long> counters, List<Holder> holders) {

    /** Every state's character, in {@link SlotState} order: {@code CODES.charAt(state.ordinal()) == code(state)}. */
    public static final String CODES = "FORDQX";

    public PoolView {
        Objects.requireNonNull(role, "role");
        Objects.requireNonNull(pages, "pages");
        if (pages.length() != capacity) {
            throw new IllegalArgumentException("pages has " + pages.length() + " characters for a capacity of " + capacity);
        }
        for (int i = 0; i < capacity; i++) {
            if (CODES.indexOf(pages.charAt(i)) < 0) {
                throw new IllegalArgumentException("pages[" + i + "] is '" + pages.charAt(i) + "' (U+"
                    + String.format(Locale.ROOT, "%04X", (int) pages.charAt(i)) + "), not one of " + CODES);
            }
        }
        counters = LiveState.orderedCopy(counters, "pool " + role);
        holders = List.copyOf(holders);
        for (Holder h : holders) {
            for (int slot : h.slots()) {
                if (slot < 0 || slot >= capacity) {
                    throw new IllegalArgumentException("request " + h.requestId() + " holds slot " + slot + " of a pool of " + capacity);
                }
            }
        }
    }

    /** A view with no holders booked. */
    public PoolView(String role, int capacity, String pages, Map<String, Long> counters) {
        this(role, capacity, pages, counters, List.of());
    }

    /** @return this view with the given holders */
    public PoolView withHolders(List<Holder> holders) {
        return new PoolView(role, capacity, pages, counters, holders);
    }

    /**
     * One live request's pages in this pool.
     *
     * @param requestId the request id (the router's, below 2^53)
     * @param tenant    its tenant
     * @param phase     what the role is doing with it: "prefill" (written, being sent), "receiving", "decoding"
     * @param pages     pages it holds
     * @param slots     their slots, in block-table order; empty when the role does not know them (receiving), at most
     *                  {@link PageHolders#MAX_SLOTS}
     */
    public record Holder(long requestId, String tenant, String phase, int pages, List<Integer> slots) {
        public Holder {
            Objects.requireNonNull(tenant, "tenant");
            Objects.requireNonNull(phase, "phase");
            slots = List.copyOf(slots);
            if (pages < 0 || slots.size() > pages) {
                throw new IllegalArgumentException("request " + requestId + ": " + slots.size() + " slots for " + pages + " pages");
            }
        }
    }

    /** The character the page map uses for a state. */
    public static char code(SlotState state) {
        return switch (state) {
            case FREE -> 'F';
            case OWNED -> 'O';
            case RECEIVING -> 'R';
            case DRAINING -> 'D';
            case QUARANTINED -> 'Q';
            case RETIRED -> 'X';
        };
    }

    /**
     * Reads a pool's slot states and counters. Slots are read one by one without stopping the pool, so
     * under load the map is a near-instant picture, not an atomic one (the counters come from one
     * {@link KvPool#snapshot()}).
     */
    public static PoolView of(String role, KvPool pool) {
        final int n = pool.capacity();
        final StringBuilder sb = new StringBuilder(n);
        for (int slot = 0; slot < n; slot++) {
            sb.append(code(pool.stateOfSlot(slot)));
        }
        return new PoolView(role, n, sb.toString(), counters(pool.snapshot()));
    }

    /**
     * A snapshot's fields by name in snake_case ({@code openSequences} → {@code open_sequences}), in declaration
     * order: the live page's one naming style (docs/example-server.md, "Metrics", maps them to the Prometheus names).
     */
    public static Map<String, Long> counters(PoolSnapshot s) {
        final Map<String, Long> m = new LinkedHashMap<>();
        for (var c : PoolSnapshot.class.getRecordComponents()) {
            try {
                m.put(snakeCase(c.getName()), (Long) c.getAccessor().invoke(s));
            } catch (ReflectiveOperationException e) {
                throw new IllegalStateException(e);
            }
        }
        return m;
    }

    /** @return {@code openSequences} → {@code open_sequences} */
    static String snakeCase(String camel) {
        final StringBuilder b = new StringBuilder(camel.length() + 4);
        for (int i = 0; i < camel.length(); i++) {
            final char c = camel.charAt(i);
            if (Character.isUpperCase(c)) {
                b.append('_').append(Character.toLowerCase(c));
            } else {
                b.append(c);
            }
        }
        return b.toString();
    }
}
