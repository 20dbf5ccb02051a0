package io.kvpool.transfer;

import io.kvpool.KvPool;
import io.kvpool.Safeguard;
import io.kvpool.Sequence;
import io.kvpool.storage.FillMode;
import io.kvpool.transfer.testkit.Kv;
import org.junit.jupiter.api.Test;

import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;

import static org.junit.jupiter.api.Assertions.assertEquals;

/**
 * Transports copy whole pages, so a partial last page arrives with the sender page's bytes past the sender's tokens:
 * on a sender pool that does not fill its free pages, another request's KV, which no check reads (the length, canary
 * and checksum checks stop at the expected tokens). The receiver writes its pool's fill there before the commit. The
 * control switches the decode pool's free-page fill off ({@link Safeguard#FREE_PAGE_FILL}), and the other request's
 * KV is found in the committed page.
 */
class ReceivedPageTailTest {

    @Test
    void theTailOfAReceivedPartialPageHoldsTheReceiversCanaryNotTheSendersBytes() {
        try (KvPool decode = Kv.pool(32)) {
            final MemorySegment page = receiveTwoOfFourTokens(decode);
            assertEquals(Kv.Finding.OK, Kv.check(page, 5, 0));
            assertEquals(Kv.Finding.OK, Kv.check(page, 5, 1));
            assertEquals(Kv.Finding.CANARY, Kv.check(page, 5, 2), "token 2, past the request's tokens");
            assertEquals(Kv.Finding.CANARY, Kv.check(page, 5, 3), "token 3, past the request's tokens");
        }
    }

    @Test
    void onAZeroFilledPoolTheTailIsZeros() {
        try (KvPool decode = KvPool.builder(Kv.LAYOUT).pages(32).maxContextTokens(32L * Kv.LAYOUT.tokensPerPage())
            .fillMode(FillMode.ZERO).build()) {
            final MemorySegment page = receiveTwoOfFourTokens(decode);
            assertEquals(Kv.Finding.OK, Kv.check(page, 5, 1));
            for (int layer = 0; layer < Kv.LAYOUT.layers(); layer++) {
                for (int kv = 0; kv < 2; kv++) {
                    final long from = Kv.LAYOUT.offset(layer, kv, 2), to = from + 2 * Kv.LAYOUT.bytesPerTokenVector();
                    for (long o = from; o < to; o++) {
                        assertEquals(0, page.get(ValueLayout.JAVA_BYTE, o), "byte " + o + " of the tail");
                    }
                }
            }
        }
    }

    @Test
    void withoutTheFreePageFillTheTailHoldsTheSendersPreviousRequest() {
        try (KvPool decode = KvPool.builder(Kv.LAYOUT).pages(32).maxContextTokens(32L * Kv.LAYOUT.tokensPerPage())
            .unsafeDisable(Safeguard.FREE_PAGE_FILL).build()) {
            final MemorySegment page = receiveTwoOfFourTokens(decode);
            assertEquals(Kv.Finding.FOREIGN, Kv.check(page, 5, 2), "the control: request 99's KV in the committed page");
        }
    }

    /**
     * Request 99 fills all 4 tokens of prefill's only page and ends; request 5 then gets that page (the prefill pool
     * fills nothing), writes 2 tokens and is transferred to {@code decode}. {@return decode's committed page, a copy}
     */
    private static MemorySegment receiveTwoOfFourTokens(KvPool decode) {
        assertEquals(4, Kv.LAYOUT.tokensPerPage(), "the scenario's page of 4 tokens");
        final KvPool prefill = KvPool.builder(Kv.LAYOUT).pages(1).maxContextTokens(4).fillMode(FillMode.NONE).build();
        try (SimPair pair = new SimPair(new SimPair.Setup(prefill, decode))) {
            try (Sequence other = prefill.admit(4, 0).sequence()) {
                other.append(4);
                Kv.write(other, 99);
            }
            try (Sequence mine = prefill.admit(2, 0).sequence()) {
                mine.append(2);
                Kv.write(mine, 5);
                pair.sender.offer(5, mine);
            }
            final IncomingTransfer t = pair.receiver.start(5, 2, 2, pair.rp);
            for (int s = 0; s < 200 && t.state() == IncomingTransfer.State.RECEIVING; s++) {
                pair.run(1);
            }
            assertEquals(IncomingTransfer.State.COMMITTED, t.state(), t::toString);
            try (Sequence seq = t.sequence()) {
                final MemorySegment copy = MemorySegment.ofArray(new byte[(int) Kv.LAYOUT.bytesPerPage()]);
                copy.copyFrom(seq.page(0));
                return copy;
            }
        }
    }
}
