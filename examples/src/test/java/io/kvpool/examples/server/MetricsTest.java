package io.kvpool.examples.server;

import io.kvpool.examples.server.role.RoleParts;
import org.junit.jupiter.api.Test;

import java.util.Map;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * {@code GET /metrics} of the one-JVM server ({@code --role all}): every required family (requests, pools, rejections,
 * stale handles, transfers and their integrity, deferred releases, the JVM), each declared once, with values that add
 * up; both pools and engines in one registry, told apart by {@code role}.
 */
class MetricsTest {

    @Test
    void metricsCoverPoolsRejectionsStaleHandlesDeferredReleasesIntegrityAndRequests() throws Exception {
        try (KvServer server = KvServer.start(ServerTests.small().build())) {
            final TestClient client = new TestClient(server);
            for (int i = 0; i < 5; i++) {
                assertEquals(200, client.complete("alice", "metric request " + i, 3, i % 2 == 0).status());
            }
            assertEquals(400, client.complete("alice", "too long", 1000, false).status());
            assertEquals(401, client.post("/v1/completions", null, TestClient.body("x", 1, false)).status());
            ServerTests.assertBalanced(server);

            final TestClient.Response r = client.get("/metrics");
            assertEquals(java.util.List.of(), PromFormat.violations(r.body()), r::body);
            assertEquals(200, r.status());
            assertTrue(r.contentType().startsWith("text/plain; version=0.0.4"), r::contentType);
            final Map<String, Double> m = Metrics.parse(r.body());

            // requests
            // each role names the build its link's peer runs, in one family (the roles share one build here)
            assertEquals(1, m.get("kvpool_peer_info{build=\"" + RoleParts.BUILD + "\",role=\"decode\"}"), r::body);
            assertEquals(1, m.get("kvpool_peer_info{build=\"" + RoleParts.BUILD + "\",role=\"prefill\"}"), r::body);
            assertEquals(6, m.get("kvpool_requests_total")); // the 401 never reached the router
            assertEquals(5, m.get("kvpool_requests_completed_total"));
            assertEquals(0, m.get("kvpool_requests_aborted_total"));
            assertEquals(0, m.get("kvpool_requests_in_flight"));
            assertEquals(1, m.get("kvpool_requests_rejected_total{reason=\"context_too_long\",role=\"router\"}"));
            assertEquals(1, m.get("kvpool_http_errors_total{status=\"400\"}"));
            assertEquals(1, m.get("kvpool_http_errors_total{status=\"401\"}"));
            // pool states per role: all free at quiescence
            for (String role : new String[] {"prefill", "decode"}) {
                final double capacity = m.get("kvpool_pool_capacity_pages{role=\"" + role + "\"}");
                assertEquals(capacity, m.get("kvpool_pool_pages{role=\"" + role + "\",state=\"free\"}"));
                for (String state : new String[] {"owned", "receiving", "draining", "quarantined", "retired"}) {
                    assertEquals(0, m.get("kvpool_pool_pages{role=\"" + role + "\",state=\"" + state + "\"}"), role + " " + state);
                }
                assertEquals(0, m.get("kvpool_pool_handles_refused_total{reason=\"stale\",role=\"" + role + "\"}"));
                assertEquals(0, m.get("kvpool_pool_quarantine_events_total{role=\"" + role + "\"}"));
                assertEquals(0, m.get("kvpool_pool_admissions_rejected_total{reason=\"exceeds_pool\",role=\"" + role + "\"}"));
                assertTrue(m.get("kvpool_pool_allocations_total{role=\"" + role + "\"}") >= 5);
            }
            // transfers: started, committed, failed by reason (checksum and canary among them), deferred releases with hold times
            assertEquals(5, m.get("kvpool_transfer_started_total{role=\"decode\"}"));
            assertEquals(5, m.get("kvpool_transfer_committed_total{role=\"decode\"}"));
            assertEquals(0, m.get("kvpool_transfer_failures_total{reason=\"checksum_mismatch\",role=\"decode\"}"));
            assertEquals(0, m.get("kvpool_transfer_failures_total{reason=\"canary\",role=\"decode\"}"));
            assertEquals(0, m.get("kvpool_transfer_failures_total{reason=\"length_mismatch\",role=\"decode\"}"));
            for (String outcome : new String[] {"drained", "timeout", "error"}) {
                assertEquals(0, m.get("kvpool_transfer_deferred_releases_total{outcome=\"" + outcome + "\",role=\"decode\"}"));
            }
            assertEquals(0, m.get("kvpool_transfer_deferred_hold_seconds_count{role=\"decode\"}"));
            assertEquals(0, m.get("kvpool_transfer_quarantined_pages{role=\"decode\"}"));
            assertEquals(1, m.get("kvpool_role_link_up{role=\"decode\"}"));
            assertEquals(1, m.get("kvpool_role_link_up{role=\"prefill\"}"));
            assertEquals(0, m.get("kvpool_role_pages_in_flight{role=\"prefill\"}"), "every write is over");
            assertEquals(5, m.get("kvpool_role_events_total{event=\"transfers_completed\",role=\"prefill\"}"));
            assertEquals(5, m.get("kvpool_role_events_total{event=\"transfers_committed\",role=\"decode\"}"));
            assertEquals(15, m.get("kvpool_role_events_total{event=\"generated_tokens\",role=\"decode\"}"));
            assertTrue(m.get("kvpool_transfer_sender_writes_posted_total{role=\"prefill\"}") >= 5);
            assertTrue(m.keySet().stream().noneMatch(k -> k.startsWith("kvpool_unsafe_switch{")), "no unsafe switch is on");
            // the JVM and the process, from Micrometer's binders
            assertTrue(m.get("jvm_memory_used_bytes{area=\"heap\",id=\"G1 Eden Space\"}") != null
                || m.keySet().stream().anyMatch(k -> k.startsWith("jvm_memory_used_bytes{area=\"heap\"")), r::body);
            assertTrue(m.get("process_uptime_seconds") > 0, r::body);
            assertTrue(m.get("jvm_threads_live_threads") > 0, r::body);
            // every kvpool meter has a description
            for (String family : Metrics.families(r.body())) {
                assertTrue(r.body().contains("# HELP " + family + " "), () -> family + " has no HELP");
            }

            // what the live page is fed: both pools' maps and the counters
            final var live = server.liveState();
            assertEquals(java.util.List.of("prefill", "decode"), live.pools().stream().map(p -> p.role()).toList());
            assertEquals("F".repeat(64), live.pools().get(0).pages());
            assertEquals("F".repeat(128), live.pools().get(1).pages());
            // one naming style: the Prometheus names less kvpool_ and _total, a role's events prefixed by the role
            assertEquals(6, live.counters().get("requests"), live.counters()::toString);
            assertEquals(5, live.counters().get("requests_completed"));
            assertEquals(1, live.counters().get("requests_rejected"));
            assertEquals(0, live.counters().get("requests_in_flight"));
            assertEquals(2, live.counters().get("http_errors"));
            assertEquals(5, live.counters().get("decode_transfers_committed"));
            assertEquals(15, live.counters().get("decode_generated_tokens"));
            for (String name : live.counters().keySet()) {
                assertTrue(name.matches("[a-z][a-z0-9_]*"), () -> "not snake_case: " + name);
            }
            for (var pool : live.pools()) {
                for (String name : pool.counters().keySet()) {
                    assertTrue(name.matches("[a-z][a-z0-9_]*"), () -> "not snake_case: " + pool.role() + " " + name);
                }
                assertEquals(0, pool.counters().get("open_sequences"));
                assertEquals(pool.capacity(), pool.counters().get("free"));
            }
        }
    }

    @Test
    void theFormatCheckCatchesWhatAScraperWouldChokeOn() {
        assertEquals(java.util.List.of(), PromFormat.violations("# HELP a_total A.\n# TYPE a_total counter\na_total{x=\"q\\\"\\\\\"} 1\n"
            + "# TYPE b gauge\nb 2.5\nb{y=\"1\"} NaN\n# TYPE s summary\ns_count 3\ns_sum 1.5\n"));
        assertEquals(1, PromFormat.violations("# TYPE a counter\n# TYPE a counter\na_total 1\n").size(), "a second TYPE");
        assertEquals(1, PromFormat.violations("# HELP a x\n# HELP a y\n# TYPE a gauge\na 1\n").size(), "a second HELP");
        assertEquals(1, PromFormat.violations("# TYPE a gauge\na 1\n# TYPE b gauge\nb 1\na{k=\"v\"} 2\n").size(), "a family split in two");
        assertEquals(1, PromFormat.violations("# TYPE c counter\nc 1\n").size(), "a counter without _total");
        assertEquals(1, PromFormat.violations("# TYPE g gauge\ng{k=\"a\"b\"} 1\n").size(), "an unescaped quote");
        assertEquals(1, PromFormat.violations("g 1\n").size(), "a sample without TYPE");
    }
}
