package io.kvpool.transfer;

import io.kvpool.transfer.testkit.Kv;
import io.kvpool.KvPool;
import io.kvpool.PageHandle;
import io.kvpool.Sequence;
import io.kvpool.storage.HostPageStorage;
import io.kvpool.storage.PageStorage;
import io.kvpool.transfer.ProtocolEdgeCasesTest.DeviceLikeStorage;
import io.kvpool.transfer.spi.PeerLink;
import io.kvpool.transfer.wire.Message;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;

import java.util.ArrayList;
import java.util.List;

import static org.junit.jupiter.api.Assertions.*;

/**
 * The checksum seam ({@link PageChecksums}): a sender and a receiver on storage the host cannot read (as a
 * device pool's) compute their checksums through the implementation they were built with — it is called,
 * its values travel in the completion, and a value of its that does not match fails the transfer with
 * {@link FailureReason#CHECKSUM_MISMATCH}. Without it, such a pool is refused (as before the seam).
 */
class PageChecksumsTest {

    static final long REQ = 21;

    /**
     * What a device implementation does, on {@link DeviceLikeStorage}: resolve each handle to its slot and
     * checksum the slot's bytes where they really live (the inner host storage, standing in for device
     * memory). Records its calls; {@link #corruptPage} makes it report a wrong value for one logical page.
     */
    static final class SlotChecksums implements PageChecksums {
        final List<String> calls = new ArrayList<>();
        int corruptPage = -1;

        @Override
        public boolean supports(PageStorage storage) {
            return storage instanceof DeviceLikeStorage;
        }

        @Override
        public void compute(KvPool pool, long[] handles, int from, int to, long requestId, int tokenCount, int[] out) {
            calls.add("pages " + from + ".." + to + " of request " + requestId + ", " + tokenCount + " tokens");
            final PageStorage inner = ((DeviceLikeStorage) pool.storage()).inner();
            for (int p = from; p < to; p++) {
                final long slot = pool.validate(handles[p]);
                assertTrue(slot >= 0, () -> "a handle the pool refuses: " + slot);
                out[p - from] = KvChecksum.of(pool.layout(), inner.hostPage((int) slot), requestId, p, tokenCount) ^ (p == corruptPage ? 1 : 0);
            }
        }
    }

    ManualClock clock;
    KvPool pool;
    SlotChecksums sums;

    @BeforeEach
    void setUp() {
        clock = new ManualClock();
        pool = KvPool.builder(Kv.LAYOUT).pages(32).maxContextTokens(128)
            .storage((l, n) -> new DeviceLikeStorage(HostPageStorage.allocate(l, n))).build();
        sums = new SlotChecksums();
    }

    @AfterEach
    void tearDown() {
        pool.close();
    }

    @Test
    void withoutAChecksummerThatCanReadItTheStorageIsRefusedAsBefore() {
        final IllegalArgumentException r = assertThrows(IllegalArgumentException.class,
            () -> TransferReceiver.builder(pool, Kv.identity()).checksums(PageChecksums.HOST).build());
        assertTrue(r.getMessage().contains("PageChecksums.HOST") && r.getMessage().contains("checksums(false)"), r.getMessage());
        assertThrows(IllegalArgumentException.class, () -> TransferSender.builder(pool, Kv.identity()).build());
        // a checksummer for other storage is refused too
        try (KvPool host = Kv.pool(8)) {
            assertThrows(IllegalArgumentException.class, () -> TransferReceiver.builder(host, Kv.identity()).checksums(sums).build());
        }
    }

    @Test
    void theReceiverVerifiesWithThePluggedChecksummerAndFailsOnItsMismatch() {
        try (TransferReceiver rx = TransferReceiver.builder(pool, Kv.identity()).clock(clock).checksums(sums).build()) {
            final ScriptedLink a = new ScriptedLink().hello(Kv.identity());
            final int pa = rx.addPeer(a);
            rx.doWork();
            final PageStorage inner = ((DeviceLikeStorage) pool.storage()).inner();

            final IncomingTransfer ok = rx.start(ReceiverRulesTest.REQ, 10, 0, pa);
            final int[] cs = ReceiverRulesTest.deliver(inner, a, 0, 0, 10);
            a.inject(new Message.Completion(ok.transferId(), ok.generation(), 0, 10, 0, cs, 3, 3, 0));
            rx.doWork();
            assertEquals(IncomingTransfer.State.COMMITTED, ok.state(), ok::toString);
            assertEquals(List.of("pages 0..3 of request " + ReceiverRulesTest.REQ + ", 10 tokens"), sums.calls);

            sums.corruptPage = 1; // the checksummer's value for page 1 no longer matches the sender's
            final IncomingTransfer bad = rx.start(ReceiverRulesTest.REQ, 10, 0, pa);
            final int[] cs2 = ReceiverRulesTest.deliver(inner, a, 1, 0, 10);
            a.inject(new Message.Completion(bad.transferId(), bad.generation(), 0, 10, 0, cs2, 3, 3, 0));
            rx.doWork();
            assertEquals(FailureReason.CHECKSUM_MISMATCH, bad.failure(), bad::toString);
            assertTrue(bad.message().startsWith("page 1 of 3"), bad.message());
            assertEquals(2, sums.calls.size());
            ok.sequence().close();
        }
    }

    @Test
    void theSenderSendsThePluggedChecksummersValues() {
        try (TransferSender tx = TransferSender.builder(pool, Kv.identity()).clock(clock).checksums(sums).build()) {
            final ScriptedLink link = new ScriptedLink().hello(Kv.identity());
            tx.addPeer(link);
            tx.doWork();
            final Sequence s = pool.admit(18, 0).sequence(); // 5 pages, the last of 2 tokens (their bytes: the canary)
            s.append(18);
            final long[] handles = new long[s.pageCount()];
            for (int i = 0; i < handles.length; i++) {
                handles[i] = s.pageHandle(i);
            }
            final OutgoingTransfer t = tx.offer(REQ, s);
            s.close();
            link.inject(new Message.Descriptor(REQ, 3, 9, 18, Kv.LAYOUT.fingerprint(), 1, 0, new long[5], new byte[1]));
            tx.doWork();
            for (long tok : List.copyOf(link.postedTokens)) {
                link.completeWrite(tok, PeerLink.OK);
            }
            tx.doWork();
            final PageStorage inner = ((DeviceLikeStorage) pool.storage()).inner();
            final int[] want = new int[5];
            for (int p = 0; p < 5; p++) {
                want[p] = KvChecksum.of(Kv.LAYOUT, inner.hostPage(PageHandle.slot(handles[p])), REQ, p, 18);
            }
            link.completeFlush(link.flushTokens.getFirst(), true);
            tx.doWork();
            assertEquals(OutgoingTransfer.State.COMPLETED, t.state(), t::toString);
            assertEquals(List.of("pages 0..5 of request " + REQ + ", 18 tokens"), sums.calls);
            assertArrayEquals(want, link.sent(Message.Completion.class).getFirst().checksums());
        }
    }
}
