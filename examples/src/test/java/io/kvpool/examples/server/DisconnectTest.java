package io.kvpool.examples.server;

import io.kvpool.PoolSnapshot;
import io.kvpool.examples.server.link.LinkGate;
import io.kvpool.examples.server.role.InJvmRoles;
import io.kvpool.transfer.FailureReason;
import io.kvpool.transfer.ReceiverMetrics;
import org.junit.jupiter.api.Test;

import java.net.Socket;
import java.time.Duration;
import java.util.Map;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * A client that goes away makes the router abort the request on <b>both</b> roles; a transfer cut short
 * goes through the drain handshake before its pages are free. The disconnect is placed with the
 * {@link LinkGate}: the transfer's writes are held (in flight) while the client vanishes.
 */
class DisconnectTest {

    private static long role(KvServer s, int index, String counter) {
        return s.roleStatus().get(index).counters().get(counter);
    }

    /** Waits until both roles were told to abort the one request (each counted one abort request). */
    private static void awaitAbortedInBothRoles(KvServer server) throws InterruptedException {
        Await.until(() -> role(server, 0, "abort_requests") == 1 && role(server, 1, "abort_requests") == 1,
            Duration.ofSeconds(10), () -> "both roles to be told to abort: " + server.roleStatus());
    }

    /** {@link #awaitAbortedInBothRoles}, the pools balance, and the router counted the request aborted, none completed. */
    private static void assertAbortedOnceAndBalanced(KvServer server) throws Exception {
        awaitAbortedInBothRoles(server);
        ServerTests.assertBalanced(server);
        assertEquals(1, server.counters().get("aborted"));
        assertEquals(0, server.counters().get("completed"));
    }

    @Test
    void aClientGoneMidTransferAbortsBothRolesAndTheDecodePagesDrainBeforeTheyAreFree() throws Exception {
        final LinkGate gate = LinkGate.create(true);
        try (KvServer server = KvServer.start(ServerTests.held(gate).build())) {
            final TestClient client = new TestClient(server);
            final String prompt = BackpressureTest.words("w", 100); // 100 tokens: 7 pages
            try (Socket s = client.openRaw("alice", prompt, 4, true)) {
                TestClient.readUntil(s, "admitted"); // both roles admitted it: the stream has started
                assertTrue(gate.awaitHeld(7, Duration.ofSeconds(10)), "the transfer's writes were never posted");
            } // the client vanishes while its KV is in flight

            awaitAbortedInBothRoles(server);
            assertEquals(1, server.counters().get("aborted"));
            // the decode side's pages wait for the sender's DRAINED: its writes are still in flight
            final PoolSnapshot held = server.decodePool().snapshot();
            assertEquals(7, held.draining(), held::toString);
            assertEquals(0, held.free() + held.draining() - held.capacity(), held::toString);

            gate.open(); // the writes complete (into pages nobody will read), the sender drains and confirms
            ServerTests.assertBalanced(server);
            final ReceiverMetrics m = ((InJvmRoles) server.roles()).receiverMetrics();
            assertEquals(1, m.deferredRelease(ReceiverMetrics.Outcome.DRAINED), "the drain handshake released the pages");
            assertEquals(0, m.deferredRelease(ReceiverMetrics.Outcome.TIMEOUT) + m.deferredRelease(ReceiverMetrics.Outcome.ERROR));
            assertEquals(1, m.failures(FailureReason.ABORTED) + m.failures(FailureReason.SENDER_ABORTED));
            assertEquals(0, m.committed());
            final Map<String, Long> prefill = server.roleStatus().get(0).counters();
            assertEquals(1, prefill.get("transfers_drained"), prefill::toString);
            assertEquals(0, prefill.get("transfers_completed"), prefill::toString);

            final String text = server.metricsText();
            final Map<String, Double> mm = Metrics.parse(text);
            assertEquals(1.0, mm.get("kvpool_transfer_deferred_releases_total{outcome=\"drained\",role=\"decode\"}"), text);
            assertEquals(1.0, mm.get("kvpool_transfer_deferred_hold_seconds_count{role=\"decode\"}"), text);
            assertEquals(1.0, mm.get("kvpool_requests_aborted_total"), text);
            assertTrue(mm.get("kvpool_transfer_deferred_hold_seconds_sum{role=\"decode\"}") > 0, text);
        }
    }

    @Test
    void aClientGoneMidStreamStopsDecodeAndAbortsBothRoles() throws Exception {
        try (KvServer server = KvServer.start(ServerTests.small().tokenDelay(Duration.ofMillis(20)).build())) {
            final TestClient client = new TestClient(server);
            try (Socket s = client.openRaw("bob", "tell me a long story", 200, true)) {
                TestClient.readUntil(s, "\"text\":"); // the first token arrived
            }
            assertAbortedOnceAndBalanced(server);
            final long generated = role(server, 1, "generated_tokens");
            assertTrue(generated >= 1 && generated < 200, () -> generated + " tokens generated for a client that left");
        }
    }

    @Test
    void aNonStreamedClientThatLeavesMidTransferIsNoticedWithoutAWriteAndBothRolesAbort() throws Exception {
        // Nothing is written to a non-streamed client before its answer is known; the HTTP front sees the close
        // itself. The transfer's writes stay held throughout: the aborts cannot have come from a write or a commit.
        final LinkGate gate = LinkGate.create(true);
        try (KvServer server = KvServer.start(ServerTests.held(gate).tokenDelay(Duration.ofMillis(20)).build())) {
            final TestClient client = new TestClient(server);
            final long closed;
            try (Socket s = client.openRaw("carol", BackpressureTest.words("c", 40), 100, false)) {
                assertTrue(gate.awaitHeld(3, Duration.ofSeconds(10)));
                closed = System.nanoTime();
            } // gone while the transfer is held
            awaitAbortedInBothRoles(server);
            System.out.println("DisconnectTest: both roles told to abort " + (System.nanoTime() - closed) / 1_000_000
                + " ms after the client closed (polled every 1 ms)");
            assertEquals(1, server.counters().get("aborted"), "counted as the client's abort, not a failure");
            assertTrue(gate.held() >= 3, "the writes are still held: the abort came from the close alone");
            gate.open();
            assertAbortedOnceAndBalanced(server);
            assertEquals(0, role(server, 1, "generated_tokens"), "nothing generated for a client that left before its KV arrived");
        }
    }

    @Test
    void aNonStreamedResponseIsOneJsonObjectWithItsLength() throws Exception {
        try (KvServer server = KvServer.start(ServerTests.small().tokenDelay(Duration.ofMillis(5)).build())) {
            final TestClient client = new TestClient(server);
            final String prompt = "a patient client";
            try (Socket s = client.openRaw("ivy", prompt, 40, false)) { // 40 tokens × 5 ms
                final String raw = TestClient.readUntil(s, "}}"); // the completion's last object closes
                final String head = raw.substring(0, raw.indexOf("\r\n\r\n"));
                assertTrue(head.startsWith("HTTP/1.1 200") && head.contains("application/json"), head);
                final String body = raw.substring(head.length() + 4);
                final String length = head.lines().filter(l -> l.toLowerCase(java.util.Locale.ROOT).startsWith("content-length:"))
                    .findFirst().orElseThrow(() -> new AssertionError("no Content-Length: " + head)).substring(15).strip();
                assertEquals(Integer.parseInt(length), body.getBytes(java.nio.charset.StandardCharsets.UTF_8).length, body);
                assertTrue(body.startsWith("{"), () -> "nothing before the object: '" + body + "'");
                final com.fasterxml.jackson.databind.JsonNode j = TestClient.JSON.readTree(body);
                assertEquals(java.util.List.of(), Isolation.violations("ivy", prompt, 40, j));
            }
            ServerTests.assertBalanced(server);
        }
    }

    /** @return the body of a chunked HTTP/1.1 message */
    static String dechunk(String chunked) {
        final StringBuilder out = new StringBuilder();
        int at = 0;
        while (true) {
            final int eol = chunked.indexOf("\r\n", at);
            final int size = Integer.parseInt(chunked.substring(at, eol).strip(), 16);
            if (size == 0) {
                return out.toString();
            }
            final byte[] rest = chunked.substring(eol + 2).getBytes(java.nio.charset.StandardCharsets.UTF_8);
            final String chunk = new String(rest, 0, size, java.nio.charset.StandardCharsets.UTF_8);
            out.append(chunk);
            at = eol + 2 + chunk.length() + 2;
        }
    }
}
