package io.kvpool.examples.server;

import io.kvpool.cuda.Cuda;
import org.junit.jupiter.api.Assumptions;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;

import java.net.ServerSocket;
import java.nio.file.Path;
import java.time.Duration;
import java.util.List;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assertions.fail;

/**
 * {@code --device cuda}: the decode and prefill roles as child JVMs with their pools on device 0, KV moving by
 * CUDA IPC, checksums on the device, the echo model's KV read and written through {@code readPage}/{@code writePage};
 * the router in this JVM. Two tenants plain and streamed, then the prefill process killed mid-transfer: decode's
 * device pages go through QUARANTINED and are freed once it is gone, the router answers 503.
 * Skipped without a usable GPU (with the reason); failed then under {@code -Dkvpool.gpu.required=true}.
 */
@Timeout(value = 120, unit = TimeUnit.SECONDS)
class DeviceRolesGpuTest {

    @TempDir
    Path dir;

    /** kvpool-cuda's GpuAssume rule: skip with the reason, or fail when a GPU is required. */
    static void assumeGpu() {
        final String reason = Cuda.unavailableReason();
        if (reason == null) {
            return;
        }
        if (Boolean.getBoolean("kvpool.gpu.required")) {
            fail("kvpool.gpu.required=true but " + reason);
        }
        Assumptions.abort("no GPU: " + reason);
    }

    @Test
    void twoTenantsAndAPrefillProcessKilledMidTransferWithBothPoolsOnTheGpu() throws Exception {
        assumeGpu();
        final int prefillPort;
        try (ServerSocket s = new ServerSocket(0)) {
            prefillPort = s.getLocalPort();
        }
        final String[] args = {"--device", "cuda", "--work-dir", dir.toString(), "--context", "512", "--prefill-pages", "64",
            "--decode-pages", "128", "--token-delay-ms", "0", "--transfer-timeout-ms", "30000", "--reconnect-ms", "50"};
        final ExecutorService pool = Executors.newVirtualThreadPerTaskExecutor();
        try (RoleChild decode = RoleChild.start(dir, "decode", args);
             RoleChild prefill = RoleChild.start(dir, "prefill", concat(args, "--port", Integer.toString(prefillPort)))) {
            decode.awaitStarted(Duration.ofSeconds(60));
            prefill.awaitStarted(Duration.ofSeconds(60));
            assertEquals("cuda-ipc:" + dir.resolve("transfer.sock"), decode.kvLink());
            try (KvServer router = KvServer.start(ServerTests.small().topology(Topology.DEFAULT.withRole(Topology.Role.ROUTER)
                .withUrls(prefill.uri(), decode.uri())).build())) {
                final TestClient client = new TestClient(router);
                Await.until(() -> SeparateRolesTest.call(() -> decode.status().path("ready").asBoolean()), Duration.ofSeconds(30),
                    () -> decode.log() + prefill.log());
                for (String tenant : List.of("alice", "bob")) {
                    final String prompt = tenant + "'s secret on the GPU";
                    final TestClient.Response plain = client.complete(tenant, prompt, 5, false);
                    assertEquals(200, plain.status(), plain::body);
                    assertEquals(List.of(), Isolation.violations(tenant, prompt, 5, plain.json()));
                    final TestClient.Response stream = client.complete(tenant, prompt, 5, true);
                    assertEquals(200, stream.status(), stream::body);
                    assertEquals(List.of(), Isolation.violations(tenant, prompt, 5, SeparateRolesTest.joined(stream)));
                }
                assertTrue(router.awaitQuiescence(Duration.ofSeconds(15)));
                decode.assertPoolClean();
                prefill.assertPoolClean();

                final long released0 = decode.counter("quarantine_releases");
                prefill.post("internal/test/gate", "{\"closed\":true}");
                final Future<TestClient.Response> inFlight = pool.submit(() -> client.complete("erin", BackpressureTest.words("e", 100), 4, false));
                Await.until(() -> SeparateRolesTest.call(() -> SeparateRolesTest.count(decode.pages(), 'R') == 7), Duration.ofSeconds(15),
                    () -> SeparateRolesTest.show(decode));
                prefill.kill();
                final TestClient.Response r = inFlight.get(30, TimeUnit.SECONDS);
                assertEquals(503, r.status(), r::body);
                Await.until(() -> SeparateRolesTest.call(() -> decode.counter("quarantine_releases") == released0 + 1), Duration.ofSeconds(15),
                    () -> SeparateRolesTest.show(decode));
                decode.assertPoolClean();
            }
        } finally {
            pool.shutdownNow();
        }
    }

    private static String[] concat(String[] a, String... b) {
        final String[] out = java.util.Arrays.copyOf(a, a.length + b.length);
        System.arraycopy(b, 0, out, a.length, b.length);
        return out;
    }
}
