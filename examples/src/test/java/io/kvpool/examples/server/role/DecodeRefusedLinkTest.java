package io.kvpool.examples.server.role;

import io.kvpool.KvPool;
import io.kvpool.examples.server.Await;
import io.kvpool.examples.server.ServerTests;
import io.kvpool.examples.server.config.ServerConfig;
import io.kvpool.examples.server.link.LinkSource;
import io.kvpool.transfer.Peer;
import io.kvpool.transfer.PeerIdentity;
import io.kvpool.transfer.TransferSender;
import io.kvpool.transfer.shm.MappedPageStorage;
import io.kvpool.transfer.shm.ShmLink;
import io.kvpool.transfer.shm.ShmListener;
import io.kvpool.transfer.shm.ShmTransport;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.concurrent.TimeUnit;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * A prefill of another environment connects to decode and is refused at the handshake: decode, with no link up,
 * refuses requests as before (503, a link may come), and says why the last prefill was refused.
 */
@Timeout(value = 60, unit = TimeUnit.SECONDS)
class DecodeRefusedLinkTest {

    @Test
    void aRequestWithNoLinkUpNamesWhyTheLastPrefillWasRefused() throws Exception {
        final ServerConfig cfg = ServerTests.small().build();
        final Path dir = Files.createTempDirectory("kvpool-decode-refused");
        final KvPool decodePool = RoleParts.decodePool(cfg, (l, n) -> MappedPageStorage.create(dir.resolve("decode.pool"), l, n));
        final ShmListener listener = ShmTransport.listen(dir.resolve("transfer.sock"), (MappedPageStorage) decodePool.storage());
        final KvPool prefillPool = RoleParts.prefillPool(cfg);
        final TransferSender staging = TransferSender.builder(prefillPool,
            PeerIdentity.of(cfg.layout(), cfg.model(), "staging-" + cfg.environment(), cfg.build())).build();
        try (DecodeRole decode = new DecodeRole(decodePool, RoleParts.receiver(cfg, decodePool), LinkSource.shm(listener), null,
            cfg.tokenDelay(), DecodeRole.reservationTtl(cfg), () -> { })) {
            staging.addPeer(DecodeAllocationFaultTest.bootstrapped(dir.resolve("transfer.sock")));
            Await.until(() -> {
                staging.doWork();
                return staging.peer(0).state() == Peer.State.REFUSED;
            }, Duration.ofSeconds(20), () -> "the handshake of another environment: " + staging.peer(0));

            // decode's duty thread sees the refused link a cycle or so later: ask until it does
            final Rejection refusal = refusalOnceItSays(decode, 7, true, "the refusal does not say why the prefill link is down");
            assertEquals(Rejection.Reason.UNAVAILABLE, refusal.reason(), "a link may still come: retryable");
            assertTrue(refusal.message().contains("staging-" + cfg.environment()), refusal.message());
            assertFalse(decode.ready());

            // a newer link, lost before its handshake: the refusal of the older one no longer says why none is up
            final ShmLink lost = DecodeAllocationFaultTest.bootstrapped(dir.resolve("transfer.sock"));
            Await.until(() -> RoleFixtures.senderLinks(decode) == 1, Duration.ofSeconds(20), () -> "decode never took the second link");
            lost.close();
            refusalOnceItSays(decode, 8, false, "a stale refusal is still named after a newer link was lost");
        } finally {
            staging.close();
            prefillPool.close();
            listener.close();
            Files.deleteIfExists(dir.resolve("transfer.sock"));
            Files.deleteIfExists(dir.resolve("decode.pool"));
            Files.deleteIfExists(dir);
        }
    }

    /**
     * Asks decode for request {@code id} (4 tokens) until its refusal names a refused link, or no longer does
     * ({@code refused}); the duty thread learns of a link's end a cycle or so after it.
     */
    private static Rejection refusalOnceItSays(DecodeRole decode, long id, boolean refused, String failure) throws Exception {
        final long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(20);
        while (true) {
            final DecodeCall.Admitted admitted = decode.start(id, "alice", 4, 0).awaitAdmission(Duration.ofSeconds(10));
            assertTrue(admitted != null && !admitted.admitted(), "with no link up: " + admitted);
            final Rejection refusal = admitted.rejection();
            if (refusal.message().contains("refused") == refused) {
                return refusal;
            }
            assertTrue(System.nanoTime() < deadline, failure + ": " + refusal);
            Thread.sleep(10);
        }
    }
}
