package io.kvpool.examples.server.role;

import io.kvpool.KvPool;
import io.kvpool.examples.server.Await;
import io.kvpool.examples.server.config.ServerConfig;
import io.kvpool.examples.server.ServerTests;
import io.kvpool.storage.HostPageStorage;
import io.kvpool.storage.PageStorage;
import io.kvpool.transfer.spi.LinkFailedException;
import io.kvpool.transfer.testkit.ForwardingStorage;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

import java.lang.foreign.MemorySegment;
import java.time.Duration;
import java.util.List;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;

/** A prefill call stopped by an Error, not an exception, still gives back what it took: the pages and the request id. */
@Timeout(value = 60, unit = TimeUnit.SECONDS)
class PrefillErrorTest {

    @Test
    void anErrorWhileThePromptIsWrittenGivesThePagesAndTheIdBack() {
        final ServerConfig cfg = ServerTests.small().build();
        final AtomicBoolean failWrites = new AtomicBoolean();
        final KvPool pool = KvPool.builder(cfg.layout()).pages(cfg.prefillPages()).maxContextTokens(cfg.contextTokens())
            .storage((l, n) -> new ErrorOnAccess(HostPageStorage.allocate(l, n), failWrites)).build();
        try (PrefillRole prefill = new PrefillRole(pool, RoleParts.sender(cfg, pool), () -> {
            throw new LinkFailedException("no decode in this test");
        }, Duration.ofSeconds(10), Duration.ofSeconds(10))) {
            final List<byte[]> prompt = List.of(new byte[] {1}, new byte[] {2}, new byte[] {3});
            failWrites.set(true);
            assertThrows(AssertionError.class, () -> prefill.prefill(7, "alice", prompt));
            assertEquals(0, pool.snapshot().inUse(), "the sequence the Error stopped kept its pages");
            failWrites.set(false);
            assertNull(prefill.prefill(7, "alice", prompt), "request id 7 is still taken after its call ended");
        }
    }

    @Test
    void anErrorInTheOfferGivesTheIdBack() throws Exception {
        final ServerConfig cfg = ServerTests.small().build();
        final KvPool pool = RoleParts.prefillPool(cfg);
        try (PrefillRole prefill = new PrefillRole(pool, RoleParts.sender(cfg, pool), () -> {
            throw new LinkFailedException("no decode in this test");
        }, Duration.ofSeconds(10), Duration.ofSeconds(10))) {
            final List<byte[]> prompt = List.of(new byte[] {1}, new byte[] {2}, new byte[] {3});
            prefill.beforeOffer = () -> {
                throw new AssertionError("injected: the offer");
            };
            assertNull(prefill.prefill(7, "alice", prompt), "admitted; its offer is queued for the duty thread");
            Await.until(() -> prefill.status().counters().get("duty_failures") == 1, Duration.ofSeconds(10),
                () -> "the offer's Error, counted by the duty cycle: " + prefill.status().counters());
            prefill.beforeOffer = null;
            assertEquals(0, pool.snapshot().inUse(), "the sequence whose offer failed kept its pages");
            assertNull(prefill.prefill(7, "alice", prompt), "request id 7 is still taken after its offer failed");
        }
    }

    /** Host storage whose page access throws an Error while {@code fail} is set. */
    private static final class ErrorOnAccess extends ForwardingStorage {
        private final AtomicBoolean fail;

        ErrorOnAccess(PageStorage inner, AtomicBoolean fail) {
            super(inner);
            this.fail = fail;
        }

        @Override
        public MemorySegment hostPage(int page) {
            if (fail.get()) {
                throw new AssertionError("injected: page " + page);
            }
            return super.hostPage(page);
        }
    }
}
