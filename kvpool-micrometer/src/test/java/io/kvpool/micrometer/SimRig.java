package io.kvpool.micrometer;

import io.kvpool.KvPool;
import io.kvpool.Sequence;
import io.kvpool.transfer.IncomingTransfer;
import io.kvpool.transfer.testkit.Kv;
import io.kvpool.transfer.TransferReceiver;
import io.kvpool.transfer.TransferSender;
import io.kvpool.transfer.sim.SimFaults;
import io.kvpool.transfer.sim.SimLink;
import io.kvpool.transfer.sim.SimNetwork;

import java.time.Duration;

/** A prefill and a decode pool joined by kvpool-transfer's simulated network, with a sender and a receiver. */
final class SimRig implements AutoCloseable {
    final SimNetwork net = new SimNetwork(1, SimFaults.NONE);
    final KvPool prefill = Kv.pool(32);
    final KvPool decode = Kv.pool(32);
    final TransferSender sender;
    final TransferReceiver receiver;
    final int peer;

    SimRig() {
        sender = TransferSender.builder(prefill, Kv.identity()).clock(net.clock()).drainDeadline(Duration.ofMillis(50)).build();
        receiver = TransferReceiver.builder(decode, Kv.identity()).clock(net.clock()).completionTimeout(Duration.ofMillis(20))
            .drainTimeout(Duration.ofMillis(20)).build();
        final SimLink[] l = net.connect("prefill", "decode", true);
        sender.addPeer(l[0]);
        peer = receiver.addPeer(l[1]);
        run(10);
    }

    /** Runs both engines and the network for {@code steps} steps of 10 µs. */
    void run(int steps) {
        for (int i = 0; i < steps; i++) {
            sender.doWork();
            receiver.doWork();
            net.advance(10_000);
        }
    }

    /** Offers {@code tokens} tokens of request {@code id}'s KV and starts receiving them; the caller runs the rig. */
    IncomingTransfer transfer(long id, int tokens) {
        final Sequence s = prefill.admit(tokens, 0).sequence();
        s.append(tokens);
        Kv.write(s, id);
        sender.offer(id, s);
        s.close(); // the sender holds its own references
        return receiver.start(id, tokens, 0, peer);
    }

    @Override
    public void close() {
        sender.close();
        receiver.close();
        run(10);
        prefill.close();
        decode.close();
    }
}
