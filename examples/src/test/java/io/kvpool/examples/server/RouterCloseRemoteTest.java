package io.kvpool.examples.server;

import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;

import java.nio.file.Path;
import java.time.Duration;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * A process of the three-process server stops while a request's KV transfer is held: a router that closes answers
 * 503 {@code server_closing} at once, and a prefill stopped by SIGTERM is answered as a lost role, 503 {@code peer_lost}
 * with Retry-After. ({@code RouterCloseTest}: a close while a request is still with prefill.)
 */
@Timeout(value = 120, unit = TimeUnit.SECONDS)
class RouterCloseRemoteTest {

    @TempDir
    Path dir;

    /** Both roles' flags; prefill's add a fixed port and {@code extra}. */
    private ThreeProcesses start(String... extraPrefillArgs) throws Exception {
        final String[] args = {"--work-dir", dir.toString(), "--context", "512", "--prefill-pages", "64", "--decode-pages", "128",
            "--token-delay-ms", "0", "--transfer-timeout-ms", "30000", "--reconnect-ms", "50"};
        final java.util.List<String> prefillArgs = new java.util.ArrayList<>(java.util.List.of(args));
        prefillArgs.addAll(java.util.List.of("--port", Integer.toString(FixedPort.belowEphemeralRange())));
        prefillArgs.addAll(java.util.List.of(extraPrefillArgs));
        final ThreeProcesses roles = ThreeProcesses.start(dir, args, prefillArgs.toArray(String[]::new), Duration.ofSeconds(60));
        roles.awaitDecodeReady(Duration.ofSeconds(30));
        return roles;
    }

    /** Starts a request of erin's whose KV transfer prefill's gate holds; returns once decode holds its 7 pages RECEIVING. */
    private static Future<TestClient.Response> heldTransfer(ThreeProcesses roles, ExecutorService pool) throws Exception {
        roles.prefill.post("internal/test/gate", "{\"closed\":true}");
        final Future<TestClient.Response> inFlight = pool.submit(() -> roles.client.complete("erin", BackpressureTest.words("e", 100), 4, false));
        Await.until(() -> SeparateRolesTest.call(() -> SeparateRolesTest.count(roles.decode.pages(), 'R') == 7), Duration.ofSeconds(15),
            () -> SeparateRolesTest.show(roles.decode));
        return inFlight;
    }

    @Test
    void aRouterClosingMidTransferAnswers503ServerClosing() throws Exception {
        final ExecutorService pool = Executors.newVirtualThreadPerTaskExecutor();
        try (ThreeProcesses roles = start()) {
            final Future<TestClient.Response> inFlight = heldTransfer(roles, pool);
            final long closing = System.nanoTime();
            roles.router.close();
            final TestClient.Response r = inFlight.get(30, TimeUnit.SECONDS);
            final long tookMs = (System.nanoTime() - closing) / 1_000_000;
            assertEquals(503, r.status(), r::body);
            assertTrue(r.body().contains("\"reason\":\"server_closing\""), r::body);
            assertTrue(tookMs < 10_000, "the answer took " + tookMs + " ms: it waited for a timeout, not for the close");
            roles.prefill.post("internal/test/gate", "{\"closed\":false}");
        } finally {
            pool.shutdownNow();
        }
    }

    @Test
    void aPrefillStoppingMidTransferIsAnsweredAsALostRoleToRetry() throws Exception {
        // a rolling restart of prefill whose grace ends with a transfer's writes still held: a retry can be served by
        // the restarted process, so the answer is 503 with Retry-After, as for a prefill that crashed, not a final 502
        final ExecutorService pool = Executors.newVirtualThreadPerTaskExecutor();
        try (ThreeProcesses roles = start("--shutdown-grace-ms", "200")) {
            final Future<TestClient.Response> inFlight = heldTransfer(roles, pool);
            roles.prefill.terminate();
            final TestClient.Response r = inFlight.get(30, TimeUnit.SECONDS);
            assertEquals(503, r.status(), r::body);
            assertTrue(r.body().contains("\"reason\":\"peer_lost\""), r::body);
            assertEquals("1", r.retryAfter(), r::body);
        } finally {
            pool.shutdownNow();
        }
    }
}
