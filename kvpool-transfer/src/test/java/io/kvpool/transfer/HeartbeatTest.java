package io.kvpool.transfer;

import io.kvpool.KvPool;
import io.kvpool.Sequence;
import io.kvpool.storage.PageStorage;
import io.kvpool.transfer.sim.SimFaults;
import io.kvpool.transfer.spi.LinkListener;
import io.kvpool.transfer.spi.PeerLink;
import io.kvpool.transfer.spi.Registration;
import io.kvpool.transfer.spi.RemoteRegion;
import io.kvpool.transfer.testkit.Kv;
import io.kvpool.transfer.wire.Message;
import io.kvpool.transfer.wire.WireCodec;
import io.kvpool.transfer.wire.WireCodecV2;
import io.kvpool.transfer.wire.WireFormat;
import org.junit.jupiter.api.Test;

import java.nio.ByteBuffer;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;

import static org.junit.jupiter.api.Assertions.*;

/**
 * The heartbeat of links of version 3 and later ({@link Heartbeat}): a quiet link stays up on PINGs alone, a peer
 * that falls silent while its transport still says "up" (a partition, a stopped engine) is found within the
 * idle time plus the timeout, and a peer of version 2 is never sent one.
 */
class HeartbeatTest {

    static final Heartbeat FAST = Heartbeat.every(Duration.ofMillis(100), Duration.ofMillis(300));
    static final long STEP_NANOS = 10_000_000L;

    /**
     * A link across a path the test can cut. While cut, frames either way are lost, the other side's close does
     * not arrive, and the link still reports itself up: what UCX over TCP does across a partition. Counts the frames sent by type, and can check that
     * every frame sent is one version-2 code reads.
     */
    static final class Path extends ForwardingLink {
        final boolean readableByV2;
        final List<Integer> sentTypes = new ArrayList<>();
        boolean cut;

        Path(PeerLink in, boolean readableByV2) {
            super(in);
            this.readableByV2 = readableByV2;
        }

        long sent(int type) {
            return sentTypes.stream().filter(t -> t == type).count();
        }

        @Override
        public void send(byte[] frame) {
            if (readableByV2) {
                WireCodecV2.decode(frame); // throws if version-2 code could not read it
            }
            sentTypes.add(frame[3] & 0xFF);
            if (!cut) {
                in.send(frame);
            }
        }

        @Override
        protected void frameArrived(LinkListener listener, ByteBuffer frame) {
            if (!cut) {
                listener.onFrame(this, frame);
            }
        }

        @Override
        protected void linkFailed(LinkListener listener, String reason) {
            if (!cut) { // the other side's close does not cross a partition
                listener.onLinkFailed(this, reason);
            }
        }

        @Override
        public boolean isUp() {
            return cut || in.isUp();
        }
    }

    static final class Rig extends SimPair {
        final Path senderPath;
        final Path receiverPath;
        boolean senderRuns = true;

        Rig(Heartbeat senderBeat, Heartbeat receiverBeat, PeerIdentity senderId, PeerIdentity receiverId) {
            this(senderBeat, receiverBeat, senderId, receiverId, SimFaults.NONE, true);
        }

        Rig(Heartbeat senderBeat, Heartbeat receiverBeat, PeerIdentity senderId, PeerIdentity receiverId, SimFaults faults,
            boolean revocable) {
            super(new Setup(Kv.pool(32), Kv.pool(32)).faults(faults, revocable)
                .sender(p -> TransferSender.builder(p, senderId).heartbeat(senderBeat))
                .receiver(p -> TransferReceiver.builder(p, receiverId).heartbeat(receiverBeat))
                // what a version-2 side receives must be readable by version-2 code
                .links(l -> new Path(l, receiverId.maxVersion() == 2), l -> new Path(l, senderId.maxVersion() == 2))
                .settle(0, false));
            senderPath = (Path) senderLink;
            receiverPath = (Path) receiverLink;
            run(Duration.ofMillis(50));
        }

        Rig(Heartbeat beat) {
            this(beat, beat, Kv.identity(), Kv.identity());
        }

        /** One request through the link; @return its final state at the receiver */
        IncomingTransfer.State transfer(long req, int tokens) {
            final IncomingTransfer t = OneRequest.offerAndStart(sender, prefill, receiver, rp, req, tokens);
            return OneRequest.finish(t, () -> run(Duration.ofNanos(STEP_NANOS)), 100, req, tokens);
        }

        void run(Duration d) {
            for (long end = net.now() + d.toNanos(); net.now() < end; ) {
                if (senderRuns) {
                    sender.doWork();
                }
                receiver.doWork();
                net.advance(STEP_NANOS);
            }
        }

        /** Runs until either side's peer is down, at most {@code d}; @return sim time taken */
        Duration runUntilDown(Duration d) {
            final long start = net.now();
            while (net.now() - start < d.toNanos() && sender.peer(sp).isUp() && receiver.peer(rp).isUp()) {
                run(Duration.ofNanos(STEP_NANOS));
            }
            return Duration.ofNanos(net.now() - start);
        }

        Peer s() {
            return sender.peer(sp);
        }

        Peer r() {
            return receiver.peer(rp);
        }
    }

    @Test
    void aQuietLinkStaysUpOnPingsAlone() {
        try (Rig rig = new Rig(FAST)) {
            assertEquals(WireFormat.VERSION, rig.s().protocolVersion());
            rig.run(Duration.ofSeconds(10));
            assertTrue(rig.s().isUp(), rig.s()::toString);
            assertTrue(rig.r().isUp(), rig.r()::toString);
            // about one PING per idle period and side (a PONG heard resets the other side's idle time too)
            final long pings = rig.senderPath.sent(WireFormat.PING) + rig.receiverPath.sent(WireFormat.PING);
            assertTrue(pings >= 40 && pings <= 200, "PINGs in 10 s at 100 ms idle: " + pings);
            assertEquals(rig.senderPath.sent(WireFormat.PING), rig.receiverPath.sent(WireFormat.PONG), "every PING answered");
            assertEquals(0, rig.sender.heartbeatFailures() + rig.receiver.heartbeatFailures());
        }
    }

    @Test
    void aCutPathFailsTheLinkOnBothSidesWithinIdlePlusTimeout() {
        try (Rig rig = new Rig(FAST)) {
            rig.run(Duration.ofSeconds(1));
            rig.senderPath.cut = true;
            rig.receiverPath.cut = true;
            final long cutAt = rig.net.now();
            while (rig.net.now() - cutAt < Duration.ofSeconds(2).toNanos()
                && (rig.s().state() != Peer.State.FAILED || rig.r().state() != Peer.State.FAILED)) {
                rig.run(Duration.ofNanos(STEP_NANOS));
            }
            // the last frame heard came at most one idle time before the cut: found timeout to idle + timeout after
            // it, plus up to three duty cycles
            final long ms = (rig.net.now() - cutAt) / 1_000_000;
            assertTrue(ms >= 300 && ms <= 100 + 300 + 3 * STEP_NANOS / 1_000_000, "both sides failed " + ms + " ms after the cut");
            for (Peer p : List.of(rig.s(), rig.r())) {
                assertEquals(Peer.State.FAILED, p.state(), p::toString);
                assertTrue(p.failure().contains("heartbeat: nothing heard from the peer for"), p.failure());
                assertTrue(p.failure().contains("(100 ms idle, 300 ms timeout)"), p.failure());
            }
            assertEquals(1, rig.sender.heartbeatFailures());
            assertEquals(1, rig.receiver.heartbeatFailures());
        }
    }

    @Test
    void aBusyLinkSendsNoPing() {
        // any frame counts as heard: transfers back to back keep both sides hearing from each other
        try (Rig rig = new Rig(FAST)) {
            final long pingsBefore = rig.senderPath.sent(WireFormat.PING) + rig.receiverPath.sent(WireFormat.PING);
            for (long req = 1; req <= 60; req++) {
                assertEquals(IncomingTransfer.State.COMMITTED, rig.transfer(req, 9));
            }
            assertTrue(rig.net.now() > Duration.ofMillis(500).toNanos(), "the transfers took " + rig.net.now() / 1_000_000 + " ms");
            assertEquals(pingsBefore, rig.senderPath.sent(WireFormat.PING) + rig.receiverPath.sent(WireFormat.PING));
        }
    }

    @Test
    void withTheHeartbeatOffACutPathLeavesTheLinkUp() {
        // the control: without the heartbeat nothing notices a path that loses every frame while the link says "up"
        try (Rig rig = new Rig(Heartbeat.OFF)) {
            rig.senderPath.cut = true;
            rig.receiverPath.cut = true;
            rig.run(Duration.ofSeconds(60));
            assertTrue(rig.s().isUp(), rig.s()::toString);
            assertTrue(rig.r().isUp(), rig.r()::toString);
            assertEquals(0, rig.senderPath.sent(WireFormat.PING) + rig.receiverPath.sent(WireFormat.PING));
        }
    }

    @Test
    void aStoppedSenderEngineFailsItsTransfersAtTheReceiverAndThePoolBalances() {
        try (Rig rig = new Rig(FAST)) {
            final Sequence src = rig.prefill.admit(9, 0).sequence();
            src.append(9);
            Kv.write(src, 5);
            final IncomingTransfer t = rig.receiver.start(5, 9, 0, rig.rp); // the descriptor goes out; no offer yet
            rig.run(Duration.ofMillis(50));
            assertEquals(IncomingTransfer.State.RECEIVING, t.state());
            rig.senderRuns = false; // prefill's engine thread stopped: its link stays up, nothing answers
            rig.run(Duration.ofSeconds(1));
            assertEquals(Peer.State.FAILED, rig.r().state(), rig.r()::toString);
            assertTrue(rig.r().failure().startsWith("heartbeat:"), rig.r().failure());
            assertEquals(FailureReason.PEER_LOST, t.failure(), t::toString);
            // the receiver tore the link down; nothing was written, so its pages come back once proven
            rig.run(Duration.ofSeconds(1));
            assertEquals(0, rig.receiver.activeTransfers());
            assertEquals(0, rig.decode.snapshot().inUse(), rig.decode.snapshot()::toString);
            src.close();
        }
    }

    @Test
    void aSilentSendersWritesInFlightKeepItsPagesUntilTheTeardownProvesThemOver() {
        // every write straggles 1-2 s; the sender's engine stops with them in flight; the link cannot revoke
        final SimFaults late = SimFaults.NONE.withStragglers(1.0, 1_000_000_000L, 2_000_000_000L);
        try (Rig rig = new Rig(FAST, FAST, Kv.identity(), Kv.identity(), late, false)) {
            final IncomingTransfer t = OneRequest.offerAndStart(rig.sender, rig.prefill, rig.receiver, rig.rp, 8, 9);
            while (rig.sender.metrics().writesPosted() < 3) {
                rig.run(Duration.ofNanos(STEP_NANOS));
            }
            rig.senderRuns = false;
            while (rig.r().state() != Peer.State.FAILED) {
                assertEquals(3, rig.decode.snapshot().inUse(), "pages freed before the link failed");
                rig.run(Duration.ofNanos(STEP_NANOS));
            }
            assertTrue(rig.r().failure().startsWith("heartbeat:"), rig.r().failure());
            assertTrue(rig.net.now() < Duration.ofSeconds(1).toNanos(), "failed while the writes were still in flight");
            assertEquals(FailureReason.PEER_LOST, t.failure(), t::toString);
            rig.run(Duration.ofSeconds(3)); // the stragglers' time to land has passed
            assertEquals(3, rig.net.droppedWrites(), "every late write was dropped by the teardown, none landed");
            assertEquals(0, rig.net.landedWrites());
            assertEquals(1, rig.receiver.metrics().quarantineReleases(), "the pages were quarantined and freed by the teardown proof");
            assertEquals(0, rig.decode.snapshot().inUse(), rig.decode.snapshot()::toString);
        }
    }

    @Test
    void oneLongStepOfTheClockDoesNotFailALinkWhosePeerHadNoTurn() {
        // a GC pause or a long step of a test clock: the PING goes out after it, and the peer gets its turn to answer
        try (Rig rig = new Rig(FAST)) {
            rig.net.advance(Duration.ofSeconds(30).toNanos());
            rig.run(Duration.ofSeconds(1));
            assertTrue(rig.s().isUp(), rig.s()::toString);
            assertTrue(rig.r().isUp(), rig.r()::toString);
        }
    }

    @Test
    void oneLongStepOfTheClockWhileAPingIsUnansweredRestartsTheWait() {
        try (Rig rig = new Rig(FAST)) {
            rig.senderRuns = false; // the receiver pings, nobody answers yet
            final long pings = rig.receiverPath.sent(WireFormat.PING);
            while (rig.receiverPath.sent(WireFormat.PING) == pings) {
                rig.run(Duration.ofNanos(STEP_NANOS));
            }
            rig.net.advance(Duration.ofSeconds(30).toNanos()); // both engines stalled 30 s with the PING out
            rig.senderRuns = true;
            rig.run(Duration.ofSeconds(1));
            assertTrue(rig.s().isUp(), rig.s()::toString);
            assertTrue(rig.r().isUp(), rig.r()::toString);
            // a real silence after such a step still fails the link
            rig.senderRuns = false;
            rig.run(Duration.ofSeconds(1));
            assertEquals(Peer.State.FAILED, rig.r().state(), rig.r()::toString);
        }
    }

    @Test
    void anIdleTimeShorterThanTheDutyCycleStillFailsACutPath() {
        // idle 5 ms against duty cycles of 10 ms: no cycle may count as a stall that restarts the wait
        try (Rig rig = new Rig(Heartbeat.every(Duration.ofMillis(5), Duration.ofMillis(300)))) {
            rig.run(Duration.ofMillis(200));
            assertTrue(rig.r().isUp(), rig.r()::toString);
            rig.senderPath.cut = true;
            rig.receiverPath.cut = true;
            final Duration took = rig.runUntilDown(Duration.ofSeconds(30));
            assertEquals(Peer.State.FAILED, rig.r().state(), rig.r()::toString);
            assertTrue(took.toMillis() <= 5 + 300 + 3 * 10, "failed after " + took.toMillis() + " ms");
        }
    }

    @Test
    void aStallLongerThanTheTimeoutButShorterThanTheIdleTimeDoesNotFailALinkWhosePeerHadNoTurn() {
        // idle 1 s, timeout 300 ms: both engines stalled 600 ms with a PING out; the peer answers on its next turn
        try (Rig rig = new Rig(Heartbeat.every(Duration.ofSeconds(1), Duration.ofMillis(300)))) {
            rig.senderRuns = false;
            final long pings = rig.receiverPath.sent(WireFormat.PING);
            while (rig.receiverPath.sent(WireFormat.PING) == pings) {
                rig.run(Duration.ofNanos(STEP_NANOS));
            }
            rig.net.advance(Duration.ofMillis(600).toNanos());
            rig.senderRuns = true;
            rig.run(Duration.ofMillis(100));
            assertTrue(rig.r().isUp(), rig.r()::toString);
            assertTrue(rig.s().isUp(), rig.s()::toString);
        }
    }

    @Test
    void aVersion2PeerIsNeverPingedAndLinksUp() {
        // decode, then prefill, on the previous release: every frame to it must be one WireCodecV2 (the version-2
        // codec) reads
        for (boolean oldDecode : new boolean[] {true, false}) {
            final PeerIdentity v2 = Kv.identity().withVersions(1, 2);
            try (Rig rig = oldDecode ? new Rig(FAST, FAST, Kv.identity(), v2) : new Rig(FAST, FAST, v2, Kv.identity())) {
                version2PeerLinksUpUnpinged(rig);
            }
        }
    }

    private static void version2PeerLinksUpUnpinged(Rig rig) {
        assertTrue(rig.s().isUp(), rig.s()::toString);
        assertEquals(2, rig.s().protocolVersion());
        assertEquals(2, rig.r().protocolVersion());
        rig.run(Duration.ofSeconds(10));
        assertTrue(rig.s().isUp(), rig.s()::toString);
        assertEquals(0, rig.senderPath.sent(WireFormat.PING) + rig.receiverPath.sent(WireFormat.PING));
        assertEquals(IncomingTransfer.State.COMMITTED, rig.transfer(6, 9));
    }

    @Test
    void aHandshakeNeverAnsweredFailsAfterIdlePlusTimeout() {
        try (KvPool pool = Kv.pool(16)) {
            for (Heartbeat beat : new Heartbeat[] {FAST, Heartbeat.OFF}) {
                final ManualClock clock = new ManualClock();
                final TransferReceiver receiver = TransferReceiver.builder(pool, Kv.identity()).heartbeat(beat).clock(clock).build();
                final ScriptedLink link = new ScriptedLink(); // the peer connected and says nothing
                final int p = receiver.addPeer(link);
                for (int i = 0; i < 100; i++) {
                    receiver.doWork();
                    clock.advanceMillis(10);
                }
                if (beat == Heartbeat.OFF) { // the control: nothing watches the handshake
                    assertEquals(Peer.State.HANDSHAKE, receiver.peer(p).state());
                } else {
                    assertEquals(Peer.State.FAILED, receiver.peer(p).state());
                    assertTrue(receiver.peer(p).failure().matches("handshake: no HELLO from the peer within 4\\d0 ms "
                        + "\\(the heartbeat's 100 ms idle \\+ 300 ms timeout\\)"), receiver.peer(p).failure());
                    assertEquals(1, receiver.heartbeatFailures());
                }
                receiver.close();
            }
        }
    }

    @Test
    void aFrameThatArrivesWhileTheCycleIsPollingIsHeardBeforeItsLinkIsJudged() {
        try (KvPool pool = Kv.pool(16)) {
            final ManualClock clock = new ManualClock();
            final TransferReceiver receiver = TransferReceiver.builder(pool, Kv.identity()).heartbeat(FAST).clock(clock).build();
            final ScriptedLink a = new ScriptedLink();
            final ScriptedLink b = new ScriptedLink();
            final Runnable[] duringPollOfB = new Runnable[1];
            final ForwardingLink slowB = new ForwardingLink(b) { // a poll that takes a while (many completions, say)
                @Override
                public int poll(LinkListener l, int limit) {
                    final Runnable r = duringPollOfB[0];
                    duringPollOfB[0] = null;
                    if (r != null) {
                        r.run();
                    }
                    return super.poll(l, limit);
                }
            };
            final int pa = receiver.addPeer(a); // polled before b
            receiver.addPeer(slowB);
            a.hello(Kv.identity());
            b.hello(Kv.identity());
            receiver.doWork();
            assertTrue(receiver.peer(pa).isUp(), receiver.peer(pa)::toString);
            while (a.sent(Message.Ping.class).isEmpty()) { // a falls quiet; b keeps talking
                clock.advanceMillis(10);
                b.inject(new Message.Ping(1));
                receiver.doWork();
            }
            final Message.Ping ping = a.sent(Message.Ping.class).get(0);
            final long deadline = ping.token() + FAST.timeoutNanos(); // the token is the time it was sent
            while (clock.now + STEP_NANOS < deadline) {
                clock.advanceMillis(10);
                b.inject(new Message.Ping(1));
                receiver.doWork();
            }
            assertTrue(receiver.peer(pa).isUp(), receiver.peer(pa)::toString);
            // a's PONG arrives while the cycle polls b, after a was polled, and b's poll ends past a's deadline
            duringPollOfB[0] = () -> {
                clock.now = deadline + 5_000_000L;
                a.inject(new Message.Pong(ping.token()));
            };
            receiver.doWork();
            receiver.doWork(); // the next cycle reads it
            assertTrue(receiver.peer(pa).isUp(), receiver.peer(pa)::toString);
            assertEquals(0, receiver.heartbeatFailures());
            receiver.close();
        }
    }

    @Test
    void aPingIsAnsweredAlsoWithTheHeartbeatOff() {
        try (KvPool pool = Kv.pool(16)) {
            final TransferReceiver receiver = TransferReceiver.builder(pool, Kv.identity()).heartbeat(Heartbeat.OFF)
                .clock(new ManualClock()).build();
            final ScriptedLink link = new ScriptedLink();
            final int p = receiver.addPeer(link);
            link.hello(Kv.identity());
            receiver.doWork();
            link.inject(new Message.Ping(42));
            receiver.doWork();
            assertEquals(new Message.Pong(42), link.sent.get(link.sent.size() - 1));
            assertTrue(receiver.peer(p).isUp());
            receiver.close();
        }
    }

    @Test
    void aPingOnAVersion2LinkIsAProtocolError() {
        try (KvPool pool = Kv.pool(16)) {
            final TransferReceiver receiver = TransferReceiver.builder(pool, Kv.identity()).clock(new ManualClock()).build();
            final ScriptedLink link = new ScriptedLink();
            final int p = receiver.addPeer(link);
            link.hello(Kv.identity().withVersions(1, 2));
            receiver.doWork();
            assertEquals(2, receiver.peer(p).protocolVersion());
            final byte[] ping = WireCodec.encode(new Message.Ping(1));
            ping[2] = 2;
            link.injectRaw(ping);
            receiver.doWork();
            assertEquals(Peer.State.FAILED, receiver.peer(p).state());
            assertTrue(receiver.peer(p).failure().contains("unknown message type 8 in version 2"), receiver.peer(p).failure());
            receiver.close();
        }
    }

    @Test
    void settingsAreCheckedAndNamed() {
        final IllegalArgumentException e = assertThrows(IllegalArgumentException.class,
            () -> Heartbeat.every(Duration.ofMillis(100), Duration.ZERO));
        assertTrue(e.getMessage().contains("heartbeat timeout must be positive, was PT0S"), e.getMessage());
        assertThrows(IllegalArgumentException.class, () -> Heartbeat.every(null, Duration.ofSeconds(1)));
        assertFalse(Heartbeat.OFF.isOn());
        assertEquals("Heartbeat[idle 1000 ms, timeout 3000 ms]", Heartbeat.DEFAULT.toString());
        try (KvPool pool = Kv.pool(4)) {
            assertEquals(Heartbeat.DEFAULT, TransferSender.builder(pool, Kv.identity()).build().heartbeat());
            assertEquals(FAST, TransferReceiver.builder(pool, Kv.identity()).heartbeat(FAST).build().heartbeat());
        }
    }
}
