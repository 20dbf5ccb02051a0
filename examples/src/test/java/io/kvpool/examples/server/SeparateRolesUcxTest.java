package io.kvpool.examples.server;

import io.kvpool.transfer.ucx.UcxTransport;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.MethodOrderer;
import org.junit.jupiter.api.Order;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.TestMethodOrder;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;
import org.opentest4j.AssertionFailedError;
import org.opentest4j.TestAbortedException;

import java.net.Socket;
import java.nio.file.Path;
import java.time.Duration;
import java.util.Optional;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;

import static org.junit.jupiter.api.Assertions.assertEquals;

/**
 * The three-process server with KV over UCX ({@code --transport ucx}): decode listens for the UCX bootstrap on
 * {@code --kv-address}, prefill connects to it (and retries until decode listens). Skipped where UCX cannot
 * load; failed then if UCX is required ({@code KVPOOL_UCX_REQUIRED=true} or {@code -Dkvpool.ucx.required=true},
 * as kvpool-transfer's UCX tests).
 */
@TestMethodOrder(MethodOrderer.OrderAnnotation.class)
@Timeout(value = 60, unit = TimeUnit.SECONDS)
class SeparateRolesUcxTest {

    private static final Duration WAIT = Duration.ofSeconds(15);

    @TempDir
    static Path dir;
    static ThreeProcesses roles;
    static final ExecutorService pool = Executors.newVirtualThreadPerTaskExecutor();

    /** Skips without UCX, or fails when UCX is required. */
    static void assumeUcx() {
        final Optional<String> unavailable = UcxTransport.unavailableReason();
        if (unavailable.isEmpty()) {
            return;
        }
        if ("true".equalsIgnoreCase(System.getenv("KVPOOL_UCX_REQUIRED")) || Boolean.getBoolean("kvpool.ucx.required")) {
            throw new AssertionFailedError("UCX is required (KVPOOL_UCX_REQUIRED / kvpool.ucx.required) but unavailable: " + unavailable.get());
        }
        throw new TestAbortedException("UCX unavailable, skipping the --transport ucx tests: " + unavailable.get());
    }

    static String[] args(String kvAddress) {
        return new String[] {"--transport", "ucx", "--kv-address", kvAddress, "--context", "512", "--prefill-pages", "64",
            "--decode-pages", "128", "--token-delay-ms", "10", "--heartbeat-ms", "20", "--transfer-timeout-ms", "30000",
            "--reconnect-ms", "50"};
    }

    @BeforeAll
    static void start() throws Exception {
        assumeUcx();
        final int kvPort;
        try (java.net.ServerSocket s = new java.net.ServerSocket(0)) {
            kvPort = s.getLocalPort(); // chosen here so that both children start at once (prefill retries until decode listens)
        }
        roles = ThreeProcesses.start(dir, args("127.0.0.1:" + kvPort), args("127.0.0.1:" + kvPort), WAIT);
        assertEquals("ucx:127.0.0.1:" + kvPort, roles.decode.kvLink());
        roles.awaitLinked(WAIT, "the UCX link to come up");
    }

    @AfterAll
    static void stop() {
        pool.shutdownNow();
        if (roles != null) {
            roles.close();
        }
    }

    static void assertClean() throws Exception {
        roles.assertClean(WAIT);
    }

    @Test
    @Order(1)
    void twoTenantsPlainAndStreamedAndAClientThatLeavesOverUcx() throws Exception {
        roles.assertTwoTenantsIsolated("over UCX");
        final long[] aborts0 = roles.abortRequests();
        try (Socket s = roles.client.openRaw("carol", "tell me a long story", 200, true)) {
            TestClient.readUntil(s, "\"text\":");
        }
        roles.awaitAbortedInBoth(aborts0, WAIT);
        assertClean();
        assertEquals(5, roles.decode.counter("transfers_committed"), "four completions and the stream whose client left");
    }

    @Test
    @Order(2)
    void killingThePrefillProcessMidTransferQuarantinesUntilTheUcxLinkIsTornDown() throws Exception {
        final long released0 = roles.decode.counter("quarantine_releases"), events0 = roles.decode.poolCounter("quarantine_events");
        roles.prefill.post("internal/test/gate", "{\"closed\":true}");
        final Future<TestClient.Response> inFlight = pool.submit(() -> roles.client.complete("erin", BackpressureTest.words("e", 100), 4, false));
        Await.until(() -> SeparateRolesTest.call(() -> SeparateRolesTest.count(roles.decode.pages(), 'R') == 7), WAIT,
            () -> "the 7-page transfer to be in flight: " + roles.router.roleStatus());
        roles.prefill.kill();
        final TestClient.Response r = inFlight.get(30, TimeUnit.SECONDS);
        assertEquals(503, r.status(), r::body);
        assertEquals("peer_lost", r.error().path("reason").asText(), r::body);
        Await.until(() -> SeparateRolesTest.call(() -> roles.decode.counter("quarantine_releases") == released0 + 1), WAIT,
            () -> "decode to release the quarantine once the link's worker is closed: " + SeparateRolesTest.show(roles.decode));
        assertEquals(events0 + 7, roles.decode.poolCounter("quarantine_events"), "every page of the transfer went through QUARANTINED");
        roles.decode.assertPoolClean();
    }
}
