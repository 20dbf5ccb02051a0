package io.kvpool.examples.server.remote;

import com.fasterxml.jackson.databind.ObjectMapper;
import com.sun.net.httpserver.HttpServer;
import io.kvpool.examples.server.ServerTests;
import io.kvpool.examples.server.api.Json;
import io.kvpool.examples.server.role.DecodeCall;
import io.kvpool.examples.server.role.DecodeRole;
import io.kvpool.examples.server.role.PrefillRole;
import io.kvpool.examples.server.role.RoleLostException;
import io.kvpool.examples.server.role.RoleStatus;
import io.kvpool.examples.ui.PoolView;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

import java.io.OutputStream;
import java.net.InetAddress;
import java.net.InetSocketAddress;
import java.net.URI;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.Map;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * Role processes that stall mid-answer, never end a stream, send events out of order or answer garbage: the router is
 * never held past its bounds, and never takes garbage for a role that is up.
 */
@Timeout(value = 90, unit = TimeUnit.SECONDS)
class MisbehavingRoleProcessTest {

    private static HttpServer server() throws java.io.IOException {
        final HttpServer s = HttpServer.create(new InetSocketAddress(InetAddress.getLoopbackAddress(), 0), 0);
        s.setExecutor(java.util.concurrent.Executors.newVirtualThreadPerTaskExecutor());
        return s;
    }

    private static URI base(HttpServer s) {
        return URI.create("http://127.0.0.1:" + s.getAddress().getPort() + "/");
    }

    private static void lines(com.sun.net.httpserver.HttpExchange ex, String... lines) throws java.io.IOException {
        final OutputStream out = ex.getResponseBody();
        for (String l : lines) {
            out.write((l + "\n").getBytes(StandardCharsets.UTF_8));
        }
        out.flush();
    }

    /**
     * A decode process that answers the decode call with an error status, then stalls mid-body (frozen, partitioned):
     * the call must end within the client's bound (twice the call timeout), as every other call does.
     */
    @Test
    void anErrorAnswerWhoseBodyStallsDoesNotHoldTheCallerForEver() throws Exception {
        final CountDownLatch hold = new CountDownLatch(1);
        final HttpServer s = server();
        s.createContext("/internal/decode", ex -> {
            ex.getRequestBody().readAllBytes();
            ex.sendResponseHeaders(503, 1000); // promises 1000 bytes
            try {
                lines(ex, "{\"error\":");
                hold.await(80, TimeUnit.SECONDS); // and sends no more
            } catch (InterruptedException | java.io.IOException e) {
                // the client dropped it
            }
        });
        s.start();
        try (RoleClient client = new RoleClient(DecodeRole.ROLE, base(s), Json.strict())) {
            final CompletableFuture<Throwable> ended = new CompletableFuture<>();
            Thread.ofVirtual().start(() -> {
                try {
                    client.stream("internal/decode", Map.of("request_id", 1));
                    ended.complete(null);
                } catch (Throwable t) {
                    ended.complete(t);
                }
            });
            final long boundMs = 2 * RoleClient.CALL_TIMEOUT.toMillis() + 5_000;
            final Throwable t;
            try {
                t = ended.get(boundMs, TimeUnit.MILLISECONDS);
            } catch (java.util.concurrent.TimeoutException e) {
                throw new AssertionError("the decode call still waits on the role's stalled error body after " + boundMs + " ms");
            }
            assertInstanceOf(RoleLostException.class, t);
        } finally {
            hold.countDown();
            s.stop(0);
        }
    }

    /**
     * A decode process that sends its last event ("done") and then never ends the stream: the router's reader thread
     * and the connection must not be held for ever (an aborted call's stream is dropped after DROP_AFTER; a completed
     * one is never aborted).
     */
    @Test
    void aStreamNotEndedAfterItsDoneEventIsDropped() throws Exception {
        final CountDownLatch hold = new CountDownLatch(1);
        final HttpServer s = server();
        s.createContext("/internal/decode", ex -> {
            ex.getRequestBody().readAllBytes();
            ex.sendResponseHeaders(200, 0);
            try {
                lines(ex, "{\"event\":\"waiting\",\"heartbeat_ms\":200}", "{\"event\":\"admitted\"}",
                    "{\"event\":\"transfer\",\"committed\":true}", "{\"event\":\"token\",\"text\":\"a\"}",
                    "{\"event\":\"done\",\"text\":\"a\",\"completion_tokens\":1,\"kv\":{\"text\":\"a\",\"tenants\":[\"alice\"],"
                        + "\"tokens\":1,\"canary\":0,\"garbage\":0,\"misplaced\":0}}");
                hold.await(80, TimeUnit.SECONDS); // the stream's end never comes
            } catch (InterruptedException | java.io.IOException e) {
                // the client dropped it
            }
        });
        s.start();
        try (RoleClient client = new RoleClient(DecodeRole.ROLE, base(s), Json.strict())) {
            final AbortDelivery aborts = new AbortDelivery(client, null);
            final RemoteDecodeCall call = RemoteDecodeCall.open(client, Json.strict(), aborts, 7, "alice", 1, 1, Duration.ofSeconds(10),
                Duration.ofSeconds(5));
            assertTrue(call.awaitAdmission(Duration.ofSeconds(5)).admitted());
            assertTrue(call.awaitTransfer(Duration.ofSeconds(5)).committed());
            final DecodeCall.Generation g = call.generate(1, t -> { });
            assertEquals("a", g.text());
            final long until = System.nanoTime() + 3 * RemoteDecodeCall.DROP_AFTER.toNanos();
            while (!call.endedForTests() && System.nanoTime() - until < 0) {
                Thread.sleep(20);
            }
            assertTrue(call.endedForTests(), "the reader still holds the stream (and its connection) "
                + 3 * RemoteDecodeCall.DROP_AFTER.toMillis() + " ms after the request completed");
        } finally {
            hold.countDown();
            s.stop(0);
        }
    }

    /**
     * A decode stream whose last event comes before the admission (here "done", out of order: a broken build): the
     * router must not wait its whole request timeout on a stream that ended; it is a fault of the role (502).
     */
    @Test
    void aLastEventBeforeTheAdmissionFailsTheWaitAtOnce() throws Exception {
        final HttpServer s = server();
        s.createContext("/internal/decode", ex -> {
            ex.getRequestBody().readAllBytes();
            ex.sendResponseHeaders(200, 0);
            lines(ex, "{\"event\":\"waiting\",\"heartbeat_ms\":200}",
                "{\"event\":\"done\",\"text\":\"a\",\"completion_tokens\":1,\"kv\":{\"text\":\"a\",\"tenants\":[\"alice\"],"
                    + "\"tokens\":1,\"canary\":0,\"garbage\":0,\"misplaced\":0}}");
            ex.close();
        });
        s.start();
        try (RoleClient client = new RoleClient(DecodeRole.ROLE, base(s), Json.strict())) {
            final AbortDelivery aborts = new AbortDelivery(client, null);
            final RemoteDecodeCall call = RemoteDecodeCall.open(client, Json.strict(), aborts, 8, "alice", 1, 1, Duration.ofSeconds(10),
                Duration.ofSeconds(5));
            final long t0 = System.nanoTime();
            final IllegalStateException e = assertThrows(IllegalStateException.class, () -> {
                final DecodeCall.Admitted a = call.awaitAdmission(Duration.ofSeconds(8));
                throw new AssertionError("the wait for admission ended with " + a + " after "
                    + (System.nanoTime() - t0) / 1_000_000 + " ms on a stream that ended at once");
            });
            assertFalse(e instanceof io.kvpool.examples.server.role.RoleUnavailableException, e::toString);
        } finally {
            s.stop(0);
        }
    }

    /**
     * The health probe reads a role's status with the same strict parser as the router's own reads: a status that is
     * not one JSON document (data after it) is garbage, not a role that is up.
     */
    @Test
    void theProbeRefusesAStatusTheRouterCannotRead() throws Exception {
        final byte[] status = new ObjectMapper().writeValueAsBytes(RemoteFixtures.statusJson(new RoleStatus(PrefillRole.ROLE,
            new PoolView(PrefillRole.ROLE, 0, "", Map.of()), Map.of(), Map.of()), 0, true, ServerTests.small().build(), 128, 512));
        final byte[] garbage = (new String(status, StandardCharsets.UTF_8) + "{\"ready\":false}").getBytes(StandardCharsets.UTF_8);
        final HttpServer s = server();
        s.createContext("/internal/status", ex -> {
            ex.getRequestBody().readAllBytes();
            ex.getResponseHeaders().set("Content-Type", "application/json");
            ex.sendResponseHeaders(200, garbage.length);
            try (OutputStream o = ex.getResponseBody()) {
                o.write(garbage);
            }
        });
        s.start();
        try (RoleClient client = new RoleClient(PrefillRole.ROLE, base(s), Json.strict());
             RoleHealth health = new RoleHealth(client, PrefillRole.ROLE, false)) {
            assertFalse(RemoteStatus.read(client, PrefillRole.ROLE).status().up(), "the router's own read takes it for garbage");
            final RoleHealth.State st = health.check().result().get(5, TimeUnit.SECONDS);
            assertNotNull(st);
            assertFalse(st.ready(), "the probe read a status the router's own read refuses as up");
        } finally {
            s.stop(0);
        }
    }
}
