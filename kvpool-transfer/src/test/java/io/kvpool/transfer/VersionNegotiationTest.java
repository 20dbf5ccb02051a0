package io.kvpool.transfer;

import io.kvpool.KvPool;
import io.kvpool.transfer.spi.PeerLink;
import io.kvpool.transfer.testkit.Kv;
import io.kvpool.transfer.wire.MalformedMessageException;
import io.kvpool.transfer.wire.Message;
import io.kvpool.transfer.wire.WireCodec;
import io.kvpool.transfer.wire.WireCodecV1;
import io.kvpool.transfer.wire.WireFormat;
import org.junit.jupiter.api.Test;

import java.util.ArrayList;
import java.util.List;
import java.util.Map;

import static org.junit.jupiter.api.Assertions.*;

/**
 * A fleet mid-rollout: peers agree on the highest protocol version their HELLO ranges share, a build
 * difference keeps serving (unless strict), a previous-version peer (version 1, checked frame by frame
 * against {@link WireCodecV1}, the verbatim version-1 codec) links up and transfers.
 */
class VersionNegotiationTest {

    static PeerIdentity id(String env, String build) {
        return PeerIdentity.of(Kv.LAYOUT, "test-model@r1", env, build);
    }

    /** A link whose sends must be frames version-1 code reads: what goes to a version-1 peer. */
    static final class ReadableByV1 extends ForwardingLink {
        final List<byte[]> frames = new ArrayList<>();

        ReadableByV1(PeerLink in) {
            super(in);
        }

        @Override
        public void send(byte[] frame) {
            // version-1 code reads it (the fixture throws otherwise) as the same message this code means, and would
            // have sent the very same bytes for it: a field swapped in both of this code's encoder and decoder fails here
            final Message old = WireCodecV1.decode(frame);
            assertEquals(old, WireCodec.decode(frame), "what version-1 code reads is what was sent");
            assertArrayEquals(WireCodecV1.encode(old), frame, () -> "version-1 code encodes " + old + " to other bytes");
            frames.add(frame.clone());
            in.send(frame);
        }
    }

    static final class Rig extends SimPair {
        Rig(java.util.function.Function<KvPool, TransferSender.Builder> sb,
            java.util.function.Function<KvPool, TransferReceiver.Builder> rb, boolean receiverIsV1) {
            super(new Setup(Kv.pool(32), Kv.pool(32)).seed(11).sender(sb).receiver(rb)
                .links(l -> receiverIsV1 ? new ReadableByV1(l) : l, l -> receiverIsV1 ? new ReadableByV1(l) : l)
                .settle(20, false)); // some of these links are meant to be refused
        }

        Rig(PeerIdentity s, PeerIdentity r, boolean receiverIsV1) {
            this(p -> TransferSender.builder(p, s), p -> TransferReceiver.builder(p, r), receiverIsV1);
        }

        /** One request through the link; @return its final state at the receiver */
        IncomingTransfer.State transfer(long req, int tokens) {
            final IncomingTransfer t = OneRequest.offerAndStart(sender, prefill, receiver, rp, req, tokens);
            return OneRequest.finish(t, () -> run(1), 200, req, tokens);
        }
    }

    @Test
    void theHighestCommonVersionIsPicked() {
        final PeerIdentity a = id("test", "b").withVersions(1, 2);
        assertEquals(2, a.commonVersion(id("test", "b").withVersions(2, 5)));
        assertEquals(1, a.commonVersion(id("test", "b").withVersions(1, 1)));
        assertEquals(-1, a.commonVersion(id("test", "b").withVersions(3, 4)));
        assertEquals(List.of("protocol versions: local=[1,2] remote=[3,4]"), a.mismatches(id("test", "b").withVersions(3, 4)));
    }

    @Test
    void currentPeersSpeakTheCurrentVersion() {
        try (Rig rig = new Rig(id("test", "b1"), id("test", "b1"), false)) {
            assertEquals(WireFormat.VERSION, rig.receiver.peer(rig.rp).protocolVersion());
            assertEquals(WireFormat.VERSION, rig.sender.peer(rig.sp).protocolVersion());
            assertEquals(IncomingTransfer.State.COMMITTED, rig.transfer(1, 9));
        }
    }

    @Test
    void identitiesClaimingVersionsBeyondTheWireFormatSettleOnOneItSpeaks() {
        // both claim a version this build cannot encode: the link speaks the newest one it can, instead of failing
        // every frame it sends after the handshake
        final int beyond = WireFormat.VERSION + 1;
        try (Rig rig = new Rig(id("test", "b1").withVersions(1, beyond), id("test", "b1").withVersions(1, beyond), false)) {
            assertEquals(WireFormat.VERSION, rig.receiver.peer(rig.rp).protocolVersion());
            assertEquals(WireFormat.VERSION, rig.sender.peer(rig.sp).protocolVersion());
            assertEquals(IncomingTransfer.State.COMMITTED, rig.transfer(1, 9));
        }
        try (Rig rig = new Rig(id("test", "b1").withVersions(beyond, beyond), id("test", "b1").withVersions(beyond, beyond), false)) {
            final Peer r = rig.receiver.peer(rig.rp);
            assertEquals(Peer.State.REFUSED, r.state(), r::toString);
            assertTrue(r.failure().contains("protocol versions: local=[" + beyond + "," + beyond + "] remote=[" + beyond + "," + beyond
                + "] share none with this build's wire format [" + WireFormat.MIN_VERSION + "," + WireFormat.VERSION + "]"), r.failure());
        }
    }

    @Test
    void aRangeSetBeyondTheWireFormatIsAnnouncedOnlyUpToIt() {
        // a later build's code would otherwise settle on a version above this one's (it writes it), and its first
        // frame of that version fail the link here: the handshake's own INSTANCE, on version 4 and later
        try (KvPool pool = Kv.pool(16)) {
            final TransferReceiver receiver = TransferReceiver.builder(pool, id("test", "b1").withVersions(1, WireFormat.VERSION + 1))
                .clock(new ManualClock()).build();
            final ScriptedLink link = new ScriptedLink();
            receiver.addPeer(link);
            assertEquals(List.of(new Message.Hello(id("test", "b1").withVersions(1, WireFormat.VERSION))), link.sent);
            receiver.close();
        }
    }

    @Test
    void aPreviousVersionReceiverAndACurrentSenderLinkUpAndTransfer() {
        // decode on the previous release (version 1 only, builds strictly equal, as version-1 code refused others);
        // prefill on this one. Every frame either sends must be one version-1 code reads.
        final PeerIdentity old = id("test", "build-1").withVersions(1, 1);
        try (Rig rig = new Rig(p -> TransferSender.builder(p, id("test", "build-1")),
            p -> TransferReceiver.builder(p, old).strictBuild(true), true)) {
            assertTrue(rig.receiver.peer(rig.rp).isUp(), rig.receiver.peer(rig.rp)::toString);
            assertTrue(rig.sender.peer(rig.sp).isUp(), rig.sender.peer(rig.sp)::toString);
            assertEquals(1, rig.sender.peer(rig.sp).protocolVersion());
            assertEquals(1, rig.receiver.peer(rig.rp).protocolVersion());
            // the old side's HELLO is byte for byte what version-1 code sent, and the answer is one it reads
            final ReadableByV1 oldSide = (ReadableByV1) rig.receiverLink;
            final ReadableByV1 newSide = (ReadableByV1) rig.senderLink;
            assertArrayEquals(WireCodecV1.encode(new Message.Hello(new PeerIdentity(1, Kv.LAYOUT.fingerprint(), "test-model@r1",
                "test", "build-1"))), oldSide.frames.get(0));
            assertEquals(new Message.Hello(new PeerIdentity(1, Kv.LAYOUT.fingerprint(), "test-model@r1", "test", "build-1")),
                WireCodecV1.decode(newSide.frames.get(0)));
            for (long req = 1; req <= 5; req++) {
                assertEquals(IncomingTransfer.State.COMMITTED, rig.transfer(req, 3 + (int) req * 5));
            }
            assertTrue(oldSide.frames.size() > 5 && newSide.frames.size() > 5, "descriptors and completions crossed");
            assertEquals(0, rig.receiver.malformedFrames() + rig.sender.malformedFrames());
        }
    }

    @Test
    void aVersion1SenderCannotReadACurrentReceiversHelloSoPrefillIsRolledOutFirst() {
        // the rollout order this version needs (version-1 code reads nothing but version 1): the receiver speaks
        // first, and its HELLO carries a range; a version-1 sender's decoder fails on it.
        final byte[] hello = WireCodec.encode(new Message.Hello(id("test", "b")));
        final MalformedMessageException e = assertThrows(MalformedMessageException.class, () -> WireCodecV1.decode(hello));
        assertTrue(e.getMessage().contains("unsupported protocol version 2"), e.getMessage());
        // while a current receiver reads a version-1 HELLO, and agrees on version 1 with it
        final Message.Hello v1 = (Message.Hello) WireCodec.decode(WireCodecV1.encode(new Message.Hello(
            new PeerIdentity(1, Kv.LAYOUT.fingerprint(), "test-model@r1", "test", "b"))));
        assertEquals(1, id("test", "b").commonVersion(v1.identity()));
    }

    @Test
    void aBuildMismatchAcrossAnUpgradeKeepsServing() {
        try (Rig rig = new Rig(id("test", "v1.3.0"), id("test", "v1.2.0"), false)) {
            assertTrue(rig.receiver.peer(rig.rp).isUp(), rig.receiver.peer(rig.rp)::toString);
            assertTrue(rig.sender.peer(rig.sp).isUp(), rig.sender.peer(rig.sp)::toString);
            assertEquals(IncomingTransfer.State.COMMITTED, rig.transfer(1, 17));
            // exported: each side names the other's build per link
            assertEquals(Map.of("v1.3.0", 1), rig.receiver.peerBuilds());
            assertEquals(Map.of("v1.2.0", 1), rig.sender.peerBuilds());
            assertEquals("v1.3.0", rig.receiver.peers().get(rig.rp).remote().buildVersion());
            assertEquals(0, rig.receiver.refusedPeers() + rig.sender.refusedPeers());
            rig.receiver.tearDownPeer(rig.rp);
            assertEquals(Map.of(), rig.receiver.peerBuilds(), "a link that went down is no longer counted");
        }
    }

    @Test
    void strictBuildRefusesAnotherBuildNamingBoth() {
        try (Rig rig = new Rig(p -> TransferSender.builder(p, id("test", "v1.3.0")),
            p -> TransferReceiver.builder(p, id("test", "v1.2.0")).strictBuild(true), false)) {
            final Peer r = rig.receiver.peer(rig.rp);
            assertEquals(Peer.State.REFUSED, r.state(), r::toString);
            assertTrue(r.failure().contains("build: local=v1.2.0 remote=v1.3.0"), r.failure());
            final Peer s = rig.sender.peer(rig.sp);
            assertEquals(Peer.State.REFUSED, s.state(), s::toString);
            assertTrue(s.failure().contains("build: local=v1.2.0 remote=v1.3.0"), s.failure()); // the receiver's REFUSE
        }
    }

    @Test
    void aStrictSenderRefusesWithoutAHelloSoTheReceiverIsNeverUp() {
        // strictBuild is checked on the refusing side only: a HELLO before the REFUSE would bring the receiver UP
        // until the REFUSE arrived, and a transfer started in between would pin its pages for nothing
        try (KvPool pool = Kv.pool(8)) {
            final TransferSender strict = TransferSender.builder(pool, id("test", "v1.3.0")).strictBuild(true).build();
            final ScriptedLink link = new ScriptedLink().hello(id("test", "v1.2.0"));
            strict.addPeer(link);
            strict.doWork();
            assertEquals(1, link.sent.size(), "sent " + link.sent);
            final Message.Refuse refuse = assertInstanceOf(Message.Refuse.class, link.sent.get(0), () -> "sent " + link.sent);
            assertTrue(refuse.reason().contains("build: local=v1.3.0 remote=v1.2.0"), refuse.reason());
            assertEquals(Peer.State.REFUSED, strict.peer(0).state());
            strict.close();
        }
    }

    @Test
    void aRefuseAnsweringAVersion1HelloIsARefusalNotAProtocolError() {
        // both HELLOs cross: the sender's (version 1 only) in layout 1, the receiver's in layout 2; the receiver's
        // REFUSE answers the sender's HELLO in its layout, 1, which the sender must read as a refusal
        try (Rig rig = new Rig(p -> TransferSender.builder(p, id("test", "v1.3.0").withVersions(1, 1)),
            p -> TransferReceiver.builder(p, id("test", "v1.2.0")).strictBuild(true), false)) {
            final Peer s = rig.sender.peer(rig.sp);
            assertEquals(Peer.State.REFUSED, s.state(), s::toString);
            assertTrue(s.failure().contains("build: local=v1.2.0 remote=v1.3.0"), s.failure());
            assertEquals(0, rig.sender.malformedFrames() + rig.receiver.malformedFrames());
            assertEquals(1, rig.sender.refusedPeers());
        }
    }

    @Test
    void anEnvironmentMismatchIsStillRefusedWithBothNamesAcrossBuilds() {
        try (Rig rig = new Rig(id("staging", "v1.3.0"), id("production", "v1.2.0"), false)) {
            final Peer r = rig.receiver.peer(rig.rp);
            final Peer s = rig.sender.peer(rig.sp);
            assertEquals(Peer.State.REFUSED, r.state(), r::toString);
            assertEquals(Peer.State.REFUSED, s.state(), s::toString);
            assertTrue(r.failure().contains("environment: local=production remote=staging"), r.failure());
            assertTrue(s.failure().contains("environment: local=staging remote=production"), s.failure());
            assertFalse(r.failure().contains("build"), "the build is allowed to differ: " + r.failure());
            assertEquals(Map.of(), rig.receiver.peerBuilds());
        }
    }

    @Test
    void rangesWithNoVersionInCommonAreRefusedNamingBothRanges() {
        try (Rig rig = new Rig(id("test", "b").withVersions(8, 9), id("test", "b"), false)) {
            final Peer r = rig.receiver.peer(rig.rp);
            assertEquals(Peer.State.REFUSED, r.state(), r::toString);
            assertTrue(r.failure().contains("protocol versions: local=[1," + WireFormat.VERSION + "] remote=[8,9]"), r.failure());
            assertTrue(rig.sender.peer(rig.sp).failure().contains("protocol versions: local=[8,9] remote=[1," + WireFormat.VERSION + "]"),
                rig.sender.peer(rig.sp).failure());
        }
    }

    @Test
    void aSenderWaitsForTheReceiversHelloAndAnswersItInKind() {
        try (KvPool pool = Kv.pool(16)) {
            for (int format : new int[] {1, 2}) {
                final TransferSender sender = TransferSender.builder(pool, Kv.identity()).clock(new ManualClock()).build();
                final ScriptedLink link = new ScriptedLink();
                final int p = sender.addPeer(link);
                assertEquals(List.of(), link.sent, "a sender speaks only after the receiver's HELLO");
                final PeerIdentity receiver = format == 1 ? Kv.identity().withVersions(1, 1) : Kv.identity();
                link.injectRaw(format == 1 ? WireCodecV1.encode(new Message.Hello(receiver)) : WireCodec.encode(new Message.Hello(receiver)));
                sender.doWork();
                if (format == 1) {
                    assertEquals(List.of(new Message.Hello(Kv.identity().withVersions(1, 1))), link.sent);
                    assertEquals(1, sender.peer(p).protocolVersion());
                } else { // our HELLO, then our INSTANCE; up once the receiver's INSTANCE came
                    assertEquals(List.of(new Message.Hello(Kv.identity()), new Message.Instance(sender.instance())), link.sent);
                    assertEquals(WireFormat.VERSION, sender.peer(p).protocolVersion());
                    assertEquals(Peer.State.HANDSHAKE, sender.peer(p).state());
                    link.inject(new Message.Instance(ScriptedLink.INSTANCE));
                    sender.doWork();
                    assertEquals(ScriptedLink.INSTANCE, sender.peer(p).remoteInstance());
                }
                assertTrue(sender.peer(p).isUp());
                sender.close();
            }
        }
    }

    @Test
    void aFrameOfAnotherVersionThanTheLinkSpeaksFailsIt() {
        try (KvPool pool = Kv.pool(16)) {
            final TransferReceiver receiver = TransferReceiver.builder(pool, Kv.identity()).clock(new ManualClock()).build();
            final ScriptedLink link = new ScriptedLink();
            final int p = receiver.addPeer(link);
            link.hello(Kv.identity()); // this code's version
            link.injectRaw(WireCodec.encode(new Message.Drained(0, 1, 0, 0, 0, 0), 1));
            receiver.doWork();
            assertEquals(Peer.State.FAILED, receiver.peer(p).state());
            assertTrue(receiver.peer(p).failure().contains("Drained of version 1 on a link speaking version " + WireFormat.VERSION),
                receiver.peer(p).failure());
            receiver.close();
        }
    }
}
