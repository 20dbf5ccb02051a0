package io.kvpool.examples.server;

import com.fasterxml.jackson.databind.JsonNode;
import io.kvpool.examples.server.config.Topology;
import io.kvpool.examples.server.remote.RemoteFixtures;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;

import java.io.IOException;
import java.io.InputStream;
import java.io.OutputStream;
import java.net.InetAddress;
import java.net.InetSocketAddress;
import java.net.ServerSocket;
import java.net.Socket;
import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.nio.file.Path;
import java.time.Duration;
import java.util.LinkedHashMap;
import java.util.Map;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * Edges of the multi-process mode ({@code --role router|prefill|decode}): a prefill call delayed past the router's
 * timeout is refused because its abort came first, decode refuses prompt sizes beyond an int rather than truncating
 * them, and a process of the wrong role at a role's URL is that role down. A prefill and a decode {@link RoleServer}
 * in this JVM, linked over shared memory as separate processes would be, and routers ({@link KvServer} over
 * {@link io.kvpool.examples.server.remote.RemoteRoles}) in front of them.
 */
@Timeout(value = 120, unit = TimeUnit.SECONDS)
class MultiProcessEdgesTest {

    private static final Duration WAIT = Duration.ofSeconds(15);
    /** The sender's descriptor timeout (= --transfer-timeout-ms): how long an offer no decode ever asks for is held. */
    private static final Duration TRANSFER_TIMEOUT = Duration.ofSeconds(20);

    @TempDir
    static Path dir;
    static InJvmRoleServers roles;
    static RoleServer decode;
    static RoleServer prefill;

    @BeforeAll
    static void start() throws Exception {
        roles = InJvmRoleServers.start(ServerTests.small().transferTimeout(TRANSFER_TIMEOUT).workDir(dir), WAIT);
        decode = roles.decode;
        prefill = roles.prefill;
    }

    @AfterAll
    static void stop() {
        if (roles != null) {
            roles.close();
        }
    }

    static JsonNode status(URI u) {
        return InJvmRoleServers.status(u);
    }

    static HttpResponse<String> send(URI u, String path, Object body) throws Exception {
        return InJvmRoleServers.send(u, path, body);
    }

    static boolean idle(URI u, long pages) {
        final JsonNode s = status(u);
        return s.path("active_transfers").asInt(-1) == 0 && s.path("pool").path("counters").path("free").asLong() == pages;
    }

    /**
     * Finding (a), end to end. The router's {@code POST /internal/prefill} is delayed on the network longer than
     * {@link RoleClient#CALL_TIMEOUT} (a partition that heals, a stalled process); the router answers 503 and
     * sends its paired abort on a fresh connection, which the prefill process handles first: unknown id, nothing
     * to do. Then the delayed prefill arrives. Admitted and offered, it would be an offer nobody will ever ask for (the
     * router never starts decode for that id), holding prefill's pages, a transfer and the id until the sender's
     * descriptor timeout (--transfer-timeout-ms). An abort that came first is remembered, and the late prefill
     * is refused before anything is admitted.
     */
    @Test
    void aPrefillDelayedPastTheRoutersTimeoutIsRefusedBecauseItsAbortCameFirst() throws Exception {
        assertTrue(idle(prefill.baseUri(), 64) && idle(decode.baseUri(), 128), "roles idle before");
        final long admittedBefore = status(prefill.baseUri()).path("counters").path("admitted").asLong();
        final long abortsBefore = status(prefill.baseUri()).path("counters").path("abort_requests").asLong();
        try (DelayingProxy proxy = new DelayingProxy(prefill.port(), RemoteFixtures.CALL_TIMEOUT.plusSeconds(1));
             KvServer router = KvServer.start(ServerTests.small().topology(Topology.DEFAULT.withRole(Topology.Role.ROUTER)
                 .withUrls(proxy.uri(), decode.baseUri())).build())) {
            final TestClient.Response r = new TestClient(router).complete("alice", "alice's secret: the owl flies at dawn", 2, false);
            assertEquals(503, r.status(), r::body);
            assertTrue(r.body().contains("is unreachable"), r::body);
            // the router's paired abort reached prefill before the delayed prefill did
            Await.until(() -> status(prefill.baseUri()).path("counters").path("abort_requests").asLong() == abortsBefore + 1, WAIT,
                () -> "the router's abort to reach prefill: " + status(prefill.baseUri()));
            assertTrue(proxy.delivered.await(15, TimeUnit.SECONDS), "the delayed prefill was delivered");
            Await.until(() -> status(prefill.baseUri()).path("counters").path("refused_after_abort").asLong() == 1, WAIT,
                () -> "the late prefill to be refused: " + status(prefill.baseUri()));
            assertEquals(admittedBefore, status(prefill.baseUri()).path("counters").path("admitted").asLong(), "nothing admitted for it");
            // an aborted request must not hold anything: give it far less than the descriptor timeout
            final long end = System.nanoTime() + TimeUnit.SECONDS.toNanos(3);
            while (!idle(prefill.baseUri(), 64) && System.nanoTime() - end < 0) {
                Thread.sleep(20);
            }
            final JsonNode s = status(prefill.baseUri());
            assertTrue(idle(prefill.baseUri(), 64), () -> "3 s after the router aborted it (and answered its client 503), prefill still"
                + " holds the late request's offer: active_transfers=" + s.path("active_transfers") + ", pool " + s.path("pool").path("counters")
                + " — orphaned until the descriptor timeout of " + TRANSFER_TIMEOUT.toSeconds() + " s");
        } finally {
            Await.until(() -> idle(prefill.baseUri(), 64), TRANSFER_TIMEOUT.plusSeconds(15), () -> "prefill idle again: " + status(prefill.baseUri()));
        }
    }

    /**
     * The decode endpoint must refuse prompt_tokens or max_new_tokens beyond int with 400: read as longs and cast to
     * int, such a number would silently be taken modulo 2^32 (2^32 + 5 prompt tokens would become 5).
     */
    @Test
    void decodeRefusesPromptTokensBeyondIntInsteadOfTruncatingThem() throws Exception {
        final Map<String, Object> body = new LinkedHashMap<>();
        body.put("request_id", 4242);
        body.put("tenant", "alice");
        body.put("prompt_tokens", (1L << 32) + 5);
        body.put("max_new_tokens", 2);
        final HttpResponse<InputStream> r = InJvmRoleServers.HTTP.send(HttpRequest.newBuilder(decode.baseUri().resolve("internal/decode"))
            .timeout(Duration.ofSeconds(10)).header("Content-Type", "application/json")
            .POST(HttpRequest.BodyPublishers.ofString(TestClient.JSON.writeValueAsString(body))).build(),
            HttpResponse.BodyHandlers.ofInputStream());
        try (InputStream in = r.body()) {
            final String first = new java.io.BufferedReader(new java.io.InputStreamReader(in, java.nio.charset.StandardCharsets.UTF_8)).readLine();
            final JsonNode admitted = status(decode.baseUri());
            assertEquals(400, r.statusCode(), () -> "prompt_tokens 4294967301 was accepted: " + r.statusCode() + " " + first
                + "; decode pool now " + admitted.path("pool").path("counters").path("reserved") + " reserved, "
                + admitted.path("pool").path("counters").path("receiving") + " receiving (pages for 5 + 2 tokens)");
        } finally {
            send(decode.baseUri(), "internal/abort", Map.of("request_id", 4242, "why", "test over"));
            Await.until(() -> idle(decode.baseUri(), 128), WAIT, () -> "decode idle: " + status(decode.baseUri()));
        }
    }

    /**
     * The router must not trust the role a status names: when a process of another role comes up at the prefill URL
     * (a process restarted with another role on that port), the merged /metrics must report prefill as down, not
     * decode twice (duplicated series, which Prometheus rejects) and no prefill at all. At startup such a URL stops the
     * router (PreflightTest); here the wrong process comes after.
     */
    @Test
    void mergedMetricsReportAProcessOfTheWrongRoleAtAUrlAsThatRoleDown() throws Exception {
        final int port = FixedPort.belowEphemeralRange();
        final URI prefillUrl = URI.create("http://127.0.0.1:" + port + "/");
        try (KvServer router = KvServer.start(ServerTests.small().topology(Topology.DEFAULT.withRole(Topology.Role.ROUTER)
            .withUrls(prefillUrl, decode.baseUri())).build());
             RoleServer wrong = RoleServer.start(ServerTests.small().role(Topology.Role.DECODE)
                 .workDir(java.nio.file.Files.createTempDirectory(dir, "wrong")).port(port).build())) {
            final String[] text = {""};
            Await.until(() -> {
                text[0] = router.metricsText();
                return text[0].contains("kvpool_role_up{role=\"prefill\"}");
            }, WAIT, () -> "the prefill series: " + text[0]);
            final long upLines = text[0].lines().filter(l -> l.startsWith("kvpool_role_up{role=\"decode\"}")).count();
            assertTrue(Metrics.parse(text[0]).get("kvpool_role_up{role=\"prefill\"}") == 0 && upLines == 1,
                () -> "expected prefill down and decode once; got " + upLines + " decode series and: "
                    + text[0].lines().filter(l -> l.startsWith("kvpool_role_up")).toList());
        }
    }

    /**
     * A TCP proxy to a local port: the first connection's bytes are held for {@code delay} and then sent on a new
     * connection (the client has given up by then); every later connection passes straight through.
     */
    static final class DelayingProxy implements AutoCloseable {
        final CountDownLatch delivered = new CountDownLatch(1);
        private final ServerSocket server;
        private final int target;
        private final Duration delay;
        private final AtomicInteger connections = new AtomicInteger();

        DelayingProxy(int target, Duration delay) throws IOException {
            this.target = target;
            this.delay = delay;
            this.server = new ServerSocket(0, 50, InetAddress.getLoopbackAddress());
            Thread.ofVirtual().start(this::acceptLoop);
        }

        URI uri() {
            return URI.create("http://127.0.0.1:" + server.getLocalPort() + "/");
        }

        private void acceptLoop() {
            try {
                while (true) {
                    final Socket c = server.accept();
                    Thread.ofVirtual().start(() -> handle(c));
                }
            } catch (IOException closed) {
                // done
            }
        }

        /** Holds the first connection that carries a prefill call (the router's status probes pass). */
        private void handle(Socket c) {
            try (c; Socket s = new Socket()) {
                final byte[] first = new byte[8192];
                final int got = c.getInputStream().read(first);
                if (got <= 0) {
                    return;
                }
                final boolean hold = new String(first, 0, got, java.nio.charset.StandardCharsets.ISO_8859_1).startsWith("POST /internal/prefill")
                    && connections.incrementAndGet() == 1;
                if (hold) {
                    final java.io.ByteArrayOutputStream held = new java.io.ByteArrayOutputStream();
                    held.write(first, 0, got);
                    final InputStream in = c.getInputStream();
                    c.setSoTimeout(500);
                    final byte[] buf = new byte[8192];
                    try {
                        for (int k; (k = in.read(buf)) > 0; ) {
                            held.write(buf, 0, k);
                        }
                    } catch (java.net.SocketTimeoutException whole) {
                        // the request is all here
                    }
                    Thread.sleep(delay.toMillis());
                    s.connect(new InetSocketAddress(InetAddress.getLoopbackAddress(), target));
                    s.getOutputStream().write(held.toByteArray());
                    s.getOutputStream().flush();
                    delivered.countDown();
                    s.getInputStream().readAllBytes(); // the answer nobody waits for
                    return;
                }
                s.connect(new InetSocketAddress(InetAddress.getLoopbackAddress(), target));
                s.getOutputStream().write(first, 0, got);
                s.getOutputStream().flush();
                final Thread up = Thread.ofVirtual().start(() -> pipe(c, s));
                pipe(s, c);
                up.join();
            } catch (IOException | InterruptedException ignored) {
                // a side closed
            }
        }

        private static void pipe(Socket from, Socket to) {
            try {
                final InputStream in = from.getInputStream();
                final OutputStream out = to.getOutputStream();
                final byte[] buf = new byte[8192];
                for (int k; (k = in.read(buf)) > 0; ) {
                    out.write(buf, 0, k);
                    out.flush();
                }
                to.shutdownOutput();
            } catch (IOException ignored) {
                // a side closed
            }
        }

        @Override
        public void close() throws IOException {
            server.close();
        }
    }
}
