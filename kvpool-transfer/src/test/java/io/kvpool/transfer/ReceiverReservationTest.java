package io.kvpool.transfer;

import io.kvpool.Admission;
import io.kvpool.KvPool;
import io.kvpool.Sequence;
import io.kvpool.transfer.testkit.Kv;
import org.junit.jupiter.api.Test;

import java.util.LinkedHashMap;
import java.util.Map;
import java.util.function.Consumer;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertSame;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * A transfer into a sequence the decode pool admitted before prefill computed (a reservation): it commits like any
 * other, the receiver takes the sequence over, and whatever refuses the transfer gives the reservation back.
 */
class ReceiverReservationTest {

    static final int TOKENS = 4 * Kv.LAYOUT.tokensPerPage();

    static final class Rig extends SimPair {
        Rig() {
            super(11, Kv.pool(16), Kv.pool(16), Kv.identity());
        }

        void offer(long req) {
            try (Sequence src = prefill.admit(TOKENS, 0).sequence()) {
                src.append(TOKENS);
                Kv.write(src, req);
                sender.offer(req, src);
            }
        }
    }

    @Test
    void aTransferIntoAReservedSequenceCommitsTheRequestsKv() {
        try (Rig rig = new Rig()) {
            final Admission a = rig.decode.admit(TOKENS, 8); // before prefill computes
            assertTrue(a.admitted(), a::message);
            rig.offer(7);
            final IncomingTransfer t = rig.receiver.start(7, a.sequence(), TOKENS, rig.rp);
            rig.run(200);
            assertEquals(IncomingTransfer.State.COMMITTED, t.state(), t::toString);
            assertSame(a.sequence(), t.sequence(), "the committed sequence is the reserved one");
            assertEquals(IncomingTransfer.State.COMMITTED, OneRequest.finish(t, () -> rig.run(1), 200, 7, TOKENS), t::toString);
            assertTrue(a.sequence().isClosed(), "OneRequest.finish closed it");
            assertEquals(0, rig.decode.snapshot().owned(), rig.decode.snapshot()::toString);
            assertEquals(0, rig.decode.snapshot().openSequences());
        }
    }

    @Test
    void aRefusedTransferGivesTheReservationBack() {
        try (Rig rig = new Rig()) {
            final Sequence reserved = rig.decode.admit(TOKENS, 0).sequence();
            rig.offer(8);
            final IncomingTransfer t = rig.receiver.start(8, reserved, TOKENS + 1, rig.rp); // more than it was admitted for
            assertEquals(IncomingTransfer.State.REJECTED, t.state(), t::toString);
            assertTrue(t.message().contains("admitted for " + TOKENS + " tokens, its prompt has " + (TOKENS + 1)), t::message);
            assertTrue(reserved.isClosed(), "taken over and closed");
            assertEquals(0, rig.decode.snapshot().reserved(), rig.decode.snapshot()::toString);
            rig.run(20);
            assertEquals(0, rig.prefill.snapshot().owned(), "the CANCEL ended prefill's offer: " + rig.prefill.snapshot());

            final Sequence noSuchPeer = rig.decode.admit(TOKENS, 0).sequence();
            assertThrows(IllegalArgumentException.class, () -> rig.receiver.start(10, noSuchPeer, TOKENS, 5));
            assertTrue(noSuchPeer.isClosed(), "an exception for another argument: taken over and closed");
            final Sequence noPeers = rig.decode.admit(TOKENS, 0).sequence();
            assertThrows(NullPointerException.class, () -> rig.receiver.start(11, noPeers, TOKENS, (int[]) null));
            assertTrue(noPeers.isClosed(), "a null peer list is another argument too");
            assertEquals(0, rig.decode.snapshot().reserved(), rig.decode.snapshot()::toString);

            final Sequence second = rig.decode.admit(TOKENS, 0).sequence();
            rig.receiver.close();
            assertThrows(IllegalStateException.class, () -> rig.receiver.start(9, second, TOKENS, rig.rp));
            assertFalse(second.isClosed(), "a call refused before the receiver took the sequence leaves it to its owner");
            second.close();
        }
    }

    @Test
    void aPoolClosedUnderAStartIsAShutdownThatTellsTheSenders() {
        try (Rig rig = new Rig()) {
            final Sequence reserved = rig.decode.admit(TOKENS, 0).sequence();
            rig.offer(8);
            rig.decode.close();
            final IllegalStateException e = assertThrows(IllegalStateException.class,
                () -> rig.receiver.start(8, reserved, TOKENS, rig.rp));
            assertTrue(e.getMessage().contains("closed"), e::getMessage);
            assertEquals(0, rig.receiver.metrics().allocationFaults(), "a shutdown is not a fault to investigate");
            assertTrue(reserved.isClosed());
            rig.run(20);
            assertEquals(0, rig.prefill.snapshot().owned(), "the CANCEL ended prefill's offer: " + rig.prefill.snapshot());

            rig.offer(9); // and without a reservation: admission finds the pool closed
            assertThrows(IllegalStateException.class, () -> rig.receiver.start(9, TOKENS, 0, rig.rp));
            assertEquals(0, rig.receiver.metrics().allocationFaults());
            rig.run(20);
            assertEquals(0, rig.prefill.snapshot().owned(), "the CANCEL ended prefill's offer: " + rig.prefill.snapshot());
        }
    }

    @Test
    void aSequenceTheReceiverCannotTakeIsRefusedAndLeftAlone() {
        try (Rig rig = new Rig(); KvPool other = Kv.pool(16)) {
            final Sequence foreign = other.admit(TOKENS, 0).sequence();
            assertThrows(IllegalArgumentException.class, () -> rig.receiver.start(1, foreign, TOKENS, rig.rp));
            assertFalse(foreign.isClosed());
            foreign.close();

            final Sequence withPages = rig.decode.admit(TOKENS, 0).sequence();
            withPages.append(1);
            assertThrows(IllegalArgumentException.class, () -> rig.receiver.start(2, withPages, TOKENS, rig.rp));
            assertFalse(withPages.isClosed());
            withPages.close();
            assertEquals(0, rig.decode.snapshot().owned());
        }
    }

    @Test
    void aSequenceChangedWhileItReceivesFailsTheTransferAndEverythingIsFreed() {
        // the caller keeps its reference to the sequence it handed over; a change there must not commit as the request's
        // KV. Emptied and regrown is the dangerous one: same length, but fresh pages holding a free page's old bytes
        final Map<String, Consumer<Sequence>> changes = new LinkedHashMap<>();
        changes.put("was closed", Sequence::close);
        changes.put("had pages removed or replaced", s -> s.truncate(5));
        changes.put("had pages removed or replaced ", s -> {
            s.truncate(0);
            s.append(TOKENS);
        });
        changes.put("holds " + (TOKENS + 2) + " tokens in 5 pages", s -> s.append(2));
        for (Map.Entry<String, Consumer<Sequence>> change : changes.entrySet()) {
            try (Rig rig = new Rig()) {
                final Sequence reserved = rig.decode.admit(TOKENS, 8).sequence();
                rig.offer(7);
                final IncomingTransfer t = rig.receiver.start(7, reserved, TOKENS, rig.rp);
                assertEquals(IncomingTransfer.State.RECEIVING, t.state(), t::toString);
                change.getValue().accept(reserved);
                rig.run(200);
                final String ctx = change.getKey() + ": " + t + " " + t.message();
                assertEquals(IncomingTransfer.State.RELEASED, t.state(), ctx);
                assertEquals(FailureReason.ABORTED, t.failure(), ctx);
                assertTrue(t.message().contains("its sequence " + change.getKey().strip()), ctx);
                assertTrue(reserved.isClosed(), "a failed transfer closes the sequence it took over: " + ctx);
                assertEquals(0, rig.decode.snapshot().owned() + rig.decode.snapshot().receiving() + rig.decode.snapshot().reserved(),
                    ctx + " " + rig.decode.snapshot());
                rig.decode.verifyAccounting();
                rig.run(20);
                assertEquals(0, rig.prefill.snapshot().owned(), ctx + " prefill " + rig.prefill.snapshot());
            }
        }
    }
}
