package io.kvpool.examples.server;

import com.fasterxml.jackson.databind.JsonNode;
import io.kvpool.examples.server.config.ServerConfig;
import io.kvpool.examples.server.config.Topology;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

import java.io.IOException;
import java.net.Socket;
import java.net.URI;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Collections;
import java.util.List;
import java.util.Map;
import java.util.SplittableRandom;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * Churn on small pools: many clients at once, each mixing ordinary requests, over-context ones, large ones that
 * find the pools full, and clients that vanish at a random moment (before admission, while prefill computes,
 * mid-transfer, mid-stream). Once it settles: both pools idle, every request counted in exactly one outcome, no
 * 500, no connection or handler left, no worker thread lost, and every completion holds its own tenant's KV only.
 */
class ChurnTest {

    static final int CLIENTS = 16;
    static final int REQUESTS = Integer.getInteger("kvpool.server.churn.requests", 30);

    @TempDir
    Path dir;

    /** Small pools: a few large requests fill them, so that refusals and waits mix with the rest. */
    static ServerConfig.Builder tight() {
        return ServerTests.small().prefillPages(20).decodePages(24).contextTokens(256).tokenDelay(Duration.ofMillis(1));
    }

    @Test
    void churnOfVanishingAndOverCapacityClientsLeavesBothPoolsIdleAndEveryCounterBalanced() throws Exception {
        final List<String> threadsBefore = platformThreads();
        try (KvServer server = KvServer.start(tight().build())) {
            final int threadsStarted = platformThreads().size();
            final Tally t = churn(server, CLIENTS, REQUESTS);
            ServerTests.assertBalanced(server);
            assertRouterBalanced(server, t);
            for (var role : server.roleStatus()) {
                assertEquals(0, role.counters().get("duty_failures"), () -> role.role() + ": " + role.counters());
            }
            // the front's event loops start with their first connection: at most 2 more than at the start
            Await.until(() -> platformThreads().size() <= threadsStarted + 2, Duration.ofSeconds(10),
                () -> "platform threads back near " + threadsStarted + ": " + platformThreads());
        }
        Await.until(() -> threadsBefore.containsAll(platformThreads()), Duration.ofSeconds(10),
            () -> "platform threads back to " + threadsBefore + " after close: " + platformThreads());
    }

    @Test
    void churnThroughARouterOfRoleServersLeavesBothRolePoolsIdleAndEveryCounterBalanced() throws Exception {
        try (InJvmRoleServers roles = InJvmRoleServers.start(tight().workDir(dir), Duration.ofSeconds(30));
             KvServer router = router(roles.prefill.baseUri(), roles.decode.baseUri())) {
            final Tally t = churn(router, CLIENTS, REQUESTS);
            assertTrue(router.awaitQuiescence(Duration.ofSeconds(10)), () -> "no quiescence: " + router.roleStatus());
            assertRouterBalanced(router, t);
            for (URI role : List.of(roles.prefill.baseUri(), roles.decode.baseUri())) {
                assertRoleIdle(role, Duration.ofSeconds(10));
            }
        }
    }

    @Test
    void aRouterClosedUnderChurnAnswersEveryClientAndLeavesBothRolePoolsIdle() throws Exception {
        try (InJvmRoleServers roles = InJvmRoleServers.start(tight().workDir(dir), Duration.ofSeconds(30))) {
            final KvServer router = router(roles.prefill.baseUri(), roles.decode.baseUri());
            final java.util.concurrent.CompletableFuture<Object> churned = new java.util.concurrent.CompletableFuture<>();
            Thread.ofPlatform().start(() -> {
                try {
                    churned.complete(churn(router, CLIENTS, 1000, Mode.CLOSING));
                } catch (Throwable e) {
                    churned.complete(e);
                }
            });
            Thread.sleep(1500);
            router.close();
            final Object r = churned.get(40, TimeUnit.SECONDS); // every client had its answer (or its connection closed)
            if (r instanceof Throwable e) {
                throw new AssertionError(e);
            }
            final Map<String, Long> counters = router.counters();
            assertEquals(0, counters.get("in_flight"), counters::toString);
            assertEquals(counters.get("requests"), counters.get("completed") + counters.get("aborted") + counters.get("rejected")
                + counters.get("failed") + counters.get("timed_out"), counters::toString);
            final long t0 = System.nanoTime();
            for (URI role : List.of(roles.prefill.baseUri(), roles.decode.baseUri())) {
                assertRoleIdle(role, Duration.ofSeconds(4)); // less than the transfer timeout (5 s): nothing waits for it
            }
            System.out.println("churn then close: " + r + "; " + counters + "; idle after " + (System.nanoTime() - t0) / 1_000_000 + " ms");
        }
    }

    @Test
    void aServerClosedUnderChurnAnswersEveryClientCountsEveryRequestOnceAndStopsItsThreads() throws Exception {
        final List<String> threadsBefore = platformThreads();
        final KvServer server = KvServer.start(tight().build());
        final java.util.concurrent.CompletableFuture<Object> churned = new java.util.concurrent.CompletableFuture<>();
        Thread.ofPlatform().start(() -> {
            try {
                churned.complete(churn(server, CLIENTS, 1000, Mode.CLOSING));
            } catch (Throwable e) {
                churned.complete(e);
            }
        });
        Thread.sleep(1500);
        server.close();
        final Object r = churned.get(40, TimeUnit.SECONDS); // every client had its answer (or its connection closed)
        if (r instanceof Throwable e) {
            throw new AssertionError(e);
        }
        final Map<String, Long> counters = server.counters();
        assertEquals(0, counters.get("in_flight"), counters::toString);
        assertEquals(counters.get("requests"), counters.get("completed") + counters.get("aborted") + counters.get("rejected")
            + counters.get("failed") + counters.get("timed_out"), counters::toString);
        Await.until(() -> threadsBefore.containsAll(platformThreads()), Duration.ofSeconds(10),
            () -> "platform threads back to " + threadsBefore + " after close: " + platformThreads());
        System.out.println("churn then server close: " + r + "; " + counters);
    }

    @Test
    void aDecodeRoleRestartedUnderChurnLeavesThePrefillPoolAndTheNewDecodePoolIdle() throws Exception {
        final int decodePort = FixedPort.belowEphemeralRange();
        final ServerConfig.Builder decodeCfg = tight().workDir(dir).role(Topology.Role.DECODE).port(decodePort);
        RoleServer decode = RoleServer.start(decodeCfg.build());
        try (RoleServer prefill = RoleServer.start(tight().workDir(dir).role(Topology.Role.PREFILL).build())) {
            Await.until(() -> InJvmRoleServers.status(prefill.baseUri()).path("ready").asBoolean(), Duration.ofSeconds(30),
                () -> "the link to come up");
            try (KvServer router = router(prefill.baseUri(), decode.baseUri())) {
                final java.util.concurrent.CompletableFuture<Object> churned = new java.util.concurrent.CompletableFuture<>();
                Thread.ofPlatform().start(() -> {
                    try {
                        churned.complete(churn(router, CLIENTS, 40, Mode.FAULTS));
                    } catch (Throwable e) {
                        churned.complete(e);
                    }
                });
                Thread.sleep(1000);
                decode.close();
                Thread.sleep(200);
                decode = RoleServer.start(decodeCfg.build());
                final Object r = churned.get(60, TimeUnit.SECONDS);
                if (r instanceof Throwable e) {
                    throw new AssertionError(e);
                }
                assertTrue(router.awaitQuiescence(Duration.ofSeconds(10)), () -> "no quiescence: " + router.roleStatus());
                final Map<String, Long> counters = router.counters();
                assertEquals(0, counters.get("in_flight"), counters::toString);
                assertEquals(counters.get("requests"), counters.get("completed") + counters.get("aborted") + counters.get("rejected")
                    + counters.get("failed") + counters.get("timed_out"), counters::toString);
                assertRoleIdle(prefill.baseUri(), Duration.ofSeconds(10));
                assertRoleIdle(decode.baseUri(), Duration.ofSeconds(10));
                System.out.println("churn with a decode restart: " + r + "; " + counters + "; roles "
                    + router.roleStatus().stream().map(s -> s.counters()).toList());
            }
        } finally {
            decode.close();
        }
    }

    static KvServer router(URI prefill, URI decode) {
        return KvServer.start(tight().topology(Topology.DEFAULT.withRole(Topology.Role.ROUTER).withUrls(prefill, decode)).build());
    }

    /** Waits until the role's pool is idle: balanced, every page free, nothing reserved, no sequence or reservation open. */
    static void assertRoleIdle(URI role, Duration wait) throws InterruptedException {
        Await.until(() -> {
            final JsonNode c = InJvmRoleServers.status(role).path("pool").path("counters");
            return c.path("free").asLong(-1) == c.path("capacity").asLong() && c.path("reserved").asLong() == 0
                && c.path("open_sequences").asLong() == 0 && c.path("open_reservations").asLong() == 0;
        }, wait, () -> role + " pool not idle: " + InJvmRoleServers.status(role).path("pool").path("counters")
            + " " + InJvmRoleServers.status(role).path("counters"));
        try {
            final var a = InJvmRoleServers.send(role, "internal/accounting", null);
            assertEquals(200, a.statusCode(), a::body);
        } catch (Exception e) {
            throw new AssertionError(e);
        }
    }

    /** What the clients saw. */
    record Tally(int completed, int abandoned, int refused) {
    }

    /** Every request the router counted has exactly one outcome; nothing failed; no 500; the front holds no connection. */
    static void assertRouterBalanced(KvServer server, Tally t) throws InterruptedException {
        final Map<String, Long> counters = server.counters();
        assertEquals(0, counters.get("in_flight"), counters::toString);
        assertEquals(counters.get("requests"), counters.get("completed") + counters.get("aborted") + counters.get("rejected")
            + counters.get("failed") + counters.get("timed_out"), counters::toString);
        assertTrue(counters.get("completed") >= t.completed(), counters::toString);
        assertEquals(0, counters.get("failed") + counters.get("timed_out"), counters::toString);
        Await.until(() -> {
            final Map<String, Double> m = Metrics.parse(server.metricsText());
            return m.get("kvpool_http_connections_open") == 0.0 && m.get("kvpool_http_calls_in_flight") == 0.0;
        }, Duration.ofSeconds(10), () -> "connections and calls to end: " + server.metricsText().lines()
            .filter(l -> l.startsWith("kvpool_http")).toList());
        final String text = server.metricsText();
        assertTrue(text.lines().noneMatch(l -> l.startsWith("kvpool_http_errors_total{status=\"5")), text);
        System.out.println("churn: " + t + "; " + counters + "; roles "
            + server.roleStatus().stream().map(s -> s.counters()).toList());
    }

    /**
     * {@code clients} tenants at once, {@code requests} each: 40% vanish at a random moment, 10% ask for more than the
     * context, 10% for 13 of the prefill pool's 20 pages, the rest are ordinary. Completions must be isolated; a
     * refusal is 429 or 503 (400 for the over-context ones). Closes the client's pooled connections at the end.
     */
    static Tally churn(KvServer server, int clients, int requests) throws Exception {
        return churn(server, clients, requests, Mode.STEADY);
    }

    /** What the churn takes for an answer. */
    enum Mode {
        /** 200, or a refusal to retry (429, 503; 400 for a request over the context) */
        STEADY,
        /** the server closes under it: as STEADY, and a client stops at its first {@code server_closing} or closed connection */
        CLOSING,
        /** a role goes away under it: any answer but a 500 (a completion must still be isolated, or end in an error event) */
        FAULTS
    }

    /** {@link #churn(KvServer, int, int)}, taking what {@code mode} says for an answer. */
    static Tally churn(KvServer server, int clients, int requests, Mode mode) throws Exception {
        final boolean closing = mode == Mode.CLOSING;
        final TestClient client = new TestClient(server);
        final List<String> violations = Collections.synchronizedList(new ArrayList<>());
        final AtomicInteger completed = new AtomicInteger(), abandoned = new AtomicInteger(), refused = new AtomicInteger();
        try (ExecutorService pool = Executors.newFixedThreadPool(clients)) {
            final List<Future<?>> fs = new ArrayList<>();
            for (int c = 0; c < clients; c++) {
                final String tenant = "churn-" + c;
                final SplittableRandom rnd = new SplittableRandom(7000 + c);
                final String letter = String.valueOf((char) ('a' + c));
                fs.add(pool.submit(() -> {
                    for (int i = 0; i < requests; i++) {
                        final int what = rnd.nextInt(10);
                        final boolean stream = rnd.nextBoolean();
                        if (what >= 6) {
                            abandon(client, tenant, StressTest.prompt(tenant, i, rnd), 2 + rnd.nextInt(30), stream, rnd.nextInt(5), rnd);
                            abandoned.incrementAndGet();
                            continue;
                        }
                        final String prompt = what == 4 ? BackpressureTest.words(letter, 250) // over the context
                            : what == 5 ? BackpressureTest.words(letter, 200) // 13 of 20 prefill pages
                            : StressTest.prompt(tenant, i, rnd);
                        final int max = what == 4 ? 20 : rnd.nextInt(16);
                        final TestClient.Response r;
                        try {
                            r = client.complete(tenant, prompt, max, stream);
                        } catch (IOException e) {
                            if (closing && !(e instanceof java.net.http.HttpTimeoutException)) {
                                return null; // the server closed the connection
                            }
                            throw e;
                        }
                        if (closing && (r.status() == 503 || r.status() == 200 && stream) && r.body().contains("\"server_closing\"")) {
                            return null;
                        }
                        if (mode == Mode.FAULTS && r.body().contains("\"error\"") && !r.body().contains("internal_error")) {
                            refused.incrementAndGet(); // a failure the role's loss explains
                            Thread.sleep(5 + rnd.nextInt(20));
                            continue;
                        }
                        if (r.status() == 200) {
                            if (stream && r.body().contains("\"error\"")) {
                                violations.add(tenant + " request " + i + ": stream ended in an error: " + r.body());
                            } else {
                                violations.addAll(Isolation.violations(tenant, prompt, max, stream ? CompletionApiTest.streamed(r) : r.json()));
                            }
                            completed.incrementAndGet();
                        } else if (r.status() == 429 || r.status() == 503 || what == 4 && r.status() == 400) {
                            refused.incrementAndGet();
                            Thread.sleep(r.status() == 400 ? 0 : 5 + rnd.nextInt(20)); // a client that backs off a little
                        } else {
                            violations.add(tenant + " request " + i + ": " + r.status() + " " + r.body());
                        }
                    }
                    return null;
                }));
            }
            for (Future<?> f : fs) {
                f.get(120, TimeUnit.SECONDS);
            }
        } finally {
            client.closeConnections(); // its pooled keep-alive connections
        }
        assertEquals(List.of(), violations);
        return new Tally(completed.get(), abandoned.get(), refused.get());
    }

    /** @return the names of the live platform threads, less the JDK's own (virtual-thread scheduler, cleaners) */
    static List<String> platformThreads() {
        return Thread.getAllStackTraces().keySet().stream().filter(t -> !t.isVirtual()).map(Thread::getName)
            .filter(n -> !n.startsWith("ForkJoinPool-") && !n.startsWith("VirtualThread-") && !n.startsWith("Cleaner-")
                && !n.equals("Common-Cleaner"))
            .sorted().toList();
    }

    /**
     * Sends a request on a raw connection and vanishes: at once (0), after up to 10 ms (1: prefill or the transfer), once
     * admitted (2), after the first token (3), or after up to 40 ms (4). A non-streamed request vanishes after a random wait.
     */
    static void abandon(TestClient client, String tenant, String prompt, int max, boolean stream, int when, SplittableRandom rnd)
        throws InterruptedException {
        try (Socket s = client.openRaw(tenant, prompt, max, stream)) {
            if (!stream || when == 1 || when == 4) {
                Thread.sleep(rnd.nextInt(when == 4 ? 40 : 10));
            } else if (when >= 2) {
                TestClient.readUntil(s, when == 2 ? "admitted" : "\"text\":", "\"error\"");
            }
        } catch (IOException e) {
            // the server finished first: fine
        }
    }
}
