package io.kvpool.transfer.spi;

import org.junit.jupiter.api.Test;

import java.util.Arrays;

import static org.junit.jupiter.api.Assertions.*;

class SlotChecksTest {

    @Test
    void aRepeatedSlotIsRefusedInAnyOrderAndRunsUpOrDownPass() {
        SlotChecks.requireDistinct(new int[] {1, 2, 5, 9}, 10, "registered twice");
        SlotChecks.requireDistinct(new int[] {9, 5, 2, 1}, 10, "registered twice");
        SlotChecks.requireDistinct(new int[] {5, 1, 9, 2}, 10, "registered twice");
        SlotChecks.requireDistinct(new int[] {}, 10, "registered twice");
        for (int[] bad : new int[][] {{5, 1, 5, 2}, {1, 2, 2, 3}, {3, 2, 2, 1}, {7, 7}}) {
            final IllegalArgumentException e = assertThrows(IllegalArgumentException.class,
                () -> SlotChecks.requireDistinct(bad, 10, "a destination twice in one put batch"), Arrays.toString(bad));
            assertTrue(e.getMessage().matches("slot \\d is a destination twice in one put batch"), e.getMessage());
        }
    }

    @Test
    void aSlotOutOfRangeIsNamedWithTheStorageSize() {
        final IndexOutOfBoundsException e = assertThrows(IndexOutOfBoundsException.class,
            () -> SlotChecks.requireDistinct(new int[] {1, 10}, 10, "registered twice"));
        assertEquals("slot 10 of a storage of 10 pages", e.getMessage());
        assertThrows(IndexOutOfBoundsException.class, () -> SlotChecks.requireDistinct(new int[] {3, -1, 2}, 10, "registered twice"));
    }
}
