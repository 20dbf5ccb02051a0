package io.kvpool.transfer;

import io.kvpool.Sequence;
import io.kvpool.transfer.testkit.Kv;
import org.junit.jupiter.api.Test;

import java.time.Duration;

import static org.junit.jupiter.api.Assertions.*;

/**
 * An offer that decode never asked for holds prefill's pages until its descriptor timeout: the sender's counters must
 * show it (docs/transfer.md: the counters carry every event), else a prefill whose requests are routed to the wrong
 * decode, or abandoned before decode started them, looks healthy on every meter.
 */
class SenderDescriptorTimeoutMetricsTest {

    @Test
    void anOfferDroppedAtItsDescriptorTimeoutIsCounted() {
        try (SimPair rig = new SimPair(new SimPair.Setup(Kv.pool(16), Kv.pool(16))
                 .sender(p -> TransferSender.builder(p, Kv.identity()).descriptorTimeout(Duration.ofMillis(1))))) {
            final Sequence src = rig.prefill.admit(6, 0).sequence();
            src.append(6);
            Kv.write(src, 1);
            final OutgoingTransfer t = rig.sender.offer(1, src);
            src.close();
            rig.run(200); // 2 ms of network time; decode never starts request 1
            assertEquals(FailureReason.TIMEOUT, t.failureReason(), t::toString);
            assertEquals(0, rig.sender.activeTransfers());
            assertTrue(rig.prefill.verifyAccounting().idle(), rig.prefill.snapshot()::toString);
            assertEquals(1, rig.sender.metrics().descriptorTimeouts(), rig.sender.metrics()::toString);
            assertEquals(0, rig.sender.metrics().completed() + rig.sender.metrics().drainedSent() + rig.sender.metrics().cancelled());
        }
    }
}
