package io.kvpool.transfer;

import io.kvpool.KvLayout;
import io.kvpool.KvPool;
import io.kvpool.Sequence;
import io.kvpool.storage.FillMode;
import io.kvpool.storage.HostPageStorage;
import io.kvpool.transfer.sim.SimFaults;
import io.kvpool.transfer.sim.SimLink;
import io.kvpool.transfer.sim.SimNetwork;
import io.kvpool.transfer.testkit.ForwardingStorage;
import io.kvpool.transfer.testkit.Kv;
import org.junit.jupiter.api.Test;

import java.io.UncheckedIOException;

import static org.junit.jupiter.api.Assertions.*;

/**
 * A decode pool that admits a request but cannot hand out its pages for a reason other than a lack of them (here
 * its storage fails to fill a page before reuse) is a fault, not a refusal: {@link TransferReceiver#start} throws
 * instead of answering REJECTED, which a server would turn into "retry later". Nothing is left behind.
 */
class ReceiverAllocationFaultTest {

    static final int PAGES = 4;
    static final int TOKENS = PAGES * Kv.LAYOUT.tokensPerPage();

    /** Host storage whose fill fails while {@link #failing} is set. */
    static final class FlakyFillStorage extends ForwardingStorage {
        volatile boolean failing;
        int failedFills;

        FlakyFillStorage(KvLayout layout, int pages) {
            super(HostPageStorage.allocate(layout, pages));
        }

        @Override
        public void fill(int page, FillMode mode) {
            if (failing) {
                failedFills++;
                throw new UncheckedIOException(new java.io.IOException("injected fill failure of page " + page));
            }
            super.fill(page, mode);
        }
    }

    @Test
    void aStorageFaultWhileAllocatingIsThrownNotAnsweredAsARejection() {
        final FlakyFillStorage[] storage = new FlakyFillStorage[1];
        final SimNetwork net = new SimNetwork(7, SimFaults.NONE);
        try (KvPool prefill = Kv.pool(2 * PAGES);
             KvPool decode = KvPool.builder(Kv.LAYOUT).pages(PAGES).maxContextTokens(TOKENS).fillMode(FillMode.CANARY)
                 .storage((l, n) -> storage[0] = new FlakyFillStorage(l, n)).build()) {
            final TransferSender sender = TransferSender.builder(prefill, Kv.identity()).clock(net.clock()).build();
            final TransferReceiver receiver = TransferReceiver.builder(decode, Kv.identity()).clock(net.clock()).build();
            final SimLink[] l = net.connect("prefill", "decode", true);
            final int rp = receiver.addPeer(l[1]);
            sender.addPeer(l[0]);
            run(net, sender, receiver);
            assertTrue(receiver.peer(rp).isUp(), receiver.peer(rp)::toString);

            // a page whose fill failed when it was freed must be filled before it is handed out again
            storage[0].failing = true;
            try (Sequence used = decode.admit(Kv.LAYOUT.tokensPerPage(), 0).sequence()) {
                used.append(1);
            }
            assertEquals(1, storage[0].failedFills, "the fill at free failed");

            offer(prefill, sender, 1);
            final AllocationFaultException fault = assertThrows(AllocationFaultException.class, () -> receiver.start(1, TOKENS, 0, rp));
            assertInstanceOf(UncheckedIOException.class, fault.getCause(), fault::toString);
            assertTrue(fault.getMessage().contains("request 1") && fault.getMessage().contains(PAGES + " pages"),
                fault::getMessage);
            assertTrue(storage[0].failedFills > 1, "the fill before reuse failed too"); // and the undo's fills at free

            // nothing held or counted, and the sender was told at once
            assertEquals(0, receiver.activeTransfers());
            assertEquals(0, receiver.metrics().started(), receiver.metrics()::toString);
            assertEquals(1, receiver.metrics().allocationFaults(), receiver.metrics()::toString);
            assertEquals(0, decode.snapshot().owned(), decode.snapshot()::toString);
            assertEquals(0, decode.snapshot().reserved(), decode.snapshot()::toString);
            assertTrue(decode.verifyAccounting().balanced());
            run(net, sender, receiver);
            assertEquals(0, sender.activeTransfers(), "the sender released its offer on the CANCEL");
            assertEquals(1, sender.metrics().cancelled());
            assertEquals(0, prefill.snapshot().owned(), prefill.snapshot()::toString);

            // once the storage works again, the same pool serves
            storage[0].failing = false;
            offer(prefill, sender, 2);
            final IncomingTransfer t = receiver.start(2, TOKENS, 0, rp);
            for (int i = 0; i < 100 && t.state() == IncomingTransfer.State.RECEIVING; i++) {
                run(net, sender, receiver);
            }
            assertEquals(IncomingTransfer.State.COMMITTED, t.state(), t::toString);
            assertEquals(Kv.Finding.OK, Kv.check(t.sequence(), 2, TOKENS));
            t.sequence().close();
            assertEquals(1, receiver.metrics().started());
            sender.close();
            receiver.close();
        }
    }

    private static void offer(KvPool prefill, TransferSender sender, long requestId) {
        final Sequence src = prefill.admit(TOKENS, 0).sequence();
        src.append(TOKENS);
        Kv.write(src, requestId);
        sender.offer(requestId, src);
        src.close();
    }

    private static void run(SimNetwork net, TransferSender sender, TransferReceiver receiver) {
        for (int i = 0; i < 20; i++) {
            sender.doWork();
            receiver.doWork();
            net.advance(10_000);
        }
    }
}
