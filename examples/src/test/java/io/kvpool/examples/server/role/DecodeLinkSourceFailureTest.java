package io.kvpool.examples.server.role;

import io.kvpool.KvPool;
import io.kvpool.Sequence;
import io.kvpool.examples.server.ServerTests;
import io.kvpool.examples.server.config.ServerConfig;
import io.kvpool.examples.server.link.LinkSource;
import io.kvpool.transfer.TransferSender;
import io.kvpool.transfer.shm.MappedPageStorage;
import io.kvpool.transfer.shm.ShmListener;
import io.kvpool.transfer.shm.ShmTransport;
import io.kvpool.transfer.spi.PeerLink;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

import java.io.IOException;
import java.io.UncheckedIOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;

import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * Where prefill's links come from fails (out of file descriptors: every accept throws): the decode role's duty cycle
 * must still serve the links it has, so a transfer on one of them commits.
 */
@Timeout(value = 60, unit = TimeUnit.SECONDS)
class DecodeLinkSourceFailureTest {

    @Test
    void aLinkSourceThatFailsDoesNotStopTheTransfersOnTheLinksAlreadyUp() throws Exception {
        final ServerConfig cfg = ServerTests.small().build();
        final Path dir = Files.createTempDirectory("kvpool-decode-accept");
        final KvPool decodePool = RoleParts.decodePool(cfg, (l, n) -> MappedPageStorage.create(dir.resolve("decode.pool"), l, n));
        final ShmListener listener = ShmTransport.listen(dir.resolve("transfer.sock"), (MappedPageStorage) decodePool.storage());
        final AtomicBoolean failing = new AtomicBoolean();
        final LinkSource flaky = new LinkSource() {
            @Override
            public PeerLink accept() {
                if (failing.get()) {
                    throw new UncheckedIOException(new IOException("Too many open files"));
                }
                return listener.accept();
            }

            @Override
            public String describe() {
                return "flaky";
            }

            @Override
            public void close() {
                listener.close();
            }
        };
        final KvPool prefillPool = RoleParts.prefillPool(cfg);
        final TransferSender sender = RoleParts.sender(cfg, prefillPool);
        try (DecodeRole decode = new DecodeRole(decodePool, RoleParts.receiver(cfg, decodePool), flaky, null,
            cfg.tokenDelay(), DecodeRole.reservationTtl(cfg), () -> { })) {
            DecodeAllocationFaultTest.connect(dir.resolve("transfer.sock"), sender, decode);
            failing.set(true);
            final Sequence kv = prefillPool.admit(9, 0).sequence();
            kv.append(9);
            for (int i = 0; i < kv.pageCount(); i++) {
                kv.page(i).fill((byte) 0x5A); // prefill's KV: anything but the free-page canary
            }
            sender.offer(7, kv);
            kv.close(); // the offer holds the pages
            final DecodeCall call = decode.start(7, "alice", 9, 0);
            DecodeCall.TransferOutcome outcome = null;
            final long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(10);
            while (outcome == null && System.nanoTime() < deadline) {
                sender.doWork();
                outcome = call.awaitTransfer(Duration.ofMillis(1));
            }
            assertTrue(outcome != null && outcome.committed(), "the transfer on the link already up: " + outcome);
            assertTrue(decode.status().counters().get("accept_failures") > 0, () -> decode.status().counters().toString());
            call.abort("test over");
        } finally {
            sender.close();
            prefillPool.close();
            Files.deleteIfExists(dir.resolve("transfer.sock"));
            Files.deleteIfExists(dir.resolve("decode.pool"));
            Files.deleteIfExists(dir);
        }
    }
}
