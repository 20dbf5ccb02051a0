package io.kvpool.transfer;

import io.kvpool.Admission;
import io.kvpool.KvPool;
import io.kvpool.Sequence;
import io.kvpool.transfer.testkit.Kv;
import org.junit.jupiter.api.Test;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

/** What {@link TransferSender#offer(long, Sequence)} checks before it offers anything, and what its refusals name. */
class SenderOfferChecksTest {

    @Test
    void aSequenceOfAnotherPoolIsRefusedNamingBothPools() {
        try (KvPool prefill = Kv.pool(8); KvPool other = Kv.pool(8)) {
            final TransferSender sender = TransferSender.builder(prefill, Kv.identity()).build();
            try (Admission a = other.admit(4, 0); Sequence seq = a.sequence()) {
                seq.append(4);
                final IllegalArgumentException e = assertThrows(IllegalArgumentException.class, () -> sender.offer(1, seq));
                assertTrue(e.getMessage().contains("id " + other.poolId()) && e.getMessage().contains("id " + prefill.poolId()),
                    e.getMessage());
                assertEquals(0, sender.activeTransfers());
            } finally {
                sender.close();
            }
        }
    }

    @Test
    void aClosedSequenceIsRefusedNotOfferedAsEmpty() {
        try (KvPool prefill = Kv.pool(8)) {
            final TransferSender sender = TransferSender.builder(prefill, Kv.identity()).build();
            try {
                final Sequence seq;
                try (Admission a = prefill.admit(4, 0)) {
                    seq = a.sequence();
                }
                seq.append(4);
                Kv.write(seq, 1);
                seq.close(); // the application closed it before offering: its KV is gone
                final IllegalStateException e = assertThrows(IllegalStateException.class, () -> sender.offer(1, seq));
                assertTrue(e.getMessage().contains("closed"), e.getMessage());
                assertEquals(0, sender.activeTransfers(), "nothing may be offered for a closed sequence");
            } finally {
                sender.close();
            }
        }
    }
}
