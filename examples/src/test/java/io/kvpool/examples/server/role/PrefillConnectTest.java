package io.kvpool.examples.server.role;

import io.kvpool.KvPool;
import io.kvpool.examples.server.Await;
import io.kvpool.examples.server.ServerTests;
import io.kvpool.examples.server.config.ServerConfig;
import io.kvpool.transfer.spi.LinkFailedException;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

import java.time.Duration;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * A connect to decode that takes seconds (UCX's worker exchange with a decode that is paused, or a lossy path) must not
 * hold prefill's duty cycle: aborts, offers and the heartbeats of the links already up go on meanwhile.
 */
@Timeout(value = 60, unit = TimeUnit.SECONDS)
class PrefillConnectTest {

    @Test
    void aSlowConnectDoesNotHoldTheDutyCycle() throws Exception {
        final ServerConfig cfg = ServerTests.small().build();
        final KvPool pool = RoleParts.prefillPool(cfg);
        final CountDownLatch connecting = new CountDownLatch(1);
        try (PrefillRole prefill = new PrefillRole(pool, RoleParts.sender(cfg, pool), () -> {
            connecting.countDown();
            try {
                Thread.sleep(4_000);
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
            }
            throw new LinkFailedException("decode did not answer the exchange");
        }, Duration.ofMillis(200), Duration.ofSeconds(10))) {
            assertTrue(connecting.await(5, TimeUnit.SECONDS), "no connect was tried");
            final long t0 = System.nanoTime();
            prefill.abort(42, "the client left");
            Await.until(() -> prefill.status().counters().get("abort_requests") == 1, Duration.ofSeconds(10),
                () -> "the abort: " + prefill.status().counters());
            final long ms = (System.nanoTime() - t0) / 1_000_000;
            assertTrue(ms < 1_000, "the abort waited " + ms + " ms for a connect in progress");
        }
    }
    @Test
    void aConnectInProgressEndsBeforeTheTransportClosesWithTheRole() throws Exception {
        // a connect still running when the transport closes would leave what it made (a UCX worker) behind it
        final ServerConfig cfg = ServerTests.small().build();
        final KvPool pool = RoleParts.prefillPool(cfg);
        final java.util.concurrent.atomic.AtomicBoolean transportClosed = new java.util.concurrent.atomic.AtomicBoolean();
        final java.util.concurrent.atomic.AtomicReference<Boolean> closedWhenItEnded = new java.util.concurrent.atomic.AtomicReference<>();
        final CountDownLatch connecting = new CountDownLatch(1);
        final PrefillRole prefill = new PrefillRole(pool, RoleParts.sender(cfg, pool), () -> {
            connecting.countDown();
            try {
                Thread.sleep(3_000); // the worker-address exchange with a paused decode
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
            }
            closedWhenItEnded.set(transportClosed.get()); // where the connect would close its worker
            throw new LinkFailedException("the exchange ended");
        }, Duration.ofMillis(200), Duration.ofSeconds(10), () -> transportClosed.set(true));
        assertTrue(connecting.await(5, TimeUnit.SECONDS), "no connect was tried");
        prefill.close();
        Await.until(() -> closedWhenItEnded.get() != null, Duration.ofSeconds(10), () -> "the connect's end");
        assertTrue(transportClosed.get(), "the role closes its transport");
        assertEquals(false, closedWhenItEnded.get(), "the connect ended after the transport closed");
    }
}
