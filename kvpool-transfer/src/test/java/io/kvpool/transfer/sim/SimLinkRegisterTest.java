package io.kvpool.transfer.sim;

import io.kvpool.DType;
import io.kvpool.KvLayout;
import io.kvpool.storage.HostPageStorage;
import org.junit.jupiter.api.Test;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

/** The simulated link refuses what every transport refuses at registration: a slot out of range, a slot twice. */
class SimLinkRegisterTest {

    @Test
    void aRepeatedOrOutOfRangeSlotIsRefused() {
        final SimLink[] l = new SimNetwork(1, SimFaults.NONE).connect("prefill", "decode", true);
        try (HostPageStorage storage = HostPageStorage.allocate(new KvLayout(1, 1, 8, DType.FP16, 4), 8)) {
            final IllegalArgumentException twice = assertThrows(IllegalArgumentException.class,
                () -> l[1].register(storage, new int[] {2, 6, 2}));
            assertEquals("slot 2 is registered twice", twice.getMessage());
            final IndexOutOfBoundsException outside = assertThrows(IndexOutOfBoundsException.class,
                () -> l[1].register(storage, new int[] {1, 8}));
            assertTrue(outside.getMessage().contains("slot 8 of a storage of 8 pages"), outside.getMessage());
            l[1].register(storage, new int[] {7, 0, 3}); // distinct, in range, any order
        }
    }
}
