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
 * A router over role processes that closes while a request's KV transfer is held: the client gets 503
 * {@code server_closing} at once. Was (from a review, 2026-11-30): the router's own abort dropped the decode
 * stream, which then reported nothing (a dropped stream is "ours"), so the request waited for its timeout and the
 * client's connection was cut instead. ({@code RouterCloseTest}: a close while a request is still with prefill.)
 */
@Timeout(value = 120, unit = TimeUnit.SECONDS)
class RouterCloseRemoteTest {

    @TempDir
    Path dir;

    @Test
    void aRouterClosingMidTransferAnswers503ServerClosing() throws Exception {
        final int prefillPort = FixedPort.belowEphemeralRange();
        final String[] args = {"--work-dir", dir.toString(), "--context", "512", "--prefill-pages", "64", "--decode-pages", "128",
            "--token-delay-ms", "0", "--transfer-timeout-ms", "30000", "--reconnect-ms", "50"};
        final String[] prefillArgs = java.util.Arrays.copyOf(args, args.length + 2);
        prefillArgs[args.length] = "--port";
        prefillArgs[args.length + 1] = Integer.toString(prefillPort);
        final ExecutorService pool = Executors.newVirtualThreadPerTaskExecutor();
        try (ThreeProcesses roles = ThreeProcesses.start(dir, args, prefillArgs, Duration.ofSeconds(60))) {
            roles.awaitDecodeReady(Duration.ofSeconds(30));
            roles.prefill.post("internal/test/gate", "{\"closed\":true}");
            final Future<TestClient.Response> inFlight = pool.submit(() -> roles.client.complete("erin", BackpressureTest.words("e", 100), 4, false));
            Await.until(() -> SeparateRolesTest.call(() -> SeparateRolesTest.count(roles.decode.pages(), 'R') == 7), Duration.ofSeconds(15),
                () -> SeparateRolesTest.show(roles.decode));
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
}
