package io.kvpool.transfer;

import io.kvpool.KvPool;
import io.kvpool.transfer.sim.SimFaults;
import io.kvpool.transfer.sim.SimLink;
import io.kvpool.transfer.sim.SimNetwork;
import io.kvpool.transfer.testkit.Kv;

import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * A sender and a receiver on one fault-free simulated link, on the network's clock, linked (HELLOs exchanged) when
 * the constructor returns. Closing it closes both engines and both pools.
 */
class SimPair implements AutoCloseable {
    final SimNetwork net;
    final KvPool prefill;
    final KvPool decode;
    final TransferSender sender;
    final TransferReceiver receiver;
    /** The sender's peer id at the receiver. */
    final int rp;

    /** @param decodeIdentity the receiver's identity (the sender's is {@link Kv#identity()}) */
    SimPair(long seed, KvPool prefill, KvPool decode, PeerIdentity decodeIdentity) {
        this.net = new SimNetwork(seed, SimFaults.NONE);
        this.prefill = prefill;
        this.decode = decode;
        sender = TransferSender.builder(prefill, Kv.identity()).clock(net.clock()).build(); // 60 s descriptor timeout
        receiver = TransferReceiver.builder(decode, decodeIdentity).clock(net.clock()).build();
        final SimLink[] l = net.connect("prefill", "decode", true);
        rp = receiver.addPeer(l[1]);
        sender.addPeer(l[0]);
        run(20);
        assertTrue(receiver.peer(rp).isUp(), receiver.peer(rp)::toString);
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
