package io.kvpool.transfer.sim;

import io.kvpool.DType;
import io.kvpool.KvLayout;
import io.kvpool.storage.HostPageStorage;
import io.kvpool.transfer.spi.RemoteRegion;
import org.junit.jupiter.api.Test;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * The simulated link refuses what every transport refuses: at registration a slot out of range or a slot twice, and a
 * write into a region attached on another link.
 */
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

    @Test
    void aRegionAttachedOnAnotherLinkIsRefused() {
        final SimNetwork net = new SimNetwork(1, SimFaults.NONE);
        final SimLink[] toFirst = net.connect("prefill", "decode-1", true);
        final SimLink[] toSecond = net.connect("prefill", "decode-2", true);
        try (HostPageStorage source = HostPageStorage.allocate(new KvLayout(1, 1, 8, DType.FP16, 4), 4);
             HostPageStorage first = HostPageStorage.allocate(new KvLayout(1, 1, 8, DType.FP16, 4), 4)) {
            final RemoteRegion ofFirst = toFirst[0].attach(toFirst[1].register(first, new int[] {0, 1}).key(), 2);
            final IllegalArgumentException other = assertThrows(IllegalArgumentException.class,
                () -> toSecond[0].putBatch(ofFirst, new int[] {0}, source, new int[] {0}, 0, 1, 7));
            assertTrue(other.getMessage().contains("was not attached on"), other.getMessage());
            final RemoteRegion foreign = () -> 2; // another transport's region type: refused the same way, not a cast failure
            assertThrows(IllegalArgumentException.class,
                () -> toSecond[0].putBatch(foreign, new int[] {0}, source, new int[] {0}, 0, 1, 8));
            net.drainAll();
            assertEquals(0, net.landedWrites(), "nothing of a refused batch may land");
            toFirst[0].putBatch(ofFirst, new int[] {1}, source, new int[] {2}, 0, 1, 9); // its own link may write
            net.drainAll();
            assertEquals(1, net.landedWrites());
        }
    }
}
