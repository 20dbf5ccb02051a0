package io.kvpool.examples.server;

import io.kvpool.examples.server.config.ServerConfig;
import io.kvpool.examples.server.config.Topology;
import io.kvpool.transfer.TransferSafeguard;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;

import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.nio.file.Path;
import java.time.Duration;
import java.util.List;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;

/**
 * The control of {@link SeparateRolesTest}'s quarantine check: a decode role with the transfer's
 * {@code --unsafe-quarantine-on-timeout} switch (here in this JVM, as a {@link RoleServer}) frees the pages of a
 * transfer whose link was lost while the prefill process (a child JVM) still lives and maps the pool file — and
 * {@link SeparateRolesTest#quarantineViolations}, the check the safe run passes, catches it.
 */
@Timeout(value = 60, unit = TimeUnit.SECONDS)
class SeparateRolesControlTest {

    @TempDir
    Path dir;

    @Test
    void withTheQuarantineSwitchedOffTheCheckCatchesPagesFreedUnderALiveSender() throws Exception {
        final ServerConfig decodeConfig = ServerTests.small().role(Topology.Role.DECODE).workDir(dir).transferTimeout(Duration.ofSeconds(30))
            .unsafeDisable(TransferSafeguard.QUARANTINE_ON_TIMEOUT).build();
        final ExecutorService pool = Executors.newVirtualThreadPerTaskExecutor();
        try (RoleServer decode = RoleServer.start(decodeConfig);
             RoleChild prefill = RoleChild.start(dir, "prefill", "--work-dir", dir.toString(), "--context", "512", "--prefill-pages", "64",
                 "--token-delay-ms", "0", "--transfer-timeout-ms", "30000", "--reconnect-ms", "50");
             KvServer router = KvServer.start(ServerTests.small().topology(Topology.DEFAULT.withRole(Topology.Role.ROUTER)
                 .withUrls(prefill.awaitStarted(Duration.ofSeconds(15)).uri(), decode.baseUri())).build())) {
            final TestClient client = new TestClient(router);
            Await.until(() -> SeparateRolesTest.call(() -> prefill.status().path("ready").asBoolean()), Duration.ofSeconds(15), prefill::log);

            prefill.post("internal/test/gate", "{\"closed\":true}");
            final Future<TestClient.Response> inFlight = pool.submit(() -> client.complete("erin", BackpressureTest.words("e", 100), 4, false));
            Await.until(() -> SeparateRolesTest.count(pages(decode.baseUri()), 'R') == 7, Duration.ofSeconds(15), () -> pages(decode.baseUri()));
            prefill.post("internal/test/gate", "{\"drop\":true}"); // the link goes; the process lives on, mapping the pool file
            assertEquals(503, inFlight.get(20, TimeUnit.SECONDS).status());

            final List<String> v = SeparateRolesTest.quarantineViolations(pages(decode.baseUri()), 7, prefill.process.isAlive());
            assertFalse(v.isEmpty(), "with the safeguard off the pages must be freed under the live sender, and the check must say so");
            assertEquals(List.of("0 of the transfer's 7 pages are QUARANTINED while the sender lives: " + pages(decode.baseUri())), v);
        } finally {
            pool.shutdownNow();
        }
    }

    /**
     * The safe twin, with deadlines short enough that a release on a timer would show: decode (here in this JVM)
     * with a 200 ms transfer timeout and drain deadline, prefill's writes held so the transfer times out and its
     * pages are quarantined while the prefill process lives — then a wait of ten deadlines: every page must still
     * be QUARANTINED (only the sender's death ends it).
     */
    @Test
    void withTheSafeguardOnAQuarantineOutlastsManyDeadlinesWhileTheSenderLives() throws Exception {
        final ServerConfig decodeConfig = ServerTests.small().role(Topology.Role.DECODE).workDir(dir).transferTimeout(Duration.ofMillis(200))
            .requestTimeout(Duration.ofSeconds(20)).build();
        try (RoleServer decode = RoleServer.start(decodeConfig);
             RoleChild prefill = RoleChild.start(dir, "prefill", "--work-dir", dir.toString(), "--context", "512", "--prefill-pages", "64",
                 "--token-delay-ms", "0", "--transfer-timeout-ms", "200", "--reconnect-ms", "50");
             KvServer router = KvServer.start(ServerTests.small().requestTimeout(Duration.ofSeconds(20))
                 .topology(Topology.DEFAULT.withRole(Topology.Role.ROUTER).withUrls(prefill.awaitStarted(Duration.ofSeconds(15)).uri(),
                     decode.baseUri())).build())) {
            final TestClient client = new TestClient(router);
            Await.until(() -> SeparateRolesTest.call(() -> prefill.status().path("ready").asBoolean()), Duration.ofSeconds(15), prefill::log);
            prefill.post("internal/test/gate", "{\"closed\":true}"); // the writes never complete: no DRAINED can come
            final TestClient.Response r = client.complete("erin", BackpressureTest.words("e", 100), 4, false);
            assertEquals(504, r.status(), r::body);
            Await.until(() -> SeparateRolesTest.count(pages(decode.baseUri()), 'Q') == 7, Duration.ofSeconds(15), () -> pages(decode.baseUri()));
            Thread.sleep(2_000); // ten transfer timeouts and drain deadlines: a release on any timer would have happened
            assertEquals(List.of(), SeparateRolesTest.quarantineViolations(pages(decode.baseUri()), 7, prefill.process.isAlive()), prefill::log);
            prefill.kill();
            Await.until(() -> SeparateRolesTest.count(pages(decode.baseUri()), 'F') == 128, Duration.ofSeconds(15),
                () -> "decode to free the pages once the prefill process is gone: " + pages(decode.baseUri()));
        }
    }

    private static String pages(URI decode) {
        try {
            final HttpResponse<String> r = HttpClient.newHttpClient().send(HttpRequest.newBuilder(decode.resolve("internal/status")).build(),
                HttpResponse.BodyHandlers.ofString());
            return TestClient.JSON.readTree(r.body()).path("pool").path("pages").asText();
        } catch (Exception e) {
            return "(no status: " + e + ")";
        }
    }
}
