package io.kvpool.transfer;

import io.kvpool.KvPool;
import io.kvpool.transfer.spi.PeerLink;
import io.kvpool.transfer.testkit.Kv;
import io.kvpool.transfer.wire.Message;
import io.kvpool.transfer.wire.WireCodec;
import io.kvpool.transfer.wire.WireCodecV3;
import io.kvpool.transfer.wire.WireFormat;
import org.junit.jupiter.api.Test;

import java.time.Duration;
import java.util.function.UnaryOperator;

import static org.junit.jupiter.api.Assertions.*;

/**
 * The engine's instance id in the handshake (links of version 4 and later): each side learns which engine, of several
 * of one identity, a link reaches, and a receiver finds the link to the engine that prepared a request.
 */
class PeerInstanceTest {

    /** A link whose sends must be frames version-3 code reads, as the same message: what goes to a version-3 peer. */
    static final class ReadableByV3 extends ForwardingLink {
        int frames;

        ReadableByV3(PeerLink in) {
            super(in);
        }

        @Override
        public void send(byte[] frame) {
            final Message old = WireCodecV3.decode(frame); // throws for a frame version-3 code cannot read (an INSTANCE)
            assertEquals(old, WireCodec.decode(frame));
            frames++;
            in.send(frame);
        }
    }

    static SimPair rig(PeerIdentity prefill, PeerIdentity decode, UnaryOperator<PeerLink> wrap) {
        return new SimPair(new SimPair.Setup(Kv.pool(32), Kv.pool(32)).seed(5).sender(p -> TransferSender.builder(p, prefill))
            .receiver(p -> TransferReceiver.builder(p, decode)).links(wrap, wrap));
    }

    @Test
    void bothSidesLearnTheOtherEnginesInstanceInTheHandshake() {
        try (SimPair rig = rig(Kv.identity(), Kv.identity(), l -> l)) {
            assertNotEquals(0, rig.sender.instance());
            assertNotEquals(0, rig.receiver.instance());
            assertNotEquals(rig.sender.instance(), rig.receiver.instance(), "64 random bits each");
            assertEquals(WireFormat.VERSION, rig.receiver.peer(rig.rp).protocolVersion());
            assertEquals(rig.sender.instance(), rig.receiver.peer(rig.rp).remoteInstance());
            assertEquals(rig.receiver.instance(), rig.sender.peer(rig.sp).remoteInstance());
            assertEquals(rig.rp, rig.receiver.upPeerOf(rig.sender.instance()));
            assertEquals(-1, rig.receiver.upPeerOf(rig.receiver.instance()));
            final IncomingTransfer t = OneRequest.offerAndStart(rig.sender, rig.prefill, rig.receiver,
                rig.receiver.upPeerOf(rig.sender.instance()), 1, 9);
            assertEquals(IncomingTransfer.State.COMMITTED, OneRequest.finish(t, () -> rig.run(1), 200, 1, 9));
        }
    }

    @Test
    void aVersion3PeerLinksUpWithoutAnInstanceAndIsNeverSentOne() {
        // decode, then prefill, on the previous release: every frame to it must be one WireCodecV3 reads
        final PeerIdentity v3 = Kv.identity().withVersions(1, 3);
        for (boolean oldDecode : new boolean[] {true, false}) {
            try (SimPair rig = oldDecode ? rig(Kv.identity(), v3, ReadableByV3::new) : rig(v3, Kv.identity(), ReadableByV3::new)) {
                assertEquals(3, rig.receiver.peer(rig.rp).protocolVersion());
                assertTrue(rig.receiver.peer(rig.rp).isUp() && rig.sender.peer(rig.sp).isUp());
                assertEquals(0, rig.receiver.peer(rig.rp).remoteInstance(), "version 3 sends no instance");
                assertEquals(0, rig.sender.peer(rig.sp).remoteInstance());
                assertEquals(-1, rig.receiver.upPeerOf(rig.sender.instance()), "a version-3 link is no engine's link by instance");
                final IncomingTransfer t = OneRequest.offerAndStart(rig.sender, rig.prefill, rig.receiver, rig.rp, 1, 9);
                assertEquals(IncomingTransfer.State.COMMITTED, OneRequest.finish(t, () -> rig.run(1), 200, 1, 9));
                assertTrue(((ReadableByV3) rig.senderLink).frames >= 2 && ((ReadableByV3) rig.receiverLink).frames >= 2);
                assertEquals(0, rig.receiver.malformedFrames() + rig.sender.malformedFrames());
            }
        }
    }

    @Test
    void upPeerOfFindsTheNewestLinkUpToThatEngine() {
        final long a = 0xA1L;
        final long b = 0xB2L;
        try (KvPool pool = Kv.pool(16)) {
            final TransferReceiver receiver = TransferReceiver.builder(pool, Kv.identity()).clock(new ManualClock()).build();
            final ScriptedLink toA = new ScriptedLink().hello(Kv.identity(), a);
            final ScriptedLink toB = new ScriptedLink().hello(Kv.identity(), b);
            final int pa = receiver.addPeer(toA);
            final int pb = receiver.addPeer(toB);
            receiver.doWork();
            assertEquals(pa, receiver.upPeerOf(a));
            assertEquals(pb, receiver.upPeerOf(b));
            assertEquals(-1, receiver.upPeerOf(0xC3L));
            assertEquals(a, receiver.peer(pa).remoteInstance());
            assertThrows(IllegalArgumentException.class, () -> receiver.upPeerOf(0));

            toA.failLink("gone");
            receiver.doWork();
            assertEquals(-1, receiver.upPeerOf(a), "a failed link is no way to its engine");
            final int pa2 = receiver.addPeer(new ScriptedLink().hello(Kv.identity(), a)); // the same process reconnected
            final int pa3 = receiver.addPeer(new ScriptedLink().hello(Kv.identity(), a)); // and again
            receiver.doWork();
            assertTrue(pa2 > pb && pa3 > pa2);
            assertEquals(pa3, receiver.upPeerOf(a), "the newest link up");
            assertEquals(pb, receiver.upPeerOf(b));
            receiver.close();
        }
    }

    @Test
    void theLinkWaitsForThePeersInstanceAndACopyOfTheHelloMeanwhileIsIgnored() {
        try (KvPool pool = Kv.pool(16)) {
            final TransferReceiver receiver = TransferReceiver.builder(pool, Kv.identity()).clock(new ManualClock()).build();
            final ScriptedLink link = new ScriptedLink();
            final int p = receiver.addPeer(link);
            link.inject(new Message.Hello(Kv.identity())).inject(new Message.Hello(Kv.identity()));
            receiver.doWork();
            assertEquals(Peer.State.HANDSHAKE, receiver.peer(p).state(), "no INSTANCE yet");
            assertFalse(receiver.peer(p).isUp());
            assertEquals(1, receiver.duplicateHellos());
            assertEquals(new Message.Instance(receiver.instance()), link.sent.getLast(), "ours went out after its HELLO was accepted");
            link.inject(new Message.Instance(ScriptedLink.INSTANCE));
            receiver.doWork();
            assertTrue(receiver.peer(p).isUp(), receiver.peer(p)::toString);
            assertEquals(ScriptedLink.INSTANCE, receiver.peer(p).remoteInstance());
            link.inject(new Message.Instance(ScriptedLink.INSTANCE)); // a copy changes nothing
            receiver.doWork();
            assertTrue(receiver.peer(p).isUp(), receiver.peer(p)::toString);
            link.inject(new Message.Instance(ScriptedLink.INSTANCE + 1)); // another process on the same link: never
            receiver.doWork();
            assertEquals(Peer.State.FAILED, receiver.peer(p).state());
            assertTrue(receiver.peer(p).failure().contains("a second INSTANCE"), receiver.peer(p).failure());
            receiver.close();
        }
    }

    @Test
    void aProtocolFrameBeforeThePeersInstanceFailsTheLink() {
        try (KvPool pool = Kv.pool(16)) {
            final TransferSender sender = TransferSender.builder(pool, Kv.identity()).clock(new ManualClock()).build();
            final ScriptedLink link = new ScriptedLink();
            final int p = sender.addPeer(link);
            link.inject(new Message.Hello(Kv.identity()));
            link.inject(new Message.Descriptor(1, 0, 1, 4, Kv.LAYOUT.fingerprint(), 1, 0, new long[1], new byte[] {0}));
            sender.doWork();
            assertEquals(Peer.State.FAILED, sender.peer(p).state());
            assertEquals("protocol error: Descriptor before the peer's INSTANCE", sender.peer(p).failure());
            assertEquals(1, sender.malformedFrames());
            sender.close();
        }
    }

    @Test
    void aHelloWithoutAnInstanceFailsTheHandshakeAfterIdlePlusTimeout() {
        try (KvPool pool = Kv.pool(16)) {
            final ManualClock clock = new ManualClock();
            final TransferReceiver receiver = TransferReceiver.builder(pool, Kv.identity()).clock(clock)
                .heartbeat(Heartbeat.every(Duration.ofMillis(100), Duration.ofMillis(300))).build();
            final ScriptedLink link = new ScriptedLink();
            final int p = receiver.addPeer(link);
            link.inject(new Message.Hello(Kv.identity()));
            for (int i = 0; i < 100; i++) {
                receiver.doWork();
                clock.advanceMillis(10);
            }
            assertEquals(Peer.State.FAILED, receiver.peer(p).state());
            assertTrue(receiver.peer(p).failure().startsWith("handshake: no INSTANCE after the peer's HELLO within 4"),
                receiver.peer(p).failure());
            receiver.close();
        }
    }
}
