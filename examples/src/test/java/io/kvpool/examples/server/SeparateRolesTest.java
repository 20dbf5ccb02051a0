package io.kvpool.examples.server;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import io.kvpool.examples.ui.LiveState;
import io.kvpool.examples.ui.PoolView;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.MethodOrderer;
import org.junit.jupiter.api.Order;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.TestMethodOrder;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;

import java.io.IOException;
import java.net.Socket;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * The three-process server over shared memory: the decode and prefill roles each in a child JVM
 * ({@code KvServerMain serve --role decode|prefill}, one {@code --work-dir}), the router in this JVM over
 * {@link io.kvpool.examples.server.remote.RemoteRoles}. Completions for two tenants, paired aborts across processes for streamed and
 * non-streamed clients that leave, merged metrics and live state — and the prefill process killed mid-transfer
 * (decode's pages go through QUARANTINED and are freed, the router answers 503), then restarted on the same
 * port, its link dropped while it lives (decode's pages stay QUARANTINED until the process is gone); last, the
 * decode process killed mid-generation (both responses end with a clear {@code role_lost} error).
 * The tests run in order: the last three kill a role process.
 */
@TestMethodOrder(MethodOrderer.OrderAnnotation.class)
@Timeout(value = 60, unit = TimeUnit.SECONDS)
class SeparateRolesTest {

    private static final Duration WAIT = Duration.ofSeconds(15);

    @TempDir
    static Path dir;
    static ThreeProcesses roles;
    static final ExecutorService pool = Executors.newVirtualThreadPerTaskExecutor();

    /** The flags both role processes get (a long transfer timeout: held transfers end only when a test ends them). */
    static String[] roleArgs(String... more) {
        final List<String> a = new ArrayList<>(List.of("--work-dir", dir.toString(), "--context", "512", "--prefill-pages", "64",
            "--decode-pages", "128", "--token-delay-ms", "10", "--heartbeat-ms", "20", "--transfer-timeout-ms", "30000",
            "--reconnect-ms", "50"));
        a.addAll(List.of(more));
        return a.toArray(new String[0]);
    }

    @BeforeAll
    static void start() throws Exception {
        final int prefillPort = FixedPort.belowEphemeralRange(); // fixed, so that a restarted prefill process is where the router looks
        // prefill connects (and reconnects) to decode's socket on its own
        roles = ThreeProcesses.start(dir, roleArgs(), roleArgs("--port", Integer.toString(prefillPort)), WAIT);
        assertEquals("shm:" + dir.resolve("transfer.sock"), roles.decode.kvLink());
        awaitLinked();
    }

    @AfterAll
    static void stop() {
        pool.shutdownNow();
        if (roles != null) {
            roles.close();
        }
    }

    static void awaitLinked() throws InterruptedException {
        roles.awaitLinked(WAIT, "the prefill→decode link to come up");
    }

    interface Check {
        boolean get() throws Exception;
    }

    static boolean call(Check c) {
        try {
            return c.get();
        } catch (Exception e) {
            return false;
        }
    }

    static void assertClean() throws Exception {
        roles.assertClean(WAIT);
    }

    static String show(RoleChild c) {
        try {
            return c.status().toString();
        } catch (Exception e) {
            return c + ": " + e;
        }
    }

    /**
     * The quarantine rule seen from outside: while a sender whose link was lost still lives (it still maps the
     * pool file and may write), every page of its failed transfer must stay QUARANTINED.
     *
     * @return what breaks it (empty if the pages are held)
     */
    static List<String> quarantineViolations(String decodePages, int transferPages, boolean senderAlive) {
        final List<String> v = new ArrayList<>();
        if (!senderAlive) {
            v.add("the sender is gone: nothing left to check");
        } else if (count(decodePages, 'Q') != transferPages) {
            v.add(count(decodePages, 'Q') + " of the transfer's " + transferPages + " pages are QUARANTINED while the sender lives: "
                + decodePages);
        }
        return v;
    }

    static long count(String page, char state) {
        return page.chars().filter(c -> c == state).count();
    }

    /** A streamed response as one JSON object like a non-streamed one: the final chunk's kvpool section and the joined text. */
    static JsonNode joined(TestClient.Response r) throws IOException {
        final List<String> events = r.events();
        assertEquals("[DONE]", events.getLast(), r::body);
        final StringBuilder text = new StringBuilder();
        JsonNode last = null;
        for (String e : events.subList(0, events.size() - 1)) {
            last = TestClient.JSON.readTree(e);
            text.append(last.path("choices").path(0).path("text").asText());
        }
        final ObjectNode o = TestClient.JSON.createObjectNode();
        o.set("kvpool", last.get("kvpool"));
        o.putArray("choices").addObject().put("text", text.toString());
        return o;
    }

    @Test
    @Order(1)
    void twoTenantsGetTheirOwnCompletionsPlainAndStreamedAcrossThreeProcesses() throws Exception {
        final List<Future<List<String>>> results = new ArrayList<>();
        for (int i = 0; i < 8; i++) {
            final String tenant = i % 2 == 0 ? "alice" : "bob";
            final String prompt = tenant + "'s secret " + i + ": the owl flies at dawn";
            final boolean stream = i % 4 >= 2;
            results.add(pool.submit(() -> {
                final TestClient.Response r = roles.client.complete(tenant, prompt, 6, stream);
                assertEquals(200, r.status(), r::body);
                return Isolation.violations(tenant, prompt, 6, stream ? joined(r) : r.json());
            }));
        }
        for (Future<List<String>> f : results) {
            assertEquals(List.of(), f.get(30, TimeUnit.SECONDS));
        }
        assertEquals(8, roles.router.counters().get("completed"));
        assertClean();
        assertEquals(8, roles.decode.counter("transfers_committed"));
        assertEquals(8, roles.prefill.counter("transfers_completed"));
    }

    @Test
    @Order(2)
    void aClientGoneMidStreamAbortsBothRoleProcesses() throws Exception {
        final long[] aborts0 = roles.abortRequests();
        final long g0 = roles.decode.counter("generated_tokens");
        final long aborted = roles.router.counters().get("aborted");
        try (Socket s = roles.client.openRaw("carol", "tell me a long story", 200, true)) {
            TestClient.readUntil(s, "\"text\":"); // the first token crossed decode → router → client
        }
        roles.awaitAbortedInBoth(aborts0, WAIT);
        assertClean();
        assertEquals(aborted + 1, roles.router.counters().get("aborted"));
        final long generated = roles.decode.counter("generated_tokens") - g0;
        assertTrue(generated >= 1 && generated < 200, () -> generated + " tokens generated for a client that left");
    }

    @Test
    @Order(3)
    void aNonStreamedClientGoneMidGenerationAbortsBothRoleProcesses() throws Exception {
        final long[] aborts0 = roles.abortRequests();
        final long g0 = roles.decode.counter("generated_tokens");
        final long completed = roles.router.counters().get("completed");
        try (Socket s = roles.client.openRaw("dave", "a non-streamed story", 200, false)) {
            // nothing is written before the completion: wait for decode to generate, then leave
            Await.until(() -> call(() -> roles.decode.counter("generated_tokens") > g0 + 2), WAIT, () -> show(roles.decode));
        }
        roles.awaitAbortedInBoth(aborts0, WAIT);
        assertClean();
        assertEquals(completed, roles.router.counters().get("completed"));
        final long generated = roles.decode.counter("generated_tokens") - g0;
        assertTrue(generated < 200, () -> generated + " tokens generated for a client that left");
    }

    @Test
    @Order(4)
    void metricsAndLiveStateMergeBothRoleProcesses() throws Exception {
        final TestClient.Response r = roles.client.get("/metrics");
        assertEquals(200, r.status(), r::body);
        assertEquals(List.of(), PromFormat.violations(r.body()), r::body); // the router's registry, fed by both processes' statuses
        final String decodeText = roles.decode.metricsText();
        assertEquals(List.of(), PromFormat.violations(decodeText), "a role process's own /metrics");
        final Map<String, Double> m = Metrics.parse(r.body());
        assertEquals(1.0, m.get("kvpool_role_up{role=\"prefill\"}"), r::body);
        assertEquals(1.0, m.get("kvpool_role_up{role=\"decode\"}"), r::body);
        assertEquals(64.0, m.get("kvpool_pool_capacity_pages{role=\"prefill\"}"), r::body);
        assertEquals(128.0, m.get("kvpool_pool_pages{role=\"decode\",state=\"free\"}"), r::body);
        assertEquals(roles.decode.counter("transfers_committed"),
            m.get("kvpool_role_events_total{event=\"transfers_committed\",role=\"decode\"}").longValue(), r::body);
        assertEquals(1.0, m.get("kvpool_role_link_up{role=\"prefill\"}"), r::body);
        assertEquals(roles.router.counters().get("completed"), m.get("kvpool_requests_completed_total").longValue());
        assertTrue(m.get("jvm_threads_live_threads") > 0, "the router's own JVM");
        // the decode process's own registry: its engine, its pool and its JVM, every series tagged role="decode"
        final Map<String, Double> d = Metrics.parse(decodeText);
        assertEquals(roles.decode.counter("transfers_committed"), d.get("kvpool_transfer_committed_total{role=\"decode\"}").longValue(), decodeText);
        assertEquals(128.0, d.get("kvpool_pool_pages{role=\"decode\",state=\"free\"}"), decodeText);
        assertTrue(d.get("process_uptime_seconds{role=\"decode\"}") > 0, decodeText);
        assertTrue(d.keySet().stream().allMatch(k -> k.contains("role=\"decode\"")), decodeText);

        final LiveState s = roles.router.liveState(); // what GET /api/state serves
        assertEquals(List.of("prefill", "decode"), s.pools().stream().map(PoolView::role).toList());
        assertEquals(64, s.pools().get(0).pages().length());
        assertEquals("F".repeat(128), s.pools().get(1).pages());
        assertEquals(roles.decode.counter("transfers_committed"), s.counters().get("decode_transfers_committed"));
        final TestClient.Response api = roles.client.get("/api/state");
        assertEquals(200, api.status(), api::body); // the live page's JSON, merged from both role processes
        final LiveState served = io.kvpool.examples.ui.StateJson.read(api.body().getBytes(java.nio.charset.StandardCharsets.UTF_8));
        assertEquals(List.of("prefill", "decode"), served.pools().stream().map(PoolView::role).toList(), api::body);
        assertEquals("F".repeat(128), served.pools().get(1).pages(), api::body);
    }

    @Test
    @Order(5)
    void killingThePrefillProcessMidTransferQuarantinesDecodesPagesUntilItIsGoneAndTheRouterAnswers503() throws Exception {
        final long released0 = roles.decode.counter("quarantine_releases"), events0 = roles.decode.poolCounter("quarantine_events");
        roles.prefill.post("internal/test/gate", "{\"closed\":true}"); // prefill's page writes are held: the transfer stays in flight
        final Future<TestClient.Response> inFlight = pool.submit(() -> roles.client.complete("erin", BackpressureTest.words("e", 100), 4, false));
        Await.until(() -> call(() -> count(roles.decode.pages(), 'R') == 7 && roles.prefill.post("internal/test/gate", "{}").path("held").asLong() > 0),
            WAIT, () -> "the 7-page transfer to be in flight: " + roles.router.roleStatus());

        roles.prefill.kill();
        final TestClient.Response r = inFlight.get(20, TimeUnit.SECONDS);
        assertEquals(503, r.status(), r::body);
        assertEquals("peer_lost", r.error().path("reason").asText(), r::body);
        assertTrue(r.error().path("message").asText().contains("KV transfer of request"), r::body);
        Await.until(() -> call(() -> roles.decode.counter("quarantine_releases") == released0 + 1), WAIT,
            () -> "decode to release the quarantine once the prefill process is gone: " + show(roles.decode));
        assertEquals(events0 + 7, roles.decode.poolCounter("quarantine_events"), "every page of the transfer went through QUARANTINED");
        roles.decode.assertPoolClean();

        final TestClient.Response next = roles.client.complete("erin", "anyone there?", 2, false);
        assertEquals(503, next.status(), next::body);
        assertEquals("1", next.retryAfter());
        assertTrue(next.error().path("message").asText().contains("prefill role at " + roles.prefill.uri() + " is unreachable"), next::body);
        final Map<String, Double> m = Metrics.parse(roles.router.metricsText());
        assertEquals(0.0, m.get("kvpool_role_up{role=\"prefill\"}"));
        assertEquals(1.0, m.get("kvpool_role_up{role=\"decode\"}"));
        final String decodeText = roles.decode.metricsText(); // the engine's meters are on the role process's own /metrics
        assertTrue(Metrics.parse(decodeText).get("kvpool_transfer_deferred_releases_total{outcome=\"error\",role=\"decode\"}") >= 1, decodeText);
    }

    @Test
    @Order(6)
    void aLinkLostToALivePrefillProcessKeepsDecodesPagesQuarantinedUntilTheProcessIsGone() throws Exception {
        roles.restartPrefill(WAIT); // restarted on the same port: the router finds it again
        awaitLinked();
        final TestClient.Response ok = roles.client.complete("frank", "back again", 3, false);
        assertEquals(200, ok.status(), ok::body);
        assertEquals(List.of(), Isolation.violations("frank", "back again", 3, ok.json()));

        final long released0 = roles.decode.counter("quarantine_releases");
        roles.prefill.post("internal/test/gate", "{\"closed\":true}");
        final Future<TestClient.Response> inFlight = pool.submit(() -> roles.client.complete("frank", BackpressureTest.words("f", 100), 4, false));
        Await.until(() -> call(() -> count(roles.decode.pages(), 'R') == 7), WAIT, () -> "the transfer to be in flight: " + roles.router.roleStatus());

        roles.prefill.post("internal/test/gate", "{\"drop\":true}"); // the socket closes; the process, which maps the pool file, lives on
        Await.until(() -> call(() -> count(roles.decode.pages(), 'Q') == 7), WAIT, () -> "decode to quarantine the pages: " + show(roles.decode));
        final TestClient.Response r = inFlight.get(20, TimeUnit.SECONDS);
        assertEquals(503, r.status(), r::body);
        assertEquals("peer_lost", r.error().path("reason").asText(), r::body);
        Thread.sleep(300); // the prefill process lives (timers: SeparateRolesControlTest waits out ten 200 ms deadlines)
        assertEquals(List.of(), quarantineViolations(roles.decode.pages(), 7, roles.prefill.process.isAlive()), roles.prefill::log);
        assertEquals(released0, roles.decode.counter("quarantine_releases"));

        roles.prefill.kill();
        Await.until(() -> call(() -> roles.decode.counter("quarantine_releases") == released0 + 1), WAIT,
            () -> "decode to release the quarantine once the prefill process is gone: " + show(roles.decode));
        roles.decode.assertPoolClean();
    }

    @Test
    @Order(7)
    void aDecodeProcessLostMidGenerationEndsBothResponsesWithAClearError() throws Exception {
        roles.restartPrefill(WAIT);
        awaitLinked();
        final long g0 = roles.decode.counter("generated_tokens");
        final long failed0 = roles.router.counters().get("failed");
        try (Socket plain = roles.client.openRaw("gina", "a long non-streamed story", 300, false);
             Socket stream = roles.client.openRaw("hank", "a long streamed story", 300, true)) {
            TestClient.readUntil(stream, "\"text\":");
            Await.until(() -> call(() -> roles.decode.counter("generated_tokens") > g0 + 20), WAIT, () -> show(roles.decode));
            roles.decode.kill();
            // nothing was sent to the non-streamed client yet: its answer is the error, with its own status
            final String p = TestClient.readUntil(plain, "role_lost");
            assertTrue(p.startsWith("HTTP/1.1 502"), p);
            assertTrue(p.contains("\"reason\":\"role_lost\"") && p.contains("decode role at " + roles.decode.uri()), p);
            final String s = TestClient.readUntil(stream, "[DONE]"); // a stream ends with an error event
            assertTrue(s.contains("\"reason\":\"role_lost\""), s);
        }
        final TestClient.Response next = roles.client.complete("gina", "anyone there?", 2, false);
        assertEquals(503, next.status(), next::body);
        assertTrue(next.error().path("message").asText().contains("decode role at " + roles.decode.uri() + " is unreachable"), next::body);
        assertTrue(roles.router.awaitQuiescence(WAIT), () -> "no quiescence: " + roles.router.counters());
        roles.prefill.assertPoolClean(); // its transfers had completed before decode died
        assertEquals(failed0 + 2, roles.router.counters().get("failed"), () -> "both counted as role_lost: " + roles.router.metricsText());
        assertEquals(2.0, Metrics.parse(roles.router.metricsText()).get("kvpool_requests_failed_total{reason=\"role_lost\"}"), roles.router::metricsText);
    }
}
