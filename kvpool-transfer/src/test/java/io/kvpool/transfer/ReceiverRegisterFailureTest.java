package io.kvpool.transfer;

import io.kvpool.KvPool;
import io.kvpool.Sequence;
import io.kvpool.storage.PageStorage;
import io.kvpool.transfer.sim.SimFaults;
import io.kvpool.transfer.sim.SimLink;
import io.kvpool.transfer.sim.SimNetwork;
import io.kvpool.transfer.spi.LinkFailedException;
import io.kvpool.transfer.spi.Registration;
import io.kvpool.transfer.testkit.Kv;
import org.junit.jupiter.api.Test;

import java.util.function.Supplier;

import static org.junit.jupiter.api.Assertions.*;

/**
 * A link that cannot register a request's pages: a link found down is {@code PEER_LOST} (another link may take the
 * request), a link that is up but cannot register these pages at all is {@code ABORTED} (waiting does not help).
 * Either way nothing is held and the sender releases its offer.
 */
class ReceiverRegisterFailureTest {

    static final int PAGES = 4;
    static final int TOKENS = PAGES * Kv.LAYOUT.tokensPerPage();

    @Test
    void aLinkThatIsUpButCannotRegisterAbortsTheTransferInsteadOfAskingForARetry() {
        final IncomingTransfer t = startOn(() -> new IllegalArgumentException("register needs host-accessible storage"));
        assertEquals(FailureReason.ABORTED, t.failure(), t::toString);
        assertTrue(t.message().contains("which is up") && t.message().contains("host-accessible"), t::message);
    }

    @Test
    void aLinkFoundDownWhileRegisteringIsAPeerLost() {
        final IncomingTransfer t = startOn(() -> new LinkFailedException("connection reset"));
        assertEquals(FailureReason.PEER_LOST, t.failure(), t::toString);
        assertTrue(t.message().contains("connection reset"), t::message);
    }

    @Test
    void aSenderWhoseRegistrationFailedOnALinkFoundDownHoldsNoPagesInQuarantine() {
        // its pages were never registered and no descriptor went to it: it has nothing to write them with, so no
        // teardown proof is needed (over shared memory that proof waits for the sender process to exit)
        try (KvPool decode = Kv.pool(2 * PAGES)) {
            final ManualClock clock = new ManualClock();
            final TransferReceiver rx = TransferReceiver.builder(decode, Kv.identity()).clock(clock).build();
            final ScriptedLink down = new ScriptedLink().hello(Kv.identity());
            final int p = rx.addPeer(foundDownWhileRegistering(down));
            rx.doWork();
            final IncomingTransfer t = rx.start(1, TOKENS, 0, p);
            assertEquals(FailureReason.PEER_LOST, t.failure(), t::toString);
            assertEquals(IncomingTransfer.State.RELEASED, t.state(), t::toString);
            assertEquals(WriteProof.REVOKED, t.writeProof(0), "never registered: no write can reach the pages");
            assertEquals(0, down.tearDowns, "nothing to prove by a teardown");
            assertEquals(0, rx.metrics().heldPages());
            assertEquals(0, rx.metrics().quarantinedPages());
            assertEquals(decode.capacity(), decode.snapshot().free(), decode.snapshot()::toString);
            rx.close();
        }
    }

    @Test
    void aCoSenderThatWasNeverSentItsDescriptorIsNotWaitedForNorRetired() {
        // rank 0's link is found down while registering: rank 1, healthy, was never asked. It is told (CANCEL, so its
        // offer ends) but not waited for: waiting, its silence past the drain deadline made it a suspect and retired
        // its link, failing every other transfer's chance to start there
        try (KvPool decode = Kv.pool(2 * PAGES)) {
            final ManualClock clock = new ManualClock();
            final TransferReceiver rx = TransferReceiver.builder(decode, Kv.identity()).clock(clock)
                .drainTimeout(java.time.Duration.ofMillis(100)).build();
            final ScriptedLink down = new ScriptedLink().hello(Kv.identity());
            final ScriptedLink healthy = new ScriptedLink().hello(Kv.identity());
            final int p0 = rx.addPeer(foundDownWhileRegistering(down));
            final int p1 = rx.addPeer(healthy);
            rx.doWork();
            final IncomingTransfer t = rx.start(1, TOKENS, 0, p0, p1);
            assertEquals(FailureReason.PEER_LOST, t.failure(), t::toString);
            assertTrue(healthy.sent(io.kvpool.transfer.wire.Message.Descriptor.class).isEmpty());
            assertEquals(1, healthy.sent(io.kvpool.transfer.wire.Message.Cancel.class).size(), () -> "its offer ends: " + healthy.sent);
            clock.advanceMillis(200);
            rx.doWork();
            assertEquals(IncomingTransfer.State.RELEASED, t.state(), t::toString);
            assertEquals(0, rx.metrics().linksRetired(), rx.metrics()::toString);
            assertTrue(rx.peer(p1).isUp(), rx.peer(p1)::toString);
            assertEquals(0, healthy.tearDowns);
            assertEquals(decode.capacity(), decode.snapshot().free(), decode.snapshot()::toString);
            rx.close();
        }
    }

    /** A link whose transport is found down when the receiver registers pages on it (its failure not polled yet). */
    private static ForwardingLink foundDownWhileRegistering(ScriptedLink link) {
        return new ForwardingLink(link) {
            @Override
            public Registration register(PageStorage storage, int[] slots) {
                link.up = false;
                throw new LinkFailedException("scripted link is down");
            }
        };
    }

    /** Offers one request, starts it on a link whose register throws, and checks that both pools end empty. */
    private static IncomingTransfer startOn(Supplier<RuntimeException> registerFails) {
        final SimNetwork net = new SimNetwork(3, SimFaults.NONE);
        try (KvPool prefill = Kv.pool(2 * PAGES); KvPool decode = Kv.pool(2 * PAGES)) {
            final TransferSender sender = TransferSender.builder(prefill, Kv.identity()).clock(net.clock()).build();
            final TransferReceiver receiver = TransferReceiver.builder(decode, Kv.identity()).clock(net.clock()).build();
            final SimLink[] l = net.connect("prefill", "decode", true);
            final int rp = receiver.addPeer(new ForwardingLink(l[1]) {
                @Override
                public Registration register(PageStorage storage, int[] slots) {
                    throw registerFails.get();
                }
            });
            sender.addPeer(l[0]);
            run(net, sender, receiver);
            assertTrue(receiver.peer(rp).isUp(), receiver.peer(rp)::toString);

            final Sequence src = prefill.admit(TOKENS, 0).sequence();
            src.append(TOKENS);
            Kv.write(src, 1);
            sender.offer(1, src);
            src.close();
            final IncomingTransfer t = receiver.start(1, TOKENS, 0, rp);
            run(net, sender, receiver);
            assertEquals(0, receiver.activeTransfers(), receiver::toString);
            assertEquals(0, decode.snapshot().owned() + decode.snapshot().reserved(), decode.snapshot()::toString);
            assertEquals(0, sender.activeTransfers(), "the sender released its offer");
            assertEquals(0, prefill.snapshot().owned(), prefill.snapshot()::toString);
            assertTrue(decode.verifyAccounting().balanced() && prefill.verifyAccounting().balanced());
            sender.close();
            receiver.close();
            return t;
        }
    }

    private static void run(SimNetwork net, TransferSender sender, TransferReceiver receiver) {
        for (int i = 0; i < 20; i++) {
            sender.doWork();
            receiver.doWork();
            net.advance(10_000);
        }
    }
}
