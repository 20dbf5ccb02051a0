package io.kvpool.examples.server;

import java.nio.file.Path;
import java.time.Duration;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;

import static org.junit.jupiter.api.Assertions.assertEquals;

/**
 * {@code --device cuda} across three processes, the same on the GPU ({@link DeviceRolesGpuTest}) and on the
 * host-memory stand-in ({@link SimulatedDeviceRolesTest}): the decode and prefill roles as child JVMs run through
 * {@code main}, KV moving by CUDA IPC, the echo model's KV read and written through page copies; the router in
 * this JVM. Two tenants plain and streamed, then the prefill process killed mid-transfer: decode's pages go
 * through QUARANTINED and are freed only once it is gone, and the router answers 503.
 */
final class DeviceRolesScenario {

    private DeviceRolesScenario() {
    }

    /** Runs the scenario with the role children started through {@code main}. */
    static void run(Class<?> main, Path dir, String where) throws Exception {
        final int prefillPort = FixedPort.belowEphemeralRange();
        final String[] args = {"--device", "cuda", "--work-dir", dir.toString(), "--context", "512", "--prefill-pages", "64",
            "--decode-pages", "128", "--token-delay-ms", "0", "--transfer-timeout-ms", "30000", "--reconnect-ms", "50"};
        final ExecutorService pool = Executors.newVirtualThreadPerTaskExecutor();
        try (ThreeProcesses roles = ThreeProcesses.start(main, dir, args, concat(args, "--port", Integer.toString(prefillPort)),
            Duration.ofSeconds(60))) {
            final RoleChild decode = roles.decode;
            final RoleChild prefill = roles.prefill;
            final TestClient client = roles.client;
            assertEquals("cuda-ipc:" + dir.resolve("transfer.sock"), decode.kvLink());
            roles.awaitDecodeReady(Duration.ofSeconds(30));
            roles.assertTwoTenantsIsolated(where);
            roles.assertClean(Duration.ofSeconds(15));

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
