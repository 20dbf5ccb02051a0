package io.kvpool.transfer.sim;

import io.kvpool.DType;
import io.kvpool.KvLayout;
import io.kvpool.storage.HostPageStorage;
import io.kvpool.transfer.spi.LinkListener;
import io.kvpool.transfer.spi.PeerLink;
import io.kvpool.transfer.spi.RemoteRegion;
import org.junit.jupiter.api.Test;

import java.lang.foreign.ValueLayout;
import java.nio.ByteBuffer;
import java.util.ArrayList;
import java.util.List;

import static org.junit.jupiter.api.Assertions.assertEquals;

/**
 * A simulated write reads its source as late as a transport may: at its completion or its landing, whichever is first,
 * or when it is cancelled. So what a sender does to a source page before its write is terminal is what lands.
 */
class SimLinkSourceReadTest {

    private static final KvLayout LAYOUT = new KvLayout(1, 1, 8, DType.FP16, 4);

    /** Collects write completions and flush results. */
    private static final class Events implements LinkListener {
        final List<Integer> writes = new ArrayList<>();
        final List<Boolean> flushes = new ArrayList<>();

        @Override
        public void onFrame(PeerLink link, ByteBuffer frame) {
        }

        @Override
        public void onWriteDone(PeerLink link, long token, int status) {
            writes.add(status);
        }

        @Override
        public void onFlushDone(PeerLink link, long token, boolean ok) {
            flushes.add(ok);
        }

        @Override
        public void onLinkFailed(PeerLink link, String reason) {
        }
    }

    @Test
    void aSourceChangedBeforeTheWriteCompletesLandsAsChanged() {
        final SimNetwork net = new SimNetwork(3, SimFaults.NONE); // writes take 1–50 µs
        final SimLink[] l = net.connect("prefill", "decode", true);
        try (HostPageStorage source = HostPageStorage.allocate(LAYOUT, 2);
             HostPageStorage target = HostPageStorage.allocate(LAYOUT, 2)) {
            source.hostPage(0).set(ValueLayout.JAVA_LONG, 0, 111L);
            final RemoteRegion region = l[0].attach(l[1].register(target, new int[] {1}).key(), 1);
            l[0].putBatch(region, new int[] {0}, source, new int[] {0}, 0, 1, 1);
            source.hostPage(0).set(ValueLayout.JAVA_LONG, 0, 222L); // the page's next tenant, before the write ended
            final Events events = new Events();
            net.drainAll();
            l[0].poll(events, 16);
            assertEquals(List.of(PeerLink.OK), events.writes);
            assertEquals(222L, target.hostPage(1).get(ValueLayout.JAVA_LONG, 0), "read at completion, not at post");

            // once its write completed, a source page is the sender's again: what it writes then does not land
            l[0].putBatch(region, new int[] {0}, source, new int[] {0}, 0, 1, 2);
            net.drainAll();
            l[0].poll(events, 16);
            source.hostPage(0).set(ValueLayout.JAVA_LONG, 0, 333L);
            net.drainAll();
            assertEquals(222L, target.hostPage(1).get(ValueLayout.JAVA_LONG, 0));
        }
    }

    @Test
    void aCancelledWriteHasReadItsSourceByItsCancellation() {
        final SimNetwork net = new SimNetwork(3, SimFaults.NONE);
        final SimLink[] l = net.connect("prefill", "decode", false); // cannot revoke: bytes on the wire still land
        try (HostPageStorage source = HostPageStorage.allocate(LAYOUT, 1);
             HostPageStorage target = HostPageStorage.allocate(LAYOUT, 1)) {
            source.hostPage(0).set(ValueLayout.JAVA_LONG, 0, 111L);
            final RemoteRegion region = l[0].attach(l[1].register(target, new int[] {0}).key(), 1);
            l[0].putBatch(region, new int[] {0}, source, new int[] {0}, 0, 1, 1);
            l[0].cancelWrites();
            final Events events = new Events();
            l[0].poll(events, 16);
            assertEquals(List.of(PeerLink.CANCELED), events.writes);
            source.hostPage(0).set(ValueLayout.JAVA_LONG, 0, 222L); // reused after the write's terminal state
            net.drainAll();
            assertEquals(1, net.landedWrites(), "a cancelled write's bytes already on the wire still land");
            assertEquals(111L, target.hostPage(0).get(ValueLayout.JAVA_LONG, 0), "read before the cancellation ended it");
        }
    }

    @Test
    void aSourceClosedBeforeItIsReadFailsTheWriteAndItsFlush() {
        final SimNetwork net = new SimNetwork(3, SimFaults.NONE);
        final SimLink[] l = net.connect("prefill", "decode", true);
        try (HostPageStorage target = HostPageStorage.allocate(LAYOUT, 1)) {
            final HostPageStorage source = HostPageStorage.allocate(LAYOUT, 1);
            final RemoteRegion region = l[0].attach(l[1].register(target, new int[] {0}).key(), 1);
            l[0].putBatch(region, new int[] {0}, source, new int[] {0}, 0, 1, 1);
            l[0].flush(2);
            source.close(); // the source pool went away under the write
            final Events events = new Events();
            net.drainAll();
            l[0].poll(events, 16);
            assertEquals(List.of(PeerLink.FAILED), events.writes);
            assertEquals(List.of(false), events.flushes, "a flush over a write that read nothing proves nothing");
            assertEquals(0, net.landedWrites());
        }
    }
}
