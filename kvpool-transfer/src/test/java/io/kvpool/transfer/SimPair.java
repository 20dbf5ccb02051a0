package io.kvpool.transfer;

import io.kvpool.KvPool;
import io.kvpool.transfer.sim.SimFaults;
import io.kvpool.transfer.sim.SimLink;
import io.kvpool.transfer.sim.SimNetwork;
import io.kvpool.transfer.spi.PeerLink;
import io.kvpool.transfer.testkit.Kv;

import java.util.function.Function;
import java.util.function.UnaryOperator;

import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * A sender and a receiver on one simulated link, on the network's clock. The rigs of the protocol tests extend it
 * and change what {@link Setup} lets them. Closing it closes both engines and both pools.
 */
class SimPair implements AutoCloseable {
    final SimNetwork net;
    final KvPool prefill;
    final KvPool decode;
    final TransferSender sender;
    final TransferReceiver receiver;
    /** The link as each engine was given it ({@link Setup#atSender} and {@link Setup#atReceiver} may wrap it). */
    final PeerLink senderLink, receiverLink;
    /** The receiver's peer id at the sender. */
    final int sp;
    /** The sender's peer id at the receiver. */
    final int rp;

    /** What differs between rigs; every field has a default but the pools. */
    static final class Setup {
        long seed = 7;
        SimFaults faults = SimFaults.NONE;
        boolean revocable = true;
        final KvPool prefill;
        final KvPool decode;
        /** The sender's builder; the network's clock is set on it after. */
        Function<KvPool, TransferSender.Builder> sender = p -> TransferSender.builder(p, Kv.identity());
        /** The receiver's builder; the network's clock is set on it after. */
        Function<KvPool, TransferReceiver.Builder> receiver = p -> TransferReceiver.builder(p, Kv.identity());
        UnaryOperator<PeerLink> atSender = l -> l;
        UnaryOperator<PeerLink> atReceiver = l -> l;
        /** Steps of {@link #run} before the constructor returns; 0 leaves the handshake to the rig. */
        int settleSteps = 20;
        /** Whether the link must be up after {@link #settleSteps} (not for rigs whose handshake is meant to fail). */
        boolean mustLink = true;

        Setup(KvPool prefill, KvPool decode) {
            this.prefill = prefill;
            this.decode = decode;
        }

        Setup seed(long s) {
            seed = s;
            return this;
        }

        Setup faults(SimFaults f, boolean revocableLink) {
            faults = f;
            revocable = revocableLink;
            return this;
        }

        Setup sender(Function<KvPool, TransferSender.Builder> b) {
            sender = b;
            return this;
        }

        Setup receiver(Function<KvPool, TransferReceiver.Builder> b) {
            receiver = b;
            return this;
        }

        Setup links(UnaryOperator<PeerLink> toSender, UnaryOperator<PeerLink> toReceiver) {
            atSender = toSender;
            atReceiver = toReceiver;
            return this;
        }

        Setup settle(int steps, boolean linked) {
            settleSteps = steps;
            mustLink = linked;
            return this;
        }
    }

    /** @param decodeIdentity the receiver's identity (the sender's is {@link Kv#identity()}) */
    SimPair(long seed, KvPool prefill, KvPool decode, PeerIdentity decodeIdentity) {
        this(new Setup(prefill, decode).seed(seed).receiver(p -> TransferReceiver.builder(p, decodeIdentity)));
    }

    SimPair(Setup s) {
        this.net = new SimNetwork(s.seed, s.faults);
        this.prefill = s.prefill;
        this.decode = s.decode;
        sender = s.sender.apply(prefill).clock(net.clock()).build(); // 60 s descriptor timeout unless the setup says
        receiver = s.receiver.apply(decode).clock(net.clock()).build();
        final SimLink[] l = net.connect("prefill", "decode", s.revocable);
        senderLink = s.atSender.apply(l[0]);
        receiverLink = s.atReceiver.apply(l[1]);
        rp = receiver.addPeer(receiverLink);
        sp = sender.addPeer(senderLink);
        run(s.settleSteps);
        if (s.mustLink) {
            assertTrue(receiver.peer(rp).isUp() && sender.peer(sp).isUp(), () -> receiver.peer(rp) + " / " + sender.peer(sp));
        }
    }

    /** Runs both duty cycles {@code steps} times, 10 µs of network time each. */
    void run(int steps) {
        for (int i = 0; i < steps; i++) {
            sender.doWork();
            receiver.doWork();
            net.advance(10_000);
        }
    }

    @Override
    public void close() {
        sender.close();
        receiver.close();
        prefill.close();
        decode.close();
    }
}
