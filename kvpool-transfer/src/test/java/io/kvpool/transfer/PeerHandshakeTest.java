package io.kvpool.transfer;

import io.kvpool.transfer.testkit.Kv;
import io.kvpool.DType;
import io.kvpool.KvLayout;
import io.kvpool.KvPool;
import io.kvpool.PoolSnapshot;
import io.kvpool.transfer.wire.Message;
import io.kvpool.transfer.wire.WireCodec;
import io.kvpool.transfer.wire.WireFormat;
import org.junit.jupiter.api.Test;

import java.util.Arrays;
import java.util.List;

import static org.junit.jupiter.api.Assertions.*;

/** The peer pre-check: identities must match field for field, and nothing but a clean HELLO opens a link. */
class PeerHandshakeTest {

    static final KvLayout OTHER_LAYOUT = new KvLayout(2, 1, 4, DType.FP32, 8);

    static PeerIdentity prod(KvLayout layout) {
        return PeerIdentity.of(layout, "glm-4.6@r3", "production", "v1.2.0");
    }

    /** A sender and a receiver over a fault-free simulated link; the handshake may fail. */
    static final class Pair extends SimPair {
        Pair(KvLayout senderLayout, PeerIdentity senderId, PeerIdentity receiverId) {
            super(new Setup(KvPool.builder(senderLayout).pages(16).maxContextTokens(16L * senderLayout.tokensPerPage()).build(),
                Kv.pool(16)).sender(p -> TransferSender.builder(p, senderId)).receiver(p -> TransferReceiver.builder(p, receiverId))
                .settle(20, false));
        }

        Peer atSender() {
            return sender.peer(sp);
        }

        Peer atReceiver() {
            return receiver.peer(rp);
        }
    }

    record Case(String field, PeerIdentity sender, KvLayout senderLayout, String senderValue, String receiverValue) {
    }

    static List<Case> mismatches() {
        final PeerIdentity r = prod(Kv.LAYOUT);
        final String fp = "0x" + Long.toHexString(Kv.LAYOUT.fingerprint());
        final String otherFp = "0x" + Long.toHexString(OTHER_LAYOUT.fingerprint());
        return List.of(
            // versions are ranges that must overlap, not equal numbers
            new Case("protocol versions", new PeerIdentity(9, r.layoutFingerprint(), r.modelId(), r.environment(), r.buildVersion()),
                Kv.LAYOUT, "[9,9]", "[1," + WireFormat.VERSION + "]"),
            new Case("layout fingerprint", prod(OTHER_LAYOUT), OTHER_LAYOUT, otherFp, fp),
            new Case("model", PeerIdentity.of(Kv.LAYOUT, "glm-4.6@r4", "production", "v1.2.0"), Kv.LAYOUT, "glm-4.6@r4", "glm-4.6@r3"),
            new Case("environment", PeerIdentity.of(Kv.LAYOUT, "glm-4.6@r3", "staging", "v1.2.0"), Kv.LAYOUT, "staging", "production"));
        // a build difference is not refused by default: see VersionNegotiationTest, which
        // refuses it with strictBuild(true) and keeps serving without
    }

    @Test
    void eachMismatchedFieldRefusesBothSidesNamingBothValues() {
        assertNotEquals(Kv.LAYOUT.fingerprint(), OTHER_LAYOUT.fingerprint());
        for (Case c : mismatches()) {
            try (Pair p = new Pair(c.senderLayout(), c.sender(), prod(Kv.LAYOUT))) {
                assertEquals(Peer.State.REFUSED, p.atReceiver().state(), () -> c.field() + ": " + p.atReceiver());
                assertEquals(Peer.State.REFUSED, p.atSender().state(), () -> c.field() + ": " + p.atSender());
                final String atReceiver = c.field() + ": local=" + c.receiverValue() + " remote=" + c.senderValue();
                final String atSender = c.field() + ": local=" + c.senderValue() + " remote=" + c.receiverValue();
                assertTrue(p.atReceiver().failure().contains(atReceiver),
                    () -> "receiver's failure '" + p.atReceiver().failure() + "' lacks '" + atReceiver + "'");
                assertTrue(p.atSender().failure().contains(atSender),
                    () -> "sender's failure '" + p.atSender().failure() + "' lacks '" + atSender + "'");
                assertTrue(p.atReceiver().failure().contains("1 mismatch"), p.atReceiver().failure());
                assertEquals(1, p.receiver.refusedPeers());
                assertEquals(1, p.sender.refusedPeers());
                assertEquals(0, p.receiver.malformedFrames());
                assertFalse(p.atReceiver().isUp());
                assertFalse(p.atReceiver().link().isUp(), "a refused link is closed");
                assertEquals(c.sender(), p.atReceiver().remote());

                // a transfer from the refused sender is rejected before anything is allocated
                final PoolSnapshot before = p.decode.snapshot();
                final IncomingTransfer t = p.receiver.start(1, 8, 4, p.rp);
                assertEquals(IncomingTransfer.State.REJECTED, t.state(), t::toString);
                assertEquals(FailureReason.PEER_LOST, t.failure());
                assertNull(t.admissionDecision(), "admission must not be asked for a refused sender");
                assertEquals(before, p.decode.snapshot(), "the rejected start changed the pool");
                assertEquals(0, p.receiver.activeTransfers());
            }
        }
    }

    @Test
    void everyDifferingFieldIsNamedAtOnce() {
        final PeerIdentity s = new PeerIdentity(9, OTHER_LAYOUT.fingerprint(), "m2", "staging", "b2");
        try (Pair p = new Pair(OTHER_LAYOUT, s, prod(Kv.LAYOUT))) {
            final String f = p.atReceiver().failure();
            assertEquals(Peer.State.REFUSED, p.atReceiver().state(), f);
            // version ranges; the build is named only with strictBuild (VersionNegotiationTest)
            for (String part : new String[] {"4 mismatch", "protocol versions: local=[1," + WireFormat.VERSION + "] remote=[9,9]", "layout fingerprint: local=0x",
                "model: local=glm-4.6@r3 remote=m2", "environment: local=production remote=staging"}) {
                assertTrue(f.contains(part), () -> "'" + f + "' lacks '" + part + "'");
            }
        }
    }

    @Test
    void matchingIdentitiesBringBothSidesUp() {
        try (Pair p = new Pair(Kv.LAYOUT, prod(Kv.LAYOUT), prod(Kv.LAYOUT))) {
            assertEquals(Peer.State.UP, p.atReceiver().state(), p.atReceiver()::toString);
            assertEquals(Peer.State.UP, p.atSender().state(), p.atSender()::toString);
            assertTrue(p.atReceiver().isUp());
            assertTrue(p.atSender().isUp());
            assertNull(p.atReceiver().failure());
            assertEquals(prod(Kv.LAYOUT), p.atReceiver().remote());
            assertEquals(0, p.receiver.refusedPeers() + p.sender.refusedPeers());
            // and a transfer from it is not rejected for the peer
            final IncomingTransfer t = p.receiver.start(1, 8, 4, p.rp);
            assertEquals(IncomingTransfer.State.RECEIVING, t.state(), t::toString);
            p.receiver.abort(t, "test over");
        }
    }

    // ---------------------------------------------------------------------------------------------
    // protocol errors, driven frame by frame

    static final class Scripted implements AutoCloseable {
        final KvPool pool = Kv.pool(16);
        final TransferReceiver receiver = TransferReceiver.builder(pool, Kv.identity()).clock(new ManualClock()).build();
        final ScriptedLink link = new ScriptedLink();
        final int peer = receiver.addPeer(link);

        Peer peer() {
            return receiver.peer(peer);
        }

        Scripted up() {
            link.hello(Kv.identity());
            receiver.doWork();
            assertEquals(Peer.State.UP, peer().state(), peer()::toString);
            return this;
        }

        void assertFailed(String fragment, long malformed) {
            assertEquals(Peer.State.FAILED, peer().state(), peer()::toString);
            assertTrue(peer().failure().contains(fragment), () -> "'" + peer().failure() + "' lacks '" + fragment + "'");
            assertFalse(link.isUp(), "the link that carried it must be closed");
            assertFalse(peer().isUp());
            assertEquals(malformed, receiver.malformedFrames());
            assertEquals(0, receiver.refusedPeers());
        }

        @Override
        public void close() {
            receiver.close();
            pool.close();
        }
    }

    static Message.Descriptor descriptor() {
        return new Message.Descriptor(1, 0, 1, 4, Kv.LAYOUT.fingerprint(), 1, 0, new long[] {1}, new byte[] {0});
    }

    @Test
    void aRefusalOfLongBuildsNamesBothBuildsInTheRefuseItSends() {
        // builds may have 256 bytes each, a REFUSE 256 in all: the names are cut, not the line, so the refused side (which
        // gets no HELLO when only this side checks builds) still learns both
        final String senderBuild = "2026.11.30-rc2+git." + "3f1e2d4c5b6a7988".repeat(5) + "-sender";
        final String receiverBuild = "2026.11.30-rc1+git." + "0a1b2c3d4e5f6071".repeat(5) + "-receiver";
        try (KvPool pool = Kv.pool(8)) {
            final TransferSender strict = TransferSender.builder(pool, PeerIdentity.of(Kv.LAYOUT, "test-model@r1", "test", senderBuild))
                .strictBuild(true).build();
            final ScriptedLink link = new ScriptedLink().hello(PeerIdentity.of(Kv.LAYOUT, "test-model@r1", "test", receiverBuild));
            strict.addPeer(link);
            strict.doWork();
            assertEquals(Peer.State.REFUSED, strict.peer(0).state());
            final Message.Refuse refuse = assertInstanceOf(Message.Refuse.class, link.sent.get(0), () -> "sent " + link.sent);
            for (String part : new String[] {"build: local=2026.11.30-rc2+git.", "-sender remote=2026.11.30-rc1+git.", "-receiver"}) {
                assertTrue(refuse.reason().contains(part), () -> "the REFUSE lacks '" + part + "': '" + refuse.reason() + "'");
            }
            assertTrue(strict.peer(0).failure().contains(senderBuild) && strict.peer(0).failure().contains(receiverBuild),
                () -> "this side's own record keeps both whole: " + strict.peer(0).failure());
            strict.close();
        }
    }

    @Test
    void aRefusalOfThreeLongMultiByteNamesStillNamesTheLastField() {
        // 60 four-byte code points a name (240 bytes, within a field's 256): six of them cut to 12 code points each are
        // still over the REFUSE's 256 bytes, and the codec's own cut would drop the line's end, the build
        final String llamas = "\uD83E\uDD99".repeat(60), camels = "\uD83D\uDC2A".repeat(60);
        try (KvPool pool = Kv.pool(8)) {
            final TransferSender strict = TransferSender.builder(pool, PeerIdentity.of(Kv.LAYOUT, llamas, llamas, llamas))
                .strictBuild(true).build();
            final ScriptedLink link = new ScriptedLink().hello(PeerIdentity.of(Kv.LAYOUT, camels, camels, camels));
            strict.addPeer(link);
            strict.doWork();
            assertEquals(Peer.State.REFUSED, strict.peer(0).state());
            // the HELLO goes first here: the peer refuses ours too, and names its view
            final Message.Refuse refuse = assertInstanceOf(Message.Refuse.class, link.sent.get(link.sent.size() - 1), () -> "sent " + link.sent);
            assertTrue(refuse.reason().getBytes(java.nio.charset.StandardCharsets.UTF_8).length <= PeerIdentity.MAX_FIELD_BYTES,
                refuse::reason);
            for (String part : new String[] {"model: local=\uD83E\uDD99", "environment: local=\uD83E\uDD99", "build: local=\uD83E\uDD99"}) {
                assertTrue(refuse.reason().contains(part), () -> "the REFUSE lacks '" + part + "': '" + refuse.reason() + "'");
            }
            assertTrue(refuse.reason().endsWith("\uD83D\uDC2A"), () -> "the line's end was cut: '" + refuse.reason() + "'");
            strict.close();
        }
    }

    @Test
    void theReceiverSendsItsHelloFirst() {
        try (Scripted s = new Scripted()) {
            assertEquals(List.of(new Message.Hello(Kv.identity())), s.link.sent);
            assertEquals(Peer.State.HANDSHAKE, s.peer().state());
            assertFalse(s.peer().isUp(), "no transfer may use a link before the peer's HELLO");
        }
    }

    @Test
    void aMalformedFrameAfterTheHandshakeFailsThePeer() {
        try (Scripted s = new Scripted().up()) {
            final byte[] f = WireCodec.encode(new Message.Drained(1, 1, 0, 0, 0, 0));
            f[2] = 9; // version 9
            s.link.injectRaw(f);
            s.link.inject(new Message.Drained(1, 1, 0, 0, 0, 0)); // after the bad frame: must be ignored
            s.receiver.doWork();
            s.assertFailed("malformed frame: unsupported protocol version 9", 1);
        }
    }

    @Test
    void garbageAfterTheHandshakeFailsThePeer() {
        try (Scripted s = new Scripted().up()) {
            s.link.injectRaw(new byte[] {1, 2, 3});
            s.receiver.doWork();
            s.assertFailed("malformed frame", 1);
        }
    }

    @Test
    void aMalformedFrameInTheHandshakeFailsThePeer() {
        try (Scripted s = new Scripted()) {
            final byte[] f = WireCodec.encode(new Message.Hello(Kv.identity()));
            s.link.injectRaw(Arrays.copyOf(f, f.length - 1));
            s.receiver.doWork();
            s.assertFailed("malformed frame", 1);
        }
    }

    @Test
    void aDescriptorBeforeHelloFailsThePeer() {
        try (Scripted s = new Scripted()) {
            s.link.inject(descriptor()).hello(Kv.identity());
            s.receiver.doWork();
            s.assertFailed("Descriptor before the handshake", 1);
            assertNull(s.peer().remote(), "the HELLO after the violation was not taken");
        }
    }

    @Test
    void aCompletionBeforeHelloFailsThePeer() {
        try (Scripted s = new Scripted()) {
            s.link.inject(new Message.Completion(0, 1, 0, 4, 0, new int[] {1}, 1, 1, 0));
            s.receiver.doWork();
            s.assertFailed("Completion before the handshake", 1);
        }
    }

    @Test
    void aDuplicatedIdenticalHelloIsIgnoredAndCounted() {
        // a copy of the HELLO (a duplicated frame) is no protocol error: the link stays up
        try (Scripted s = new Scripted().up()) {
            s.link.hello(Kv.identity()).hello(Kv.identity());
            s.receiver.doWork();
            assertEquals(Peer.State.UP, s.peer().state(), s.peer()::toString);
            assertTrue(s.link.isUp());
            assertEquals(2, s.receiver.duplicateHellos());
            assertEquals(0, s.receiver.malformedFrames());
        }
    }

    @Test
    void aSecondHelloWithAnotherIdentityFailsThePeer() {
        try (Scripted s = new Scripted().up()) {
            s.link.hello(PeerIdentity.of(Kv.LAYOUT, "test-model@r1", "test", "build-2"));
            s.receiver.doWork();
            s.assertFailed("second HELLO", 1);
            assertEquals(0, s.receiver.duplicateHellos());
        }
    }

    @Test
    void aReceiverRefusesADescriptor() {
        try (Scripted s = new Scripted().up()) {
            s.link.inject(descriptor());
            s.receiver.doWork();
            s.assertFailed("a receiver does not accept Descriptor", 1);
        }
    }

    @Test
    void aSenderRefusesACompletion() {
        try (KvPool pool = Kv.pool(16)) {
            final TransferSender sender = TransferSender.builder(pool, Kv.identity()).clock(new ManualClock()).build();
            final ScriptedLink link = new ScriptedLink();
            final int id = sender.addPeer(link);
            link.hello(Kv.identity()).inject(new Message.Completion(0, 1, 0, 4, 0, null, 0, 0, 0));
            sender.doWork();
            assertEquals(Peer.State.FAILED, sender.peer(id).state(), sender.peer(id)::toString);
            assertTrue(sender.peer(id).failure().contains("a sender does not accept Completion"), sender.peer(id).failure());
            assertFalse(link.isUp());
            assertEquals(1, sender.malformedFrames());
            sender.close();
        }
    }

    @Test
    void aRefuseFromThePeerIsRecordedWithItsReason() {
        try (Scripted s = new Scripted()) {
            s.link.inject(new Message.Refuse("environment: local=staging remote=test"));
            s.receiver.doWork();
            assertEquals(Peer.State.REFUSED, s.peer().state());
            assertTrue(s.peer().failure().contains("refused by the peer: environment: local=staging remote=test"), s.peer().failure());
            assertFalse(s.link.isUp());
            assertEquals(1, s.receiver.refusedPeers());
            assertEquals(0, s.receiver.malformedFrames());
        }
    }

    @Test
    void aMismatchedHelloIsAnsweredWithRefuse() {
        try (Scripted s = new Scripted()) {
            final PeerIdentity staging = PeerIdentity.of(Kv.LAYOUT, "test-model@r1", "staging", "build-1");
            s.link.hello(staging);
            s.receiver.doWork();
            assertEquals(Peer.State.REFUSED, s.peer().state());
            final List<Message.Refuse> refusals = s.link.sent(Message.Refuse.class);
            assertEquals(1, refusals.size(), s.link.sent::toString);
            assertTrue(refusals.get(0).reason().contains("environment: local=test remote=staging"), refusals.get(0).reason());
            assertFalse(s.link.isUp());
            assertEquals(WireFormat.VERSION, s.peer().remote().protocolVersion());
        }
    }
}
