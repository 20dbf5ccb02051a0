package io.kvpool.examples.server;

import org.junit.jupiter.api.Test;

import java.util.Map;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

/** {@code GET /metrics}: every family the issue asks for, each declared once, with values that add up. */
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
            assertEquals(1, m.get("kvpool_peer_info{role=\"decode\",build=\"" + RoleIdentity.BUILD + "\"}"), r::body);
            assertEquals(1, m.get("kvpool_peer_info{role=\"prefill\",build=\"" + RoleIdentity.BUILD + "\"}"), r::body);
            assertEquals(6, m.get("kvpool_requests_total")); // the 401 never reached the router
            assertEquals(5, m.get("kvpool_requests_completed_total"));
            assertEquals(0, m.get("kvpool_requests_aborted_total"));
            assertEquals(0, m.get("kvpool_requests_in_flight"));
            assertEquals(1, m.get("kvpool_requests_rejected_total{role=\"router\",reason=\"context_too_long\"}"));
            assertEquals(1, m.get("kvpool_http_errors_total{status=\"400\"}"));
            assertEquals(1, m.get("kvpool_http_errors_total{status=\"401\"}"));
            // pool states per role: all free at quiescence
            for (String role : new String[] {"prefill", "decode"}) {
                final double capacity = m.get("kvpool_pool_capacity_pages{role=\"" + role + "\"}");
                assertEquals(capacity, m.get("kvpool_pool_pages{role=\"" + role + "\",state=\"free\"}"));
                for (String state : new String[] {"owned", "receiving", "draining", "quarantined", "retired"}) {
                    assertEquals(0, m.get("kvpool_pool_pages{role=\"" + role + "\",state=\"" + state + "\"}"), role + " " + state);
                }
                assertEquals(0, m.get("kvpool_pool_stale_handles_refused_total{role=\"" + role + "\"}"));
                assertEquals(0, m.get("kvpool_pool_quarantine_events_total{role=\"" + role + "\"}"));
                assertEquals(0, m.get("kvpool_pool_rejections_total{role=\"" + role + "\",reason=\"exceeds_pool\"}"));
                assertTrue(m.get("kvpool_pool_allocations_total{role=\"" + role + "\"}") >= 5);
            }
            // transfers: started, committed, failed by reason (checksum and canary among them), deferred releases with hold times
            assertEquals(5, m.get("kvpool_transfers_started_total"));
            assertEquals(5, m.get("kvpool_transfers_committed_total"));
            assertEquals(0, m.get("kvpool_transfers_failed_total{reason=\"checksum_mismatch\"}"));
            assertEquals(0, m.get("kvpool_transfers_failed_total{reason=\"canary\"}"));
            assertEquals(0, m.get("kvpool_transfers_failed_total{reason=\"length_mismatch\"}"));
            for (String outcome : new String[] {"drained", "timeout", "error"}) {
                assertEquals(0, m.get("kvpool_deferred_release_total{outcome=\"" + outcome + "\"}"));
            }
            assertEquals(0, m.get("kvpool_deferred_release_seconds_count"));
            assertEquals(0, m.get("kvpool_quarantined_pages"));
            assertEquals(1, m.get("kvpool_receiver_link_up"));
            assertEquals(1, m.get("kvpool_sender_link_up"));
            assertEquals(5, m.get("kvpool_role_events_total{role=\"prefill\",event=\"transfers_completed\"}"));
            assertEquals(5, m.get("kvpool_role_events_total{role=\"decode\",event=\"transfers_committed\"}"));
            assertEquals(15, m.get("kvpool_role_events_total{role=\"decode\",event=\"generated_tokens\"}"));
            assertTrue(m.get("kvpool_sender_writes_posted_total") >= 5);
            assertTrue(m.keySet().stream().noneMatch(k -> k.startsWith("kvpool_unsafe_switch{")), "no unsafe switch is on");

            // what the live page is fed: both pools' maps and the counters
            final var live = server.liveState();
            assertEquals(java.util.List.of("prefill", "decode"), live.pools().stream().map(p -> p.role()).toList());
            assertEquals("F".repeat(64), live.pools().get(0).pages());
            assertEquals("F".repeat(128), live.pools().get(1).pages());
            assertEquals(5, live.counters().get("completed"));
            assertEquals(5, live.counters().get("decode_transfers_committed"));
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
