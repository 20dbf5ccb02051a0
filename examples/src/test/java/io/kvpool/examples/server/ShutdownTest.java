package io.kvpool.examples.server;

import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

import java.net.Socket;
import java.time.Duration;
import java.util.concurrent.TimeUnit;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * A server that closes while a request generates: the client is told why, and it counts as the server's failure,
 * not a client abort. A graceful shutdown lets the request finish first, and refuses what comes after.
 */
@Timeout(value = 60, unit = TimeUnit.SECONDS)
class ShutdownTest {

    @Test
    void aServerClosingMidGenerationCountsAServerClosingFailureNotAClientAbort() throws Exception {
        final KvServer server = KvServer.start(ServerTests.small().tokenDelay(Duration.ofMillis(20)).build());
        try (Socket s = new TestClient(server).openRaw("alice", "a long story", 200, true)) {
            TestClient.readUntil(s, "\"text\":"); // generating
            server.close();
            final String rest = TestClient.readUntil(s, "[DONE]");
            assertTrue(rest.contains("\"reason\":\"server_closing\""), rest);
        } finally {
            server.close();
        }
        assertEquals(0, server.counters().get("aborted"), () -> "counted as a client abort: " + server.counters());
        assertEquals(1, server.counters().get("failed"), server.counters()::toString);
        assertEquals(1.0, Metrics.parse(server.metricsText()).get("kvpool_requests_failed_total{reason=\"server_closing\"}"), server::metricsText);
    }

    @Test
    void aGracefulShutdownLetsTheRequestInFlightFinishAndTakesNoNewOne() throws Exception {
        final KvServer server = KvServer.start(ServerTests.small().tokenDelay(Duration.ofMillis(20)).build());
        final TestClient client = new TestClient(server);
        final Thread stopper;
        final long t0;
        try (Socket s = client.openRaw("alice", "a story of forty tokens", 40, true)) { // 40 × 20 ms
            TestClient.readUntil(s, "\"text\":"); // generating
            t0 = System.nanoTime();
            stopper = Thread.ofVirtual().start(() -> server.shutdown(Duration.ofSeconds(30)));
            Await.until(() -> {
                try (Socket late = new Socket(server.baseUri().getHost(), server.port())) {
                    return false; // still accepting
                } catch (java.io.IOException refused) {
                    return true;
                }
            }, Duration.ofSeconds(10), () -> "the server to stop accepting");
            final String rest = TestClient.readUntil(s, "[DONE]");
            assertTrue(rest.contains("\"finish_reason\":\"length\"") && !rest.contains("\"error\""), rest);
        }
        stopper.join(30_000);
        final long ms = (System.nanoTime() - t0) / 1_000_000;
        assertTrue(!stopper.isAlive() && ms < 20_000, ms + " ms: shutdown returns once nothing is in flight, not after its grace");
        assertEquals(1, server.counters().get("completed"), server.counters()::toString);
        assertEquals(0, server.counters().get("failed") + server.counters().get("aborted"), server.counters()::toString);
    }

    @Test
    void aShutdownWithoutGraceAbortsLikeClose() throws Exception {
        final KvServer server = KvServer.start(ServerTests.small().tokenDelay(Duration.ofMillis(20)).build());
        try (Socket s = new TestClient(server).openRaw("alice", "a long story", 200, true)) {
            TestClient.readUntil(s, "\"text\":");
            Thread.ofVirtual().start(() -> server.shutdown(Duration.ZERO));
            final String rest = TestClient.readUntil(s, "[DONE]");
            assertTrue(rest.contains("\"reason\":\"server_closing\""), rest);
        } finally {
            server.close();
        }
        assertEquals(1, server.counters().get("failed"), server.counters()::toString);
    }
}
