package io.kvpool.transfer.spi;

import java.util.Arrays;

/** The checks a transport makes on the page slots it is handed ({@link PeerLink#register}, a put batch). Stateless. */
public final class SlotChecks {
    private SlotChecks() {
    }

    /**
     * Checks that every slot is in {@code [0, pageCount)} and that none repeats: in one pass when the slots run
     * strictly up or strictly down (a fresh allocation's usually do), else by sorting a copy. Allocates nothing in
     * the first case.
     *
     * @param slots     the slots, read, not kept
     * @param pageCount pages of the storage they index
     * @param twice     how a repeat reads after {@code "slot N is "}, e.g. {@code "registered twice"}
     * @throws IndexOutOfBoundsException {@code "slot N of a storage of M pages"} for a slot out of range
     * @throws IllegalArgumentException  {@code "slot N is <twice>"} for a repeated slot
     */
    public static void requireDistinct(int[] slots, int pageCount, String twice) {
        boolean up = true, down = true;
        for (int i = 0; i < slots.length; i++) {
            if (slots[i] < 0 || slots[i] >= pageCount) {
                throw new IndexOutOfBoundsException("slot " + slots[i] + " of a storage of " + pageCount + " pages");
            }
            if (i > 0) {
                up &= slots[i] > slots[i - 1];
                down &= slots[i] < slots[i - 1];
            }
        }
        if (up || down) {
            return;
        }
        final int[] sorted = slots.clone();
        Arrays.sort(sorted);
        for (int i = 1; i < sorted.length; i++) {
            if (sorted[i] == sorted[i - 1]) {
                throw new IllegalArgumentException("slot " + sorted[i] + " is " + twice);
            }
        }
    }
}
