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
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * A late landing ({@link SimFaults#lateLanding()}): the write is reported ended at the usual time and its bytes arrive
 * 1–5 ms later, into whatever the target page holds by then; a flush answers only after they arrive.
 */
class SimLinkLateLandingTest {

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
    void aWriteReportedEndedLandsLaterOverTheTargetsNextTenantAndAFlushWaitsForIt() {
        final SimNetwork net = new SimNetwork(5, SimFaults.NONE.withLateLandings(1.0, 1_000_000, 5_000_000));
        final SimLink[] l = net.connect("prefill", "decode", false);
        try (HostPageStorage source = HostPageStorage.allocate(LAYOUT, 1);
             HostPageStorage target = HostPageStorage.allocate(LAYOUT, 1)) {
            source.hostPage(0).set(ValueLayout.JAVA_LONG, 0, 111L);
            final RemoteRegion region = l[0].attach(l[1].register(target, new int[] {0}).key(), 1);
            l[0].putBatch(region, new int[] {0}, source, new int[] {0}, 0, 1, 1);
            l[0].flush(2);
            final Events events = new Events();
            net.advance(100_000); // past every on-time completion (≤ 50 µs)
            l[0].poll(events, 16);
            assertEquals(List.of(PeerLink.OK), events.writes, "reported ended on time");
            assertTrue(events.flushes.isEmpty(), "a flush proves delivery: it waits for the landing");
            assertEquals(0, net.landedWrites());
            target.hostPage(0).set(ValueLayout.JAVA_LONG, 0, 222L); // the target page's next tenant
            net.advance(5_000_000);
            l[0].poll(events, 16);
            assertEquals(1, net.landedWrites());
            assertEquals(111L, target.hostPage(0).get(ValueLayout.JAVA_LONG, 0), "landed over the next tenant's bytes");
            assertEquals(List.of(true), events.flushes);
            assertEquals(1, l[0].lateLandings());
        }
    }

    @Test
    void aNetworkWithoutLateLandingsDrawsAsOneThatNeverHadThem() {
        // the same seed and faults, late landings at 0 or not named: the same landings at the same times
        final SimFaults base = SimFaults.NONE.withWrites(0.3, 0.1, 0, 0).withStragglers(0.2, 100_000, 200_000);
        assertEquals(landingTimes(base), landingTimes(base.withLateLandings(0, 1_000_000, 5_000_000)));
        assertFalse(landingTimes(base).equals(landingTimes(base.withLateLandings(0.5, 1_000_000, 5_000_000))));
    }

    /** @return each of 64 writes' status (one posted per 10 µs), with when it was reported and how many had landed by then */
    private static List<String> landingTimes(SimFaults faults) {
        final SimNetwork net = new SimNetwork(11, faults);
        final SimLink[] l = net.connect("prefill", "decode", true);
        final List<String> out = new ArrayList<>();
        final Events events = new Events();
        try (HostPageStorage source = HostPageStorage.allocate(LAYOUT, 1);
             HostPageStorage target = HostPageStorage.allocate(LAYOUT, 1)) {
            final RemoteRegion region = l[0].attach(l[1].register(target, new int[] {0}).key(), 1);
            for (int i = 0; i < 64; i++) {
                l[0].putBatch(region, new int[] {0}, source, new int[] {0}, 0, 1, i);
                net.advance(10_000);
                l[0].poll(events, 64);
                out.add(events.writes + "@" + net.now() + "/" + net.landedWrites());
            }
            net.drainAll();
            l[0].poll(events, 64);
            out.add(events.writes + "@" + net.now() + "/" + net.landedWrites());
        }
        return out;
    }
}
