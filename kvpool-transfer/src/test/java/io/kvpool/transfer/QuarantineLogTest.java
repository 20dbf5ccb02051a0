package io.kvpool.transfer;

import io.kvpool.KvPool;
import io.kvpool.transfer.testkit.Kv;
import io.kvpool.transfer.wire.Message;
import org.junit.jupiter.api.Test;

import java.time.Duration;
import java.util.List;

import static org.junit.jupiter.api.Assertions.*;

/**
 * The receiver logs quarantines through its rate limit: a burst is one line, the next line after the interval counts
 * the rest, and closing counts what is left; the metrics keep every one.
 */
class QuarantineLogTest {

    static final int LINKS = 20;

    @Test
    void aBurstOfQuarantinesIsOneLineAndCloseCountsTheRest() {
        final RateLimitedLogTest.Lines out = new RateLimitedLogTest.Lines();
        final List<String> lines = out.lines;
        final ManualClock clock = new ManualClock();
        try (KvPool pool = Kv.pool(4 * LINKS)) {
            final TransferReceiver.Builder b = TransferReceiver.builder(pool, Kv.identity()).clock(clock)
                .completionTimeout(Duration.ofMinutes(5)).drainTimeout(Duration.ofMinutes(5)).heartbeat(Heartbeat.OFF);
            b.transferLog = out;
            final TransferReceiver rx = b.build();
            for (int i = 0; i < LINKS; i++) {
                quarantineOne(rx, i);
                clock.advanceMillis(100); // 20 quarantines in 2 s: within one 10 s interval
            }
            assertEquals(LINKS * Kv.LAYOUT.pagesFor(10), rx.metrics().quarantinedPages(), "the metrics keep every one");
            assertEquals(1, count(lines, "pages QUARANTINED"), lines::toString);

            clock.advanceMillis(10_000);
            quarantineOne(rx, LINKS);
            assertEquals(2, count(lines, "pages QUARANTINED"), lines::toString);
            assertTrue(lines.stream().anyMatch(l -> l.contains("pages QUARANTINED") && l.endsWith("(" + (LINKS - 1)
                + " more since the last line)")), lines::toString);

            for (int i = 0; i < 3; i++) {
                quarantineOne(rx, LINKS + 1 + i); // within the interval again: counted, not logged
            }
            rx.close();
            assertEquals(2, count(lines, "pages QUARANTINED"), lines::toString);
            assertTrue(lines.stream().anyMatch(l -> l.endsWith("3 more quarantine lines left out since the last one")),
                lines::toString);
        }
    }

    /** One transfer on a link of its own, whose sender reports one write unproven: quarantined. */
    private static void quarantineOne(TransferReceiver rx, int i) {
        final ScriptedLink link = new ScriptedLink().hello(Kv.identity());
        final int p = rx.addPeer(link);
        rx.doWork();
        assertTrue(rx.peer(p).isUp(), rx.peer(p)::toString);
        final IncomingTransfer t = rx.start(1_000 + i, 10, 0, p);
        assertEquals(IncomingTransfer.State.RECEIVING, t.state(), t::toString);
        link.inject(new Message.Abort(t.transferId(), t.generation(), Message.Abort.SENDER_FAILED, "write failed"));
        link.inject(new Message.Drained(t.transferId(), t.generation(), 0, 3, 2, 1));
        rx.doWork();
        assertEquals(IncomingTransfer.State.QUARANTINED, t.state(), t::toString);
    }

    private static long count(List<String> lines, String what) {
        return lines.stream().filter(l -> l.contains(what)).count();
    }
}
