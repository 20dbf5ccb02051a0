package io.kvpool.examples.server;

import com.fasterxml.jackson.databind.JsonNode;
import io.kvpool.Safeguard;
import io.kvpool.examples.server.config.ServerConfig;
import io.kvpool.transfer.TransferSafeguard;
import org.junit.jupiter.api.Test;

import java.util.ArrayList;
import java.util.List;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * The one test that shows the isolation check can fail: with the 2026 incident's safeguards switched off,
 * another tenant's text <em>does</em> appear in a response, and {@link Isolation} reports it. The
 * arrangement is deterministic: alice's request leaves her KV in decode pages that are not refilled on
 * free; bob's request is too big for the undersized prefill pool, becomes a one-token placeholder, and
 * decode — told the full length, with the length check, canary check and checksum off — commits pages
 * that still hold alice's KV. The control turns only the placeholder on: the length check stops it.
 */
class IncidentTest {

    static final String ALICE = "alice's medical record: " + BackpressureTest.words(" ALICE", 60);

    private static ServerConfig.Builder incidentSizes() {
        // the prefill pool holds 128 tokens while 512 are advertised (the 2026 ratio, shrunk)
        return ServerTests.small().contextTokens(512).prefillPages(8).decodePages(64).unsafePlaceholderOnOverflow(true);
    }

    @Test
    void withTheIncidentsSafeguardsOffAnotherTenantsTextAppearsAndTheCheckCatchesIt() throws Exception {
        try (KvServer server = KvServer.start(incidentSizes().unsafeDisable(Safeguard.FREE_PAGE_FILL)
            .unsafeDisable(TransferSafeguard.LENGTH_CHECK, TransferSafeguard.CANARY_CHECK, TransferSafeguard.CHECKSUM).build())) {
            final TestClient client = new TestClient(server);
            final TestClient.Response a = client.complete("alice", ALICE, 0, false);
            assertEquals(200, a.status(), a::body);
            assertEquals(List.of(), Isolation.violations("alice", ALICE, 0, a.json()), "alice's own request is still fine");

            final String bobPrompt = BackpressureTest.words("bob", 200); // 200 tokens: over the prefill pool's 128
            final TestClient.Response b = client.complete("bob", bobPrompt, 4, false);
            assertEquals(200, b.status(), b::body);
            final JsonNode kv = b.json().path("kvpool");
            final List<String> tenants = new ArrayList<>();
            kv.path("kv_tenants").forEach(t -> tenants.add(t.asText()));
            assertTrue(tenants.contains("alice"), () -> "bob's KV should hold alice's: " + kv);
            // page 0 is the placeholder's (bob's one token, then the prefill page's canary); pages 1.. are alice's
            assertTrue(kv.path("kv_text").asText().contains(" ALICE20 "), kv::toString);

            final List<String> caught = Isolation.violations("bob", bobPrompt, 4, b.json());
            assertFalse(caught.isEmpty(), "the isolation check must catch the leak");
            assertTrue(caught.stream().anyMatch(v -> v.contains("alice")), caught::toString);
            assertEquals(1, server.roleStatus().get(0).counters().get("placeholders"));
            assertEquals(1.0, Metrics.parse(server.metricsText()).get("kvpool_unsafe_switch{name=\"unsafe-length-check\"}"));
            ServerTests.assertBalanced(server);
        }
    }

    @Test
    void thePlaceholderAloneIsStoppedByTheLengthCheck() throws Exception {
        try (KvServer server = KvServer.start(incidentSizes().build())) {
            final TestClient client = new TestClient(server);
            assertEquals(200, client.complete("alice", ALICE, 0, false).status());
            final TestClient.Response b = client.complete("bob", BackpressureTest.words("bob", 200), 4, false);
            assertEquals(502, b.status(), b::body);
            final JsonNode e = b.error();
            assertEquals("transfer_failed", e.path("type").asText());
            assertEquals("length_mismatch", e.path("reason").asText());
            assertTrue(e.path("message").asText().contains("transferred 1 tokens, expected 200"), e::toString);
            assertFalse(b.body().contains("ALICE"), b::body);
            ServerTests.assertBalanced(server);
            assertEquals(1.0, Metrics.parse(server.metricsText()).get("kvpool_transfer_failures_total{reason=\"length_mismatch\",role=\"decode\"}"));
        }
    }
}
