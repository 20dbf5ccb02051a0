package io.kvpool.examples.server;

import io.kvpool.examples.server.config.ServerConfig;
import io.kvpool.examples.server.config.Topology;
import io.kvpool.examples.server.metrics.ServerMetrics;
import io.kvpool.examples.server.role.RoleStatus;
import io.kvpool.examples.server.router.Router;
import io.kvpool.examples.ui.PoolView;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

import java.net.http.HttpResponse;
import java.nio.file.Path;
import java.time.Duration;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * {@code GET /metrics} from Micrometer's Prometheus registry ({@link ServerMetrics}) in both topologies: one JVM
 * ({@code --role all}) and a router over role processes ({@code --role router}), each scrape read with the text
 * format's rules ({@link PromFormat}: one TYPE per family, a family's samples in one block; {@link Metrics#parse}: no
 * series twice). Every scrape has both pools, balanced, and the JVM's own meters.
 */
class ServerMetricsTest {

    private static final String[] STATES = {"free", "owned", "receiving", "draining", "quarantined", "retired"};

    @TempDir
    Path dir;

    @Test
    void oneJvmScrapeHasBothPoolsBothEnginesTheRouterAndTheJvm() throws Exception {
        try (KvServer server = KvServer.start(ServerTests.small().build())) {
            final TestClient client = new TestClient(server);
            assertEquals(200, client.complete("alice", "one", 2, false).status());
            assertTrue(server.awaitQuiescence(Duration.ofSeconds(5)));
            final TestClient.Response r = client.get("/metrics");
            assertEquals(200, r.status());
            assertEquals(ServerMetrics.CONTENT_TYPE, r.contentType());
            final Map<String, Double> m = parsed(r.body());
            assertBalanced(m, "", r.body());
            assertEquals(1.0, m.get("kvpool_transfer_committed_total{role=\"decode\"}"), r::body);
            assertEquals(1.0, m.get("kvpool_transfer_sender_completed_total{role=\"prefill\"}"), r::body);
            assertEquals(1.0, m.get("kvpool_requests_completed_total"), r::body);
            assertJvm(m, "", r.body());
        }
    }

    @Test
    void theRouterOfRoleProcessesShowsBothPoolsFromTheirStatusAndEachProcessServesItsOwnTaggedWithItsRole() throws Exception {
        try (InJvmRoleServers roles = InJvmRoleServers.start(ServerTests.small().workDir(dir), Duration.ofSeconds(30));
             KvServer router = KvServer.start(ServerTests.small().topology(Topology.DEFAULT.withRole(Topology.Role.ROUTER)
                 .withUrls(roles.prefill.baseUri(), roles.decode.baseUri())).build())) {
            final TestClient client = new TestClient(router);
            assertEquals(200, client.complete("alice", "one", 2, false).status());
            assertTrue(router.awaitQuiescence(Duration.ofSeconds(10)));

            final TestClient.Response r = client.get("/metrics");
            assertEquals(200, r.status());
            final Map<String, Double> m = parsed(r.body());
            assertBalanced(m, "", r.body()); // one scrape of the router: both pools, from the roles' statuses
            assertEquals(1.0, m.get("kvpool_role_events_total{event=\"transfers_committed\",role=\"decode\"}"), r::body);
            assertEquals(1.0, m.get("kvpool_role_link_up{role=\"prefill\"}"), r::body);
            assertEquals(1.0, m.get("kvpool_requests_completed_total"), r::body);
            assertJvm(m, "", r.body()); // the router's own JVM
            assertNull(m.get("kvpool_transfer_committed_total{role=\"decode\"}"), "the engines' meters are the role processes'");

            for (RoleServer role : List.of(roles.prefill, roles.decode)) {
                final String name = role.role().flag();
                final HttpResponse<String> own = InJvmRoleServers.send(role.baseUri(), "metrics", null);
                assertEquals(200, own.statusCode(), own::body);
                assertEquals(ServerMetrics.CONTENT_TYPE, own.headers().firstValue("Content-Type").orElse(null));
                final Map<String, Double> p = parsed(own.body());
                for (String series : p.keySet()) { // the common tag: every series of the process names its role
                    assertTrue(series.contains("role=\"" + name + "\""), () -> name + "'s series without its role: " + series);
                }
                assertEquals(1.0, p.get("kvpool_role_up{role=\"" + name + "\"}"), own::body);
                final double capacity = p.get("kvpool_pool_capacity_pages{role=\"" + name + "\"}");
                assertEquals(capacity, p.get("kvpool_pool_pages{role=\"" + name + "\",state=\"free\"}"), own::body);
                assertEquals(capacity, m.get("kvpool_pool_capacity_pages{role=\"" + name + "\"}"), "the router reads the same pool");
                assertJvm(p, "role=\"" + name + "\"", own.body());
            }
            final Map<String, Double> decode = parsed(InJvmRoleServers.send(roles.decode.baseUri(), "metrics", null).body());
            assertEquals(1.0, decode.get("kvpool_transfer_committed_total{role=\"decode\"}"));
            final Map<String, Double> prefill = parsed(InJvmRoleServers.send(roles.prefill.baseUri(), "metrics", null).body());
            assertEquals(1.0, prefill.get("kvpool_transfer_sender_completed_total{role=\"prefill\"}"));
        }
    }

    @Test
    void theHttpFrontsConnectionsAndRefusalsAreMeters() throws Exception {
        try (KvServer server = KvServer.start(ServerTests.small().maxHeaderBytes(1024).build())) {
            try (java.net.Socket s = new java.net.Socket(server.baseUri().getHost(), server.port())) {
                s.getOutputStream().write(("GET / HTTP/1.1\r\nHost: x\r\nX-Big: " + "a".repeat(2048) + "\r\n\r\n")
                    .getBytes(java.nio.charset.StandardCharsets.US_ASCII));
                final String answer = new String(s.getInputStream().readAllBytes(), java.nio.charset.StandardCharsets.US_ASCII);
                assertTrue(answer.startsWith("HTTP/1.1 431"), answer);
            }
            final Map<String, Double> m = Metrics.parse(new TestClient(server).get("/metrics").body());
            assertEquals(1.0, m.get("kvpool_http_requests_refused_total"), m::toString);
            assertEquals(0.0, m.get("kvpool_http_connections_refused_total"), m::toString);
            assertTrue(m.get("kvpool_http_connections_open") >= 1.0, m::toString); // the scrape's own
        }
    }

    @Test
    void aRoleTheRouterCannotReachIsDownWithAnEmptyPoolAndItsEventsAppearOnceItIsRead() {
        final Map<String, Long> c = new LinkedHashMap<>();
        c.put("capacity", 4L);
        c.put("free", 3L);
        c.put("owned", 1L);
        c.put("open_sequences", 1L);
        c.put("quarantine_events", 2L);
        final RoleStatus prefill = new RoleStatus("prefill", new PoolView("prefill", 4, "FFFO", c), Map.of("admitted", 7L),
            Map.of(RoleStatus.LINK_UP, 1L));
        final RoleStatus decode = RoleStatus.unreachable("decode", "decode role at http://127.0.0.1:1/ is unreachable");
        final String text = StatusRoles.routerMetrics(prefill, decode, ServerConfig.builder().build());
        final Map<String, Double> m = parsed(text);
        assertEquals(1.0, m.get("kvpool_role_up{role=\"prefill\"}"), text);
        assertEquals(0.0, m.get("kvpool_role_up{role=\"decode\"}"), text);
        assertEquals(4.0, m.get("kvpool_pool_capacity_pages{role=\"prefill\"}"), text);
        assertEquals(1.0, m.get("kvpool_pool_pages{role=\"prefill\",state=\"owned\"}"), text);
        assertEquals(1.0, m.get("kvpool_pool_sequences_open{role=\"prefill\"}"), text);
        assertEquals(2.0, m.get("kvpool_pool_quarantine_events_total{role=\"prefill\"}"), text);
        assertEquals(7.0, m.get("kvpool_role_events_total{event=\"admitted\",role=\"prefill\"}"), text);
        assertEquals(1.0, m.get("kvpool_role_link_up{role=\"prefill\"}"), text);
        assertEquals(0.0, m.get("kvpool_pool_capacity_pages{role=\"decode\"}"), text);
        for (String state : STATES) {
            assertEquals(0.0, m.get("kvpool_pool_pages{role=\"decode\",state=\"" + state + "\"}"), text);
        }
        assertFalse(m.containsKey("kvpool_role_link_up{role=\"decode\"}"), "a role never read names no gauges");
    }

    @Test
    void aRoleThatCannotBeReachedForAScrapeKeepsItsCountersAndDropsItsGauges() {
        final Map<String, Long> c = new LinkedHashMap<>();
        c.put("capacity", 4L);
        c.put("free", 4L);
        c.put("quarantine_events", 3L);
        final RoleStatus read = new RoleStatus("decode", new PoolView("decode", 4, "FFFF", c), Map.of("transfers_failed", 7L),
            Map.of(RoleStatus.LINK_UP, 1L));
        final RoleStatus prefill = new RoleStatus("prefill", new PoolView("prefill", 0, "", Map.of()), Map.of(), Map.of());
        final StatusRoles roles = new StatusRoles(prefill, read);
        final ServerConfig config = ServerConfig.builder().build();
        final String failed = "kvpool_role_events_total{event=\"transfers_failed\",role=\"decode\"}";
        final String quarantines = "kvpool_pool_quarantine_events_total{role=\"decode\"}";
        final String capacity = "kvpool_pool_capacity_pages{role=\"decode\"}";
        try (ServerMetrics m = ServerMetrics.forServer(config, new Router(config, roles.prefill(), roles.decode()), roles)) {
            Map<String, Double> p = parsed(m.scrape());
            assertEquals(7.0, p.get(failed));
            assertEquals(3.0, p.get(quarantines));
            roles.decodeStatus.set(RoleStatus.unreachable("decode", "a status read timed out"));
            final String text = m.scrape();
            p = parsed(text);
            assertEquals(0.0, p.get("kvpool_role_up{role=\"decode\"}"), text);
            assertEquals(0.0, p.get(capacity), "gauges say the role is not seen: " + text);
            // counters never go down: 7 → 0 → 7 would read to Prometheus as a reset and count the 7 again
            assertEquals(7.0, p.get(failed), text);
            assertEquals(3.0, p.get(quarantines), text);
            roles.decodeStatus.set(read);
            p = parsed(m.scrape());
            assertEquals(7.0, p.get(failed));
            assertEquals(4.0, p.get(capacity));
        }
    }

    @Test
    void everySafeguardSwitchedOffIsOneSeriesAndTheLiveNamesFollowThePrometheusNames() {
        final ServerConfig cfg = ServerConfig.builder().unsafePlaceholderOnOverflow(true).build();
        final RoleStatus prefill = new RoleStatus("prefill", new PoolView("prefill", 0, "", Map.of()), Map.of(), Map.of());
        final StatusRoles roles = new StatusRoles(prefill, RoleStatus.unreachable("decode", "down"));
        try (ServerMetrics metrics = ServerMetrics.forServer(cfg, new Router(cfg, roles.prefill(), roles.decode()), roles)) {
            final Map<String, Double> m = parsed(metrics.scrape());
            assertEquals(1.0, m.get("kvpool_unsafe_switch{name=\"unsafe-placeholder-on-overflow\"}"));
            assertEquals(List.of("requests", "requests_completed", "requests_aborted", "requests_timed_out", "requests_rejected",
                "requests_failed", "requests_in_flight", "http_errors"), List.copyOf(metrics.liveCounters(List.of(prefill)).keySet()));
        }
    }

    /** @return the samples, after checking the text as a scraper would */
    private static Map<String, Double> parsed(String text) {
        assertEquals(List.of(), PromFormat.violations(text), text);
        for (String family : Metrics.families(text)) {
            assertTrue(text.contains("# HELP " + family + " "), () -> family + " has no description");
        }
        return Metrics.parse(text);
    }

    /** Both pools: every page free, nothing reserved or open (the registry sorts labels: role before state). */
    private static void assertBalanced(Map<String, Double> m, String extra, String text) {
        for (String role : new String[] {"prefill", "decode"}) {
            final String r = "role=\"" + role + "\"" + extra;
            final Double capacity = m.get("kvpool_pool_capacity_pages{" + r + "}");
            assertTrue(capacity != null && capacity > 0, () -> role + " has no capacity: " + text);
            assertEquals(capacity, m.get("kvpool_pool_pages{" + r + ",state=\"free\"}"), text);
            for (String state : STATES) {
                if (!state.equals("free")) {
                    assertEquals(0.0, m.get("kvpool_pool_pages{" + r + ",state=\"" + state + "\"}"), () -> role + " " + state + ": " + text);
                }
            }
            assertEquals(0.0, m.get("kvpool_pool_reserved_pages{" + r + "}"), text);
            assertEquals(0.0, m.get("kvpool_pool_sequences_open{" + r + "}"), text);
            assertEquals(1.0, m.get("kvpool_role_up{" + r + "}"), text);
        }
    }

    /** The JVM's and the process's meters, with {@code tag} (the process's common tag) or none. */
    private static void assertJvm(Map<String, Double> m, String tag, String text) {
        final String only = tag.isEmpty() ? "" : "{" + tag + "}";
        assertTrue(m.get("process_uptime_seconds" + only) > 0, text);
        assertTrue(m.get("jvm_threads_live_threads" + only) > 0, text);
        assertTrue(m.get("jvm_classes_loaded_classes" + only) > 0, text);
        assertTrue(m.containsKey("system_cpu_count" + only), text);
        assertTrue(m.keySet().stream().anyMatch(k -> k.startsWith("jvm_memory_used_bytes{area=\"heap\"")), text);
        assertTrue(m.keySet().stream().anyMatch(k -> k.startsWith("jvm_gc_")), text);
        assertTrue(m.containsKey("process_files_open_files" + only), text);
    }
}
