package io.kvpool.examples.server;

import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

import java.net.Socket;
import java.time.Duration;
import java.util.concurrent.TimeUnit;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

/** A server that closes while a request generates: the client is told why, and it counts as the server's failure, not a client abort. */
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
}
