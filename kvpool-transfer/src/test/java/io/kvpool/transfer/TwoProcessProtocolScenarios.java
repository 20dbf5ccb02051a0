package io.kvpool.transfer;

import io.kvpool.transfer.testkit.Kv;
import io.kvpool.transfer.testkit.PrefillChild;
import io.kvpool.transfer.testkit.ChildProcessDecode;
import io.kvpool.Sequence;
import io.kvpool.SlotState;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;

import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.TimeUnit;

import static org.junit.jupiter.api.Assertions.*;

/**
 * The transfer protocol across two processes, the scenarios every host transport must pass: this JVM is the decode
 * side ({@link ChildProcessDecode}: a pool, a {@link TransferReceiver}), a child JVM the prefill side (its own host
 * pool and {@link TransferSender}, running {@link PrefillChild}). Real clocks; every wait is bounded and says what it
 * waited for. A subclass per transport ({@code ShmProtocolTwoProcessTest}, {@code UcxProtocolTwoProcessTest}) builds
 * the decode side and adds what only its transport can show, through the hooks below and its own tests.
 *
 * @param <D> the transport's decode side
 */
@Timeout(value = 30, unit = TimeUnit.SECONDS)
public abstract class TwoProcessProtocolScenarios<D extends ChildProcessDecode> {

    protected static final long WAIT_MS = ChildProcessDecode.WAIT_MS;

    @TempDir
    protected Path dir;

    /**
     * Builds the decode side and starts the child: {@code childEnvironment} is the identity environment it claims,
     * {@code scenario} ("serve" or "gate") and {@code requests} go to {@link PrefillChild}.
     */
    protected abstract D decode(String childEnvironment, String scenario, int requests, Duration completionTimeout,
                                Duration drainTimeout) throws Exception;

    /** Called once the test started {@code t}, the transfer it watches. */
    protected void watch(D d, IncomingTransfer t) {
    }

    /** After a proven drain: asserts what the transport can show about its link (nothing by default). */
    protected void assertLinkUntouchedByAProvenDrain(D d) {
    }

    /** Right after the child was killed (before the receiver runs). */
    protected void afterKill(D d) throws Exception {
    }

    /** After the killed sender's transfer was released: asserts how the transport got there (nothing by default). */
    protected void assertKilledSenderTornDown(D d, int pages) {
    }

    @Test
    public void transfersCommitAcrossProcessesWithEveryByteInPlace() throws Exception {
        final int n = 12;
        try (D d = decode("production", "serve", n, Duration.ofSeconds(5), Duration.ofSeconds(5))) {
            assertEquals(Peer.State.UP, d.connect().state());
            final List<IncomingTransfer> ts = new ArrayList<>();
            for (long id = 1; id <= n; id++) { // all at once: concurrent transfers on one link
                final IncomingTransfer t = d.receiver.start(id, PrefillChild.tokens(id), 4, d.peer);
                assertEquals(IncomingTransfer.State.RECEIVING, t.state(), t::toString);
                ts.add(t);
            }
            d.drive(() -> ts.stream().allMatch(IncomingTransfer::isTerminal), "every transfer to end");
            int pages = 0;
            for (IncomingTransfer t : ts) {
                assertEquals(IncomingTransfer.State.COMMITTED, t.state(), t::toString);
                final int tokens = PrefillChild.tokens(t.requestId());
                try (Sequence got = t.sequence()) {
                    assertEquals(tokens, got.tokenCount());
                    assertEquals(Kv.Finding.OK, Kv.check(got, t.requestId(), tokens), t::toString);
                    for (int i = 0; i < got.pageCount(); i++) {
                        assertEquals(SlotState.OWNED, d.pool.state(got.pageHandle(i)));
                    }
                    pages += got.pageCount();
                }
            }
            final ReceiverMetrics m = d.receiver.metrics();
            assertEquals(n, m.started());
            assertEquals(n, m.committed());
            for (FailureReason r : FailureReason.values()) {
                assertEquals(0, m.failures(r), r::toString);
            }
            assertEquals(0, m.heldPages());
            assertEquals(0, d.pool.snapshot().quarantineEvents());
            d.assertPoolClean();
            final String result = d.finish();
            assertTrue(result.contains(" completed=" + n + " drained=0 posted=" + pages + " failed=0 active=0 inUse=0 balanced=true"),
                result);
        }
    }

    @Test
    public void receiverAbortMidTransferHoldsThePagesUntilTheSendersDrained() throws Exception {
        try (D d = decode("production", "gate", 1, Duration.ofSeconds(5), Duration.ofSeconds(5))) {
            assertEquals(Peer.State.UP, d.connect().state());
            d.awaitCtl("frozen"); // the child stopped polling: the descriptor will sit unread (socket, event queue)
            final int tokens = PrefillChild.tokens(1), pages = (int) Kv.LAYOUT.pagesFor(tokens);
            final IncomingTransfer t = d.receiver.start(1, tokens, 4, d.peer);
            watch(d, t);
            assertEquals(IncomingTransfer.State.RECEIVING, t.state(), t::toString);
            assertEquals(pages, d.pool.snapshot().receiving());

            assertTrue(d.receiver.abort(t, "test"));
            assertEquals(IncomingTransfer.State.DRAINING, t.state(), t::toString);
            assertEquals(FailureReason.ABORTED, t.failure());
            d.idleFor(150); // the sender has not confirmed: nothing frees the pages on a timer
            assertEquals(IncomingTransfer.State.DRAINING, t.state(), t::toString);
            assertEquals(pages, d.pool.snapshot().draining(), () -> d.pool.snapshot().toString());
            assertEquals(pages, d.receiver.metrics().heldPages());

            d.ctl("go"); // the child reads DESCRIPTOR (and writes every page) and then ABORT, and drains
            d.drive(t::isTerminal, "the aborted transfer to be released");
            assertEquals(IncomingTransfer.State.RELEASED, t.state(), t::toString);
            assertEquals(ReceiverMetrics.Outcome.DRAINED, t.outcome(), t::toString);
            assertEquals(FailureReason.ABORTED, t.failure());
            assertTrue(t.message().contains("test"), t.message());
            final ReceiverMetrics m = d.receiver.metrics();
            assertEquals(1, m.deferredRelease(ReceiverMetrics.Outcome.DRAINED));
            assertEquals(0, m.deferredRelease(ReceiverMetrics.Outcome.ERROR) + m.deferredRelease(ReceiverMetrics.Outcome.TIMEOUT));
            assertEquals(0, m.heldPages());
            assertEquals(0, m.committed());
            assertEquals(0, d.pool.snapshot().quarantineEvents(), "a proven drain needs no quarantine");
            assertLinkUntouchedByAProvenDrain(d);
            d.assertPoolClean();
            // the child wrote every page after the abort (into DRAINING pages), then confirmed DRAINED
            final String result = d.finish();
            assertTrue(result.contains(" completed=0 drained=1 posted=" + pages + " failed=0 active=0 inUse=0 balanced=true"),
                result);
        }
    }

    @Test
    public void identityMismatchRefusesBothSidesAndStartsNothing() throws Exception {
        try (D d = decode("staging", "serve", 1, Duration.ofSeconds(5), Duration.ofSeconds(5))) {
            final Peer p = d.connect();
            assertEquals(Peer.State.REFUSED, p.state(), p::toString);
            assertTrue(p.failure().contains("environment: local=production remote=staging"), p.failure());
            assertEquals("staging", p.remote().environment());
            assertEquals(1, d.receiver.refusedPeers());

            final IncomingTransfer t = d.receiver.start(1, PrefillChild.tokens(1), 4, d.peer);
            assertEquals(IncomingTransfer.State.REJECTED, t.state(), t::toString);
            assertEquals(FailureReason.PEER_LOST, t.failure());
            assertEquals(1, d.receiver.metrics().failures(FailureReason.PEER_LOST));
            assertEquals(0, d.pool.snapshot().inUse(), "no page was allocated");
            d.assertPoolClean();

            final String result = d.finish(); // the child ended on its own refusal
            assertTrue(result.startsWith("RESULT peer=REFUSED completed=0 drained=0 posted=0 "), result);
            assertTrue(result.contains("environment: local=staging remote=production"), result);
        }
    }

    @Test
    public void killedSenderFailsPeerLostAndItsPagesAreReleasedOnlyThroughQuarantine() throws Exception {
        try (D d = decode("production", "gate", 1, Duration.ofSeconds(5), Duration.ofSeconds(5))) {
            assertEquals(Peer.State.UP, d.connect().state());
            d.awaitCtl("frozen");
            final int pages = (int) Kv.LAYOUT.pagesFor(PrefillChild.tokens(1));
            final IncomingTransfer t = d.receiver.start(1, PrefillChild.tokens(1), 4, d.peer);
            watch(d, t);
            assertEquals(IncomingTransfer.State.RECEIVING, t.state(), t::toString);

            d.child.destroyForcibly();
            afterKill(d);
            d.drive(t::isTerminal, "the transfer of the killed sender to end");
            assertEquals(IncomingTransfer.State.RELEASED, t.state(), t::toString);
            assertEquals(FailureReason.PEER_LOST, t.failure(), t::toString);
            assertEquals(ReceiverMetrics.Outcome.ERROR, t.outcome(), t::toString);
            assertKilledSenderTornDown(d, pages);
            final ReceiverMetrics m = d.receiver.metrics();
            assertEquals(1, m.failures(FailureReason.PEER_LOST));
            assertEquals(1, m.deferredRelease(ReceiverMetrics.Outcome.ERROR));
            assertEquals(1, m.quarantineReleases(), "released from quarantine, once the teardown was proven");
            assertEquals(0, m.quarantinedPages());
            assertEquals(0, m.heldPages());
            // The transport judged the peer gone (a zombie counts); Java reaps it on its own thread, so wait.
            assertTrue(d.child.waitFor(10, TimeUnit.SECONDS), "the killed sender is reaped");
            assertTrue(d.receiver.tearDownPeer(d.peer));
            assertEquals(0, d.pool.snapshot().quarantined());
            assertEquals(pages, d.pool.snapshot().quarantineEvents(), "every page of the transfer went through QUARANTINED");
            d.assertPoolClean();
        }
    }
}
