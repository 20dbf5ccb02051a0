package io.kvpool.examples.server.role;

import io.kvpool.KvPool;
import io.kvpool.Sequence;
import io.kvpool.examples.server.Await;
import io.kvpool.examples.server.ServerTests;
import io.kvpool.examples.server.api.ApiError;
import io.kvpool.examples.server.config.ServerConfig;
import io.kvpool.examples.server.link.LinkSource;
import io.kvpool.storage.FillMode;
import io.kvpool.transfer.TransferSender;
import io.kvpool.transfer.shm.MappedPageStorage;
import io.kvpool.transfer.shm.ShmLink;
import io.kvpool.transfer.shm.ShmListener;
import io.kvpool.transfer.shm.ShmTransport;
import io.kvpool.transfer.spi.LinkListener;
import io.kvpool.transfer.spi.PeerLink;
import io.kvpool.transfer.testkit.ForwardingStorage;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

import java.io.IOException;
import java.io.UncheckedIOException;
import java.nio.ByteBuffer;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.TimeUnit;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * The decode pool admits a request, then its storage fails to give the request pages (a page whose fill failed at
 * free is filled again before reuse, and that fails too): the role answers a failed transfer, which the router
 * turns into 502 {@code allocation_fault} with no {@code Retry-After}, not a refusal to retry.
 */
@Timeout(value = 60, unit = TimeUnit.SECONDS)
class DecodeAllocationFaultTest {

    /** The decode pool's mapped storage, whose fill fails while {@link #failing} is set: with an Error if {@link #withError}. */
    static final class FlakyFill extends ForwardingStorage {
        volatile boolean failing;
        volatile boolean withError;

        FlakyFill(MappedPageStorage inner) {
            super(inner);
        }

        @Override
        public void fill(int page, FillMode mode) {
            if (failing && withError) {
                throw new InternalError("injected fill fault of page " + page + " (as a truncated mapping's)");
            }
            if (failing) {
                throw new UncheckedIOException(new IOException("injected fill failure of page " + page));
            }
            super.fill(page, mode);
        }
    }

    @Test
    void aStorageFaultAfterAdmissionIsAFailedTransferNotARetry() throws Exception {
        withFaultyDecode(false, (decode, decodePool) -> {
            final int tokens = (int) decodePool.maxContextTokens();
            final DecodeCall call = decode.start(7, "alice", tokens, 0);
            final DecodeCall.Admitted admitted = call.awaitAdmission(Duration.ofSeconds(10));
            assertTrue(admitted != null && admitted.admitted(), "the pool admitted it: " + admitted);
            final DecodeCall.TransferOutcome outcome = call.awaitTransfer(Duration.ofSeconds(10));
            assertFalse(outcome == null || outcome.committed(), "a failed transfer: " + outcome);
            assertEquals(DecodeRole.ALLOCATION_FAULT, outcome.failure());
            assertTrue(outcome.message().contains("request 7") && outcome.message().contains("injected fill failure"),
                outcome.message());

            final ApiError answer = ApiError.transferFailed(7, outcome);
            assertEquals(502, answer.status());
            assertEquals("allocation_fault", answer.reason());
            assertEquals(0, answer.retryAfterSeconds(), "a fault is not a refusal to retry");

            assertEquals(1L, decode.status().counters().get("transfers_failed"));
            assertEquals(0, decodePool.snapshot().inUse(), decodePool.snapshot()::toString);
            assertEquals(0, decodePool.snapshot().reserved(), decodePool.snapshot()::toString);
        });
    }

    @Test
    void anErrorOnTheDutyThreadAnswersTheCallAtOnce() throws Exception {
        // the caller must not wait out its whole admission timeout for a future nobody will complete
        withFaultyDecode(true, (decode, decodePool) -> {
            final DecodeCall call = decode.start(7, "alice", (int) decodePool.maxContextTokens(), 0);
            final IllegalStateException e = assertThrows(IllegalStateException.class, () -> call.awaitAdmission(Duration.ofSeconds(20)));
            assertTrue(e.getCause() instanceof InternalError, e.toString());
            Await.until(() -> decode.status().counters().get("duty_failures") == 1, Duration.ofSeconds(10),
                () -> "the duty cycle counts the Error: " + decode.status().counters());
            // and nothing of the call is left: its admission, its pages (allocated pinned), its reservation
            assertEquals(0, decodePool.snapshot().inUse(), decodePool.snapshot()::toString);
            assertEquals(0, decodePool.snapshot().receiving(), decodePool.snapshot()::toString);
            assertEquals(0, decodePool.snapshot().reserved(), decodePool.snapshot()::toString);
            assertEquals(0, decodePool.snapshot().openSequences(), decodePool.snapshot()::toString);
        });
    }

    interface FaultyDecodeCase {
        void run(DecodeRole decode, KvPool decodePool) throws Exception;
    }

    /**
     * Runs {@code test} against a decode role linked to a prefill sender, after every page of the decode pool was used
     * once and its fill made to fail (with an Error if {@code withError}): each page must be filled again before reuse.
     */
    private static void withFaultyDecode(boolean withError, FaultyDecodeCase test) throws Exception {
        final ServerConfig cfg = ServerTests.small().build();
        final Path dir = Files.createTempDirectory("kvpool-decode-fault");
        final FlakyFill[] storage = new FlakyFill[1];
        final KvPool decodePool = RoleParts.decodePool(cfg,
            (l, n) -> storage[0] = new FlakyFill(MappedPageStorage.create(dir.resolve("decode.pool"), l, n)));
        final ShmListener listener = ShmTransport.listen(dir.resolve("transfer.sock"), (MappedPageStorage) storage[0].inner());
        final KvPool prefillPool = RoleParts.prefillPool(cfg);
        final TransferSender sender = RoleParts.sender(cfg, prefillPool);
        try (DecodeRole decode = new DecodeRole(decodePool, RoleParts.receiver(cfg, decodePool), shm(listener), null,
            cfg.tokenDelay(), DecodeRole.reservationTtl(cfg), () -> { })) {
            connect(dir.resolve("transfer.sock"), sender, decode);

            // every page's fill now fails: every page, used and freed here, must be filled again before reuse,
            // which fails too
            storage[0].failing = true;
            storage[0].withError = withError;
            final int tokens = (int) cfg.contextTokens();
            final List<Sequence> used = new ArrayList<>();
            for (int i = 0; i < cfg.decodePages() / decodePool.layout().pagesFor(tokens); i++) {
                final Sequence seq = decodePool.admit(tokens, 0).sequence();
                seq.append(tokens);
                used.add(seq);
            }
            assertEquals(cfg.decodePages(), decodePool.snapshot().inUse(), "every page used once");
            storage[0].withError = false; // the frees fail as an exception; the allocation's fill is the one tested
            used.forEach(Sequence::close);
            storage[0].withError = withError;
            test.run(decode, decodePool);
            storage[0].failing = false;
        } finally {
            sender.close();
            prefillPool.close();
            listener.close();
            Files.deleteIfExists(dir.resolve("transfer.sock"));
            Files.deleteIfExists(dir.resolve("decode.pool"));
            Files.deleteIfExists(dir);
        }
    }

    private static LinkSource shm(ShmListener listener) {
        return LinkSource.shm(listener);
    }

    /** Connects prefill's sender to the decode role and drives the sender until both sides are up. */
    static void connect(Path socket, TransferSender sender, DecodeRole decode) throws IOException, InterruptedException {
        final ShmLink link = bootstrapped(socket);
        final long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(20);
        sender.addPeer(link);
        while (!decode.ready() || !sender.peer(0).isUp()) {
            sender.doWork();
            assertTrue(System.nanoTime() < deadline, "the handshake did not finish: " + sender.peer(0));
            Thread.sleep(1);
        }
    }

    /** @return a shared-memory link to the listener at {@code socket}, its bootstrap done (no handshake yet) */
    static ShmLink bootstrapped(Path socket) throws IOException, InterruptedException {
        final ShmLink link = ShmTransport.connect(socket);
        final LinkListener bootstrap = new LinkListener() {
            @Override public void onFrame(PeerLink l, ByteBuffer frame) { }
            @Override public void onWriteDone(PeerLink l, long token, int status) { }
            @Override public void onFlushDone(PeerLink l, long token, boolean ok) { }
            @Override public void onLinkFailed(PeerLink l, String reason) { }
        };
        final long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(20);
        while (!link.isReady()) {
            link.poll(bootstrap, 16);
            assertTrue(System.nanoTime() < deadline, "the shared-memory bootstrap did not finish");
            Thread.sleep(1);
        }
        return link;
    }
}
