package io.kvpool.transfer;

import io.kvpool.KvPool;
import io.kvpool.Sequence;
import io.kvpool.transfer.testkit.Kv;

import static org.junit.jupiter.api.Assertions.assertEquals;

/** One request through a sender and a receiver, for the tests that drive both: offered, started, run, checked. */
final class OneRequest {
    private OneRequest() {
    }

    /**
     * Offers a request of {@code tokens} tokens of {@link Kv#write} KV from a fresh sequence of {@code prefill}, and
     * starts it at the receiver.
     *
     * @return the receiver's transfer
     */
    static IncomingTransfer offerAndStart(TransferSender sender, KvPool prefill, TransferReceiver receiver, int receiverPeer,
                                          long req, int tokens) {
        final Sequence src = prefill.admit(tokens, 0).sequence();
        src.append(tokens);
        Kv.write(src, req);
        sender.offer(req, src);
        src.close();
        return receiver.start(req, tokens, 0, receiverPeer);
    }

    /**
     * Runs {@code step} until the transfer leaves RECEIVING, at most {@code maxSteps} times; a committed transfer's
     * KV must be exactly the request's (its sequence is closed after).
     *
     * @return the transfer's state
     */
    static IncomingTransfer.State finish(IncomingTransfer t, Runnable step, int maxSteps, long req, int tokens) {
        for (int i = 0; i < maxSteps && t.state() == IncomingTransfer.State.RECEIVING; i++) {
            step.run();
        }
        if (t.state() == IncomingTransfer.State.COMMITTED) {
            try (Sequence got = t.sequence()) {
                assertEquals(Kv.Finding.OK, Kv.check(got, req, tokens));
            }
        }
        return t.state();
    }
}
