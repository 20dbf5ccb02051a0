package io.kvpool.examples.server;

import com.fasterxml.jackson.databind.JsonNode;

import java.io.IOException;
import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.TimeUnit;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assertions.fail;

/**
 * One role of the example server in a child JVM of this test's class path ({@code KvServerMain serve --role …}),
 * its output in a log file; its internal endpoints for the test's checks. {@link #close()} kills it.
 */
final class RoleChild implements AutoCloseable {

    private static final Pattern BANNER = Pattern.compile("kvpool (\\w+) role on (\\S+) \\(KV (\\S+)\\)");
    private static final HttpClient HTTP = HttpClient.newBuilder().version(HttpClient.Version.HTTP_1_1)
        .connectTimeout(Duration.ofSeconds(2)).build();

    final String role;
    final Process process;
    final Path log;
    private URI uri;
    private String kvLink;

    private RoleChild(String role, Process process, Path log) {
        this.role = role;
        this.process = process;
        this.log = log;
    }

    /** Starts {@code serve --role <role> --port 0 <args>} with the prefill test hooks on. */
    static RoleChild start(Path dir, String role, String... args) throws IOException {
        return start(KvServerMain.class, dir, role, args);
    }

    /**
     * Starts {@code serve --role <role> --port 0 <args>} with the prefill test hooks on, through {@code main}
     * ({@link KvServerMain} or a test's main that prepares the process, then calls it).
     */
    static RoleChild start(Class<?> main, Path dir, String role, String... args) throws IOException {
        final List<String> cmd = new ArrayList<>();
        cmd.add(Path.of(System.getProperty("java.home"), "bin", "java").toString());
        cmd.addAll(List.of("-Xmx128m", "-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC", "--enable-native-access=ALL-UNNAMED",
            "-D" + RoleServer.TEST_HOOKS + "=true", "-cp", System.getProperty("java.class.path"), main.getName(),
            "serve", "--role", role, "--port", "0"));
        cmd.addAll(List.of(args));
        final Path log = Files.createTempFile(dir, role + "-", ".log");
        final Process p = new ProcessBuilder(cmd).redirectErrorStream(true).redirectOutput(log.toFile()).start();
        return new RoleChild(role, p, log);
    }

    /** Waits for the banner line and reads the role's URL and KV link from it. @return this */
    RoleChild awaitStarted(Duration timeout) throws InterruptedException {
        final long end = System.nanoTime() + timeout.toNanos();
        while (uri == null) {
            final Matcher m = BANNER.matcher(log());
            if (m.find()) {
                uri = URI.create(m.group(2));
                kvLink = m.group(3);
                return this;
            }
            if (!process.isAlive()) {
                fail(role + " child exited " + process.exitValue() + " before it started: " + log());
            }
            if (System.nanoTime() - end > 0) {
                fail(role + " child did not start within " + timeout.toMillis() + " ms: " + log());
            }
            Thread.sleep(20);
        }
        return this;
    }

    URI uri() {
        return uri;
    }

    /** @return the KV link from the banner, e.g. {@code ucx:127.0.0.1:40123} */
    String kvLink() {
        return kvLink;
    }

    String log() {
        try {
            return Files.readString(log);
        } catch (IOException e) {
            return "(no log: " + e + ")";
        }
    }

    JsonNode get(String path) throws IOException, InterruptedException {
        return send(HttpRequest.newBuilder(uri.resolve(path)).timeout(Duration.ofSeconds(5)).GET().build());
    }

    JsonNode post(String path, String body) throws IOException, InterruptedException {
        return send(HttpRequest.newBuilder(uri.resolve(path)).timeout(Duration.ofSeconds(5)).header("Content-Type", "application/json")
            .POST(HttpRequest.BodyPublishers.ofString(body)).build());
    }

    private JsonNode send(HttpRequest r) throws IOException, InterruptedException {
        final HttpResponse<String> res = HTTP.send(r, HttpResponse.BodyHandlers.ofString());
        assertTrue(res.statusCode() / 100 == 2, () -> role + " answered " + res.statusCode() + " to " + r.uri() + ": " + res.body());
        return TestClient.JSON.readTree(res.body());
    }

    /** @return the role process's own {@code /metrics} text */
    String metricsText() throws IOException, InterruptedException {
        return HTTP.send(HttpRequest.newBuilder(uri.resolve("metrics")).timeout(Duration.ofSeconds(5)).GET().build(),
            HttpResponse.BodyHandlers.ofString()).body();
    }

    /** @return the role's {@code /internal/status} */
    JsonNode status() throws IOException, InterruptedException {
        return get("internal/status");
    }

    /** @return one of the role's counters */
    long counter(String name) throws IOException, InterruptedException {
        return status().path("counters").path(name).asLong(-1);
    }

    /** @return one of its pool's counters ({@link io.kvpool.PoolSnapshot} component names) */
    long poolCounter(String name) throws IOException, InterruptedException {
        return status().path("pool").path("counters").path(name).asLong(-1);
    }

    /** @return its pool's page map, one state letter per page */
    String pages() throws IOException, InterruptedException {
        return status().path("pool").path("pages").asText();
    }

    /** Asserts the pool's accounting balances with every page free, nothing reserved, no sequence open. */
    void assertPoolClean() throws IOException, InterruptedException {
        final JsonNode a = get("internal/accounting");
        assertTrue(a.path("balanced").asBoolean(), () -> role + " pool does not balance: " + a);
        final JsonNode c = status().path("pool").path("counters");
        assertTrue(c.path("free").asLong() == c.path("capacity").asLong() && c.path("reserved").asLong() == 0
            && c.path("open_sequences").asLong() == 0 && c.path("open_reservations").asLong() == 0, () -> role + " pool not clean: " + c);
    }

    /** Stops the process as a rolling restart does (SIGTERM: a graceful stop) and waits until it is reaped. */
    void terminate() throws InterruptedException {
        process.destroy();
        assertTrue(process.waitFor(30, TimeUnit.SECONDS), role + " child did not stop within 30 s of SIGTERM");
    }

    /** Kills the process (SIGKILL) and waits until it is reaped. */
    void kill() throws InterruptedException {
        process.destroyForcibly();
        assertTrue(process.waitFor(10, TimeUnit.SECONDS), role + " child was not reaped within 10 s");
    }

    /** Kills the process if it still runs and waits (up to 10 s) for it to be reaped. */
    @Override
    public void close() {
        if (process.isAlive()) {
            process.destroyForcibly();
            try {
                process.waitFor(10, TimeUnit.SECONDS);
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
            }
        }
    }

    @Override
    public String toString() {
        return role + " child pid " + process.pid() + " at " + uri;
    }
}
