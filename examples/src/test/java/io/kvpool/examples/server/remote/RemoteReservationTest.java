package io.kvpool.examples.server.remote;

import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.JsonNode;
import io.kvpool.examples.server.Await;
import io.kvpool.examples.server.RoleServer;
import io.kvpool.examples.server.ServerTests;
import io.kvpool.examples.server.config.Topology;
import io.kvpool.examples.server.role.Rejection;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;

import java.net.URI;
import java.nio.file.Path;
import java.time.Duration;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

/** The router's reservation at a decode process: its refusal read as typed, and a build without reservations tolerated. */
@Timeout(value = 60, unit = TimeUnit.SECONDS)
class RemoteReservationTest {

    @Test
    void aDecodeRefusalOfAReservationIsTyped() throws Exception {
        final AtomicInteger calls = new AtomicInteger();
        final StubRole decode = stub(200, "{\"admitted\":false,\"rejection\":{\"role\":\"decode\",\"reason\":\"RETRY_LATER\","
            + "\"message\":\"decode pool: 0 pages free\",\"numbers\":{\"pages_available\":0}}}", calls);
        try (RemoteDecode d = new RemoteDecode(new RoleClient("decode", decode.base(), new ObjectMapper()), new ObjectMapper(),
            Duration.ofSeconds(5))) {
            final Rejection r = d.reserve(7, "alice", 5, 8);
            assertNotNull(r);
            assertEquals(Rejection.Reason.RETRY_LATER, r.reason());
            assertEquals(0L, r.numbers().get("pages_available"));
            assertEquals(1, calls.get());
            d.unreserve(7, "test: the request ends"); // refused: nothing to give back, nothing posted
            d.close();
            assertEquals(1, calls.get(), decode.paths()::toString);
        } finally {
            decode.close();
        }
    }

    @Test
    void onlyAReservationTheProcessMayHoldIsGivenBack() throws Exception {
        final AtomicInteger calls = new AtomicInteger();
        try (StubRole decode = stub(200, "{\"admitted\":true}", calls)) {
            final RemoteDecode d = new RemoteDecode(new RoleClient("decode", decode.base(), new ObjectMapper()), new ObjectMapper(),
                Duration.ofSeconds(5));
            assertNull(d.reserve(7, "alice", 5, 8));
            d.unreserve(7, "test: request 7 ended before its decode call");
            d.unreserve(7, "test: a second give-back of 7 posts nothing");
            d.close();
            assertEquals(1, decode.paths().stream().filter("/internal/unreserve"::equals).count(), decode.paths()::toString);
        }
    }

    @Test
    void aGiveBackNamingTheOfferingEngineGoesOutAfterTheReservationWentBack() throws Exception {
        // the router gives a leaving client's reservation back at once, and names the engine holding the offer only when
        // prefill's answer comes: that second give-back is how the engine hears it, behind a balancer
        final AtomicInteger calls = new AtomicInteger();
        try (StubRole decode = stub(200, "{\"admitted\":true}", calls)) {
            final RemoteDecode d = new RemoteDecode(new RoleClient("decode", decode.base(), new ObjectMapper()), new ObjectMapper(),
                Duration.ofSeconds(5));
            assertNull(d.reserve(7, "alice", 5, 8));
            d.unreserve(7, "test: the client left while prefill computed");
            d.unreserve(7, "test: prefill answered; the request ended", 0xa1b2L);
            d.unreserve(7, "test: a give-back naming no engine, after both, posts nothing");
            d.close();
            final java.util.List<String> giveBacks = decode.calls().stream().filter(c -> c.startsWith("/internal/unreserve")).toList();
            assertEquals(2, giveBacks.size(), decode.calls()::toString);
            // delivered in the background, in either order: one names no engine, the other the offering one
            final String named = "\"prefill_instance\":\"" + io.kvpool.examples.server.role.RoleStatus.hex(0xa1b2L) + "\"";
            assertEquals(1, giveBacks.stream().filter(c -> c.contains(named)).count(), giveBacks::toString);
            assertEquals(1, giveBacks.stream().filter(c -> !c.contains("prefill_instance")).count(), giveBacks::toString);
        }
    }

    @Test
    void aReservationWhoseDecodeCallFailedIsStillGivenBack() throws Exception {
        try (StubRole decode = StubRole.start("decode", path -> switch (path) {
            case "/internal/reserve" -> new StubRole.Reply(200, "{\"admitted\":true}");
            case "/internal/decode" -> StubRole.Reply.error(500, path); // the call failed: the reservation is still there
            default -> StubRole.Reply.NO_CONTENT;
        })) {
            final RemoteDecode d = new RemoteDecode(new RoleClient("decode", decode.base(), new ObjectMapper()), new ObjectMapper(),
                Duration.ofSeconds(5));
            assertNull(d.reserve(7, "alice", 5, 8));
            assertThrows(IllegalStateException.class, () -> d.start(7, "alice", 5, 8));
            d.unreserve(7, "test: the request ended without a decode call");
            d.close();
            assertEquals(java.util.List.of("/internal/reserve", "/internal/decode", "/internal/unreserve"), decode.paths());
        }
    }

    @Test
    void aReserveCallCutShortByTheRoutersOwnInterruptDoesNotCountTheRoleLost() throws Exception {
        final java.util.concurrent.CountDownLatch arrived = new java.util.concurrent.CountDownLatch(1);
        final java.util.concurrent.CountDownLatch release = new java.util.concurrent.CountDownLatch(1);
        try (StubRole decode = StubRole.start("decode", path -> {
            if (path.equals("/internal/reserve")) {
                arrived.countDown();
                try {
                    release.await(); // a decode slow to answer
                } catch (InterruptedException e) {
                    Thread.currentThread().interrupt();
                }
                return new StubRole.Reply(200, "{\"admitted\":true}");
            }
            return StubRole.Reply.NO_CONTENT;
        });
             RemoteDecode d = new RemoteDecode(new RoleClient("decode", decode.base(), new ObjectMapper()), new ObjectMapper(),
                 Duration.ofSeconds(5))) {
            Await.until(() -> d.health().state() != null && d.health().state().ready(), Duration.ofSeconds(10),
                () -> "the first probe found decode ready: " + d.health().state());
            final java.util.concurrent.CompletableFuture<Throwable> thrown = new java.util.concurrent.CompletableFuture<>();
            final Thread caller = Thread.ofPlatform().start(() -> {
                try {
                    d.reserve(7, "alice", 5, 8);
                    thrown.complete(null);
                } catch (Throwable t) {
                    thrown.complete(t);
                }
            });
            assertTrue(arrived.await(10, TimeUnit.SECONDS), "the reserve call reached decode");
            caller.interrupt(); // the router's own thread, interrupted (its server stopping, say)
            final Throwable t = thrown.get(10, TimeUnit.SECONDS);
            assertTrue(t instanceof IllegalStateException, () -> "the call ends with an exception: " + t);
            final RoleHealth.State s = d.health().state();
            assertTrue(s.ready(), () -> "an interrupt of the router's thread is no news of the role: " + s);
            assertNull(d.unavailable(), "the next request is let through");
            release.countDown();
            d.unreserve(7, "test: the call got no answer, decode may hold it"); // still given back
            d.close();
            assertTrue(decode.paths().contains("/internal/unreserve"), decode.paths()::toString);
        }
    }

    @Test
    void aDecodeOfABuildWithoutReservationsIsAskedOnceThenAdmitsAtItsDecodeCall() throws Exception {
        final AtomicInteger calls = new AtomicInteger();
        final StubRole decode = stub(404, "{\"error\":{\"type\":\"not_found\",\"reason\":\"no_such_path\",\"message\":\"no endpoint\"}}",
            calls);
        try (RemoteDecode d = new RemoteDecode(new RoleClient("decode", decode.base(), new ObjectMapper()), new ObjectMapper(),
            Duration.ofSeconds(5))) {
            assertNull(d.reserve(7, "alice", 5, 8), "no reservation: the request goes on, and decode admits at its call");
            assertNull(d.reserve(8, "alice", 5, 8));
            assertEquals(1, calls.get(), "asked once");
            d.unreserve(7, "test"); // nothing to give back: nothing is posted for it
            d.close(); // waits for what is being delivered
            assertEquals(1, calls.get());
        } finally {
            decode.close();
        }
    }

    @Test
    void aReservationOverHttpHoldsDecodePagesUntilGivenBack(@TempDir Path dir) throws Exception {
        // one work dir: prefill finds decode's transfer socket there, and decode reserves only with its link up
        try (RoleServer decodeRole = RoleServer.start(ServerTests.small().role(Topology.Role.DECODE).workDir(dir).build());
             RoleServer prefillRole = RoleServer.start(ServerTests.small().role(Topology.Role.PREFILL).workDir(dir).build());
             RemoteDecode d = new RemoteDecode(new RoleClient("decode", decodeRole.baseUri(), new ObjectMapper()), new ObjectMapper(),
                 Duration.ofSeconds(5))) {
            Await.until(() -> status(decodeRole.baseUri()).path("ready").asBoolean(), Duration.ofSeconds(30),
                () -> "linked");
            assertNull(d.reserve(7, "alice", 40, 8));
            final JsonNode held = status(decodeRole.baseUri());
            assertEquals(1, held.path("counters").path("reserved_ahead").asLong(), held::toString);
            assertEquals(3, held.path("pool").path("counters").path("reserved").asLong(), () -> "48 tokens: 3 pages of 16 promised: " + held);
            d.unreserve(7, "test: the request ended before its decode call");
            Await.until(() -> status(decodeRole.baseUri()).path("pool").path("counters").path("reserved").asLong() == 0
                    && status(decodeRole.baseUri()).path("pool").path("counters").path("open_sequences").asLong() == 0, Duration.ofSeconds(10),
                () -> "the reservation given back: " + status(decodeRole.baseUri()));
        }
    }

    private static JsonNode status(URI role) {
        try {
            return new ObjectMapper().readTree(java.net.http.HttpClient.newHttpClient().send(java.net.http.HttpRequest.newBuilder(
                role.resolve("internal/status")).build(), java.net.http.HttpResponse.BodyHandlers.ofByteArray()).body());
        } catch (java.io.IOException e) {
            throw new java.io.UncheckedIOException(e);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            throw new IllegalStateException(e);
        }
    }

    /** A decode role whose {@code /internal/reserve} answers {@code status, body}; every call to it, or to another path, counted. */
    private static StubRole stub(int status, String body, AtomicInteger calls) {
        return StubRole.start("decode", path -> {
            calls.incrementAndGet(); // a reservation, or anything else posted (none is expected)
            return path.equals("/internal/reserve") ? new StubRole.Reply(status, body) : StubRole.Reply.NO_CONTENT;
        });
    }
}
