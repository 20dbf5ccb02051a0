package io.kvpool.examples.server.remote;

import com.fasterxml.jackson.databind.ObjectMapper;
import com.sun.net.httpserver.HttpServer;
import io.kvpool.examples.server.role.DecodeCall;
import io.kvpool.examples.server.role.DecodeRole;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

import java.io.OutputStream;
import java.net.InetAddress;
import java.net.InetSocketAddress;
import java.net.URI;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * The router's own abort of a remote decode call ends every wait on it at once, whatever the decode process
 * sends (here: nothing after "admitted"), and a stream the process ends after the abort is read to its end; a
 * malformed event after the commit is the role lost, as a broken stream is.
 */
@Timeout(value = 30, unit = TimeUnit.SECONDS)
class RemoteDecodeCallAbortTest {

    @Test
    void anAbortEndsAWaitForTheTransferAtOnce() throws Exception {
        final CountDownLatch hold = new CountDownLatch(1);
        final HttpServer decode = HttpServer.create(new InetSocketAddress(InetAddress.getLoopbackAddress(), 0), 0);
        decode.setExecutor(java.util.concurrent.Executors.newVirtualThreadPerTaskExecutor());
        decode.createContext("/internal/decode", ex -> { // admits, then says nothing more until the test ends
            ex.getRequestBody().readAllBytes();
            ex.sendResponseHeaders(200, 0);
            try (OutputStream out = ex.getResponseBody()) {
                out.write("{\"event\":\"admitted\"}\n".getBytes(StandardCharsets.UTF_8));
                out.flush();
                hold.await(20, TimeUnit.SECONDS);
            } catch (InterruptedException | java.io.IOException e) {
                // the client dropped the stream
            }
        });
        decode.createContext("/internal/abort", ex -> { // acknowledges, sends no event on the stream
            ex.getRequestBody().readAllBytes();
            final byte[] b = "{}".getBytes(StandardCharsets.UTF_8);
            ex.sendResponseHeaders(200, b.length);
            try (OutputStream out = ex.getResponseBody()) {
                out.write(b);
            }
        });
        decode.start();
        try {
            final ObjectMapper json = new ObjectMapper();
            final RoleClient client = new RoleClient(DecodeRole.ROLE, URI.create("http://127.0.0.1:" + decode.getAddress().getPort() + "/"), json);
            final RemoteDecodeCall call = RemoteDecodeCall.open(client, json, 42, "alice", 8, 2, Duration.ofSeconds(10));
            final DecodeCall.Admitted admitted = call.awaitAdmission(Duration.ofSeconds(10));
            assertNotNull(admitted);
            assertTrue(admitted.admitted());
            call.abort("router closing");
            final long t0 = System.nanoTime();
            final DecodeCall.TransferOutcome o = call.awaitTransfer(Duration.ofSeconds(5));
            final long ms = (System.nanoTime() - t0) / 1_000_000;
            assertNotNull(o, "the wait for the transfer outlived the abort by 5 s");
            assertFalse(o.committed());
            assertEquals("ABORTED", o.failure());
            assertTrue(ms < 2_000, "took " + ms + " ms");
        } finally {
            hold.countDown();
            decode.stop(0);
        }
    }

    /** A decode stub on the HTTP front: admits, then holds the stream until {@code end} counts down, then ends it. */
    private static io.kvpool.examples.http.HttpFront stub(CountDownLatch end, CountDownLatch clientGone) throws java.io.IOException {
        return io.kvpool.examples.http.HttpFront.start("127.0.0.1", 0, io.kvpool.examples.http.HttpLimits.DEFAULTS, call -> {
            if (call.path().equals("/internal/abort")) {
                end.countDown(); // as the decode role does: the abort ends the stream
                call.respond(204, "application/json", new byte[0]);
                return;
            }
            call.onClientGone(clientGone::countDown);
            call.startStream(200, "application/x-ndjson");
            call.write("{\"event\":\"admitted\"}\n");
            end.await(20, TimeUnit.SECONDS);
            call.endStream();
        });
    }

    @Test
    void aStreamTheProcessEndsAfterTheAbortIsReadToItsEndNotClosed() throws Exception {
        final CountDownLatch end = new CountDownLatch(1);
        final CountDownLatch gone = new CountDownLatch(1);
        try (io.kvpool.examples.http.HttpFront decode = stub(end, gone)) {
            final ObjectMapper json = new ObjectMapper();
            final RoleClient client = new RoleClient(DecodeRole.ROLE, decode.baseUri(), json);
            final RemoteDecodeCall call = RemoteDecodeCall.open(client, json, 42, "alice", 8, 2, Duration.ofSeconds(10));
            assertTrue(call.awaitAdmission(Duration.ofSeconds(10)).admitted());
            call.abort("client gone");
            assertFalse(gone.await(RemoteDecodeCall.DROP_AFTER.toMillis() * 2, TimeUnit.MILLISECONDS),
                "the stream was closed: its connection may already have been back in the client's pool");
            assertEquals(0L, decode.closedConnections().get("client"), decode.closedConnections()::toString);
        }
    }

    @Test
    void aStreamTheProcessDoesNotEndIsDroppedAfterDropAfter() throws Exception {
        // and until then it is counted as closing: it holds a connection of the role after its request left the
        // router's count (RemoteDecode.maxRequestsInFlight subtracts it)
        final CountDownLatch never = new CountDownLatch(2); // the abort counts one down: the stream stays open
        final CountDownLatch gone = new CountDownLatch(1);
        try (io.kvpool.examples.http.HttpFront decode = stub(never, gone)) {
            final ObjectMapper json = new ObjectMapper();
            final RoleClient client = new RoleClient(DecodeRole.ROLE, decode.baseUri(), json);
            final AbortDelivery aborts = new AbortDelivery(client, null);
            final RemoteDecodeCall call = RemoteDecodeCall.open(client, json, aborts, 43, "alice", 8, 2, Duration.ofSeconds(10),
                Duration.ofSeconds(10));
            assertTrue(call.awaitAdmission(Duration.ofSeconds(10)).admitted());
            assertEquals(0, aborts.streamsClosing());
            final long t0 = System.nanoTime();
            call.abort("client gone");
            assertEquals(1, aborts.streamsClosing(), "the stream holds a connection after its request left the count");
            assertTrue(gone.await(10, TimeUnit.SECONDS), "a stream the process does not end is dropped");
            final long ms = (System.nanoTime() - t0) / 1_000_000;
            assertTrue(ms >= RemoteDecodeCall.DROP_AFTER.toMillis() / 2, ms + " ms: dropped before the process had its chance to end it");
            io.kvpool.examples.server.Await.until(() -> aborts.streamsClosing() == 0, Duration.ofSeconds(10),
                () -> "closing streams: " + aborts.streamsClosing());
            never.countDown();
        }
    }
    /** A decode stub that admits, then sends {@code beats} heartbeats 100 ms apart, then (if {@code commit}) the commit, then holds. */
    private static io.kvpool.examples.http.HttpFront beating(int beats, boolean commit, CountDownLatch clientGone) throws java.io.IOException {
        return io.kvpool.examples.http.HttpFront.start("127.0.0.1", 0, io.kvpool.examples.http.HttpLimits.DEFAULTS, call -> {
            if (call.path().equals("/internal/abort")) {
                call.respond(204, "application/json", new byte[0]);
                return;
            }
            call.onClientGone(clientGone::countDown);
            call.startStream(200, "application/x-ndjson");
            call.write("{\"event\":\"admitted\"}\n");
            for (int i = 0; i < beats; i++) {
                Thread.sleep(100);
                call.write("{\"event\":\"waiting\"}\n");
            }
            if (commit) {
                call.write("{\"event\":\"transfer\",\"committed\":true}\n");
            }
            clientGone.await(20, TimeUnit.SECONDS); // then silent: a frozen process, or a path that drops packets
            call.endStream();
        });
    }

    @Test
    void aStreamSilentBeforeTheCommitIsLostAfterItsSilenceLimitNotAtTheDeadline() throws Exception {
        final CountDownLatch gone = new CountDownLatch(1);
        try (io.kvpool.examples.http.HttpFront decode = beating(0, false, gone)) {
            final ObjectMapper json = new ObjectMapper();
            final RoleClient client = new RoleClient(DecodeRole.ROLE, decode.baseUri(), json);
            final RemoteDecodeCall call = RemoteDecodeCall.open(client, json, new AbortDelivery(client, null), 44, "alice", 8, 2,
                Duration.ofSeconds(30), Duration.ofMillis(500));
            assertTrue(call.awaitAdmission(Duration.ofSeconds(10)).admitted());
            final long t0 = System.nanoTime();
            final DecodeCall.TransferOutcome o = awaitOutcome(call);
            final long ms = (System.nanoTime() - t0) / 1_000_000;
            assertNotNull(o, "still waiting after 10 s for a stream silent since its admission");
            assertFalse(o.committed());
            assertEquals("ROLE_LOST", o.failure(), o.message());
            assertTrue(o.message().contains("stopped answering"), o.message());
            assertTrue(ms >= 300 && ms < 3_000, ms + " ms");
            assertTrue(gone.await(5, TimeUnit.SECONDS), "the silent stream was dropped");
        }
    }

    @Test
    void aStreamThatKeepsBeatingIsNotLostHoweverLongTheTransferTakes() throws Exception {
        final CountDownLatch gone = new CountDownLatch(1);
        try (io.kvpool.examples.http.HttpFront decode = beating(15, true, gone)) { // 1.5 s of heartbeats, then the commit
            final ObjectMapper json = new ObjectMapper();
            final RoleClient client = new RoleClient(DecodeRole.ROLE, decode.baseUri(), json);
            final RemoteDecodeCall call = RemoteDecodeCall.open(client, json, new AbortDelivery(client, null), 45, "alice", 8, 2,
                Duration.ofSeconds(30), Duration.ofMillis(500));
            assertTrue(call.awaitAdmission(Duration.ofSeconds(10)).admitted());
            final DecodeCall.TransferOutcome o = awaitOutcome(call);
            assertNotNull(o);
            assertTrue(o.committed(), o::toString);
            call.abort("done with the test");
        }
    }
    @Test
    void aProcessWithLongerHeartbeatsIsGivenTwentyFiveOfThemNotTheRoutersLimit() throws Exception {
        final CountDownLatch gone = new CountDownLatch(1);
        try (io.kvpool.examples.http.HttpFront decode = io.kvpool.examples.http.HttpFront.start("127.0.0.1", 0,
            io.kvpool.examples.http.HttpLimits.DEFAULTS, call -> {
                if (call.path().equals("/internal/abort")) {
                    call.respond(204, "application/json", new byte[0]);
                    return;
                }
                call.onClientGone(gone::countDown);
                call.startStream(200, "application/x-ndjson");
                call.write("{\"event\":\"waiting\",\"heartbeat_ms\":1000}\n{\"event\":\"admitted\"}\n");
                Thread.sleep(1_500); // longer than the router's own limit below, shorter than 25 of its heartbeats
                call.write("{\"event\":\"transfer\",\"committed\":true}\n");
                gone.await(20, TimeUnit.SECONDS);
                call.endStream();
            })) {
            final ObjectMapper json = new ObjectMapper();
            final RoleClient client = new RoleClient(DecodeRole.ROLE, decode.baseUri(), json);
            final RemoteDecodeCall call = RemoteDecodeCall.open(client, json, new AbortDelivery(client, null), 47, "alice", 8, 2,
                Duration.ofSeconds(30), Duration.ofMillis(500));
            assertTrue(call.awaitAdmission(Duration.ofSeconds(10)).admitted());
            final DecodeCall.TransferOutcome o = awaitOutcome(call);
            assertNotNull(o);
            assertTrue(o.committed(), o::toString);
            call.abort("done with the test");
        }
    }

    @Test
    void anAbortAfterTheProcessEndedTheRequestTellsItNothing() throws Exception {
        final java.util.concurrent.atomic.AtomicInteger posts = new java.util.concurrent.atomic.AtomicInteger();
        try (io.kvpool.examples.http.HttpFront decode = countingAborts(posts, "{\"event\":\"admitted\"}\n"
            + "{\"event\":\"transfer\",\"committed\":true}\n{\"event\":\"done\",\"text\":\"\",\"completion_tokens\":0,\"kv\":{}}\n", 0)) {
            final ObjectMapper json = new ObjectMapper();
            final RoleClient client = new RoleClient(DecodeRole.ROLE, decode.baseUri(), json);
            final AbortDelivery aborts = new AbortDelivery(client, null);
            final RemoteDecodeCall call = RemoteDecodeCall.open(client, json, aborts, 46, "alice", 8, 2, Duration.ofSeconds(10),
                Duration.ofSeconds(10));
            assertTrue(call.awaitTransfer(Duration.ofSeconds(10)).committed());
            io.kvpool.examples.server.Await.until(call::finishedForTests, Duration.ofSeconds(10), () -> "the stream's last event");
            call.abort("the client left after its answer"); // what the router's client-gone hook does after the end
            aborts.close(Duration.ofSeconds(5)); // returns once every abort it took was delivered or given up
            assertEquals(0, aborts.delivered() + aborts.pending(), "an abort taken for a request the process had ended");
            assertEquals(0, posts.get(), "an abort posted for a request the process had ended");
        }
    }

    /** Waits for the call's transfer outcome as the router does, in 100 ms slices, for up to 10 s. @return it, or null */
    private static DecodeCall.TransferOutcome awaitOutcome(RemoteDecodeCall call) throws InterruptedException {
        final long t0 = System.nanoTime();
        DecodeCall.TransferOutcome o = null;
        while (o == null && System.nanoTime() - t0 < 10_000_000_000L) {
            o = call.awaitTransfer(Duration.ofMillis(100));
        }
        return o;
    }

    @Test
    void aMalformedEventAfterTheCommitIsTheRoleLostNotAnInternalError() throws Exception {
        // a decode of another build whose "done" lacks a field: before the commit the same is a lost role (503), after
        // it the router answers 502 role_lost, as for a stream that broke; it was an IllegalArgumentException (500)
        try (io.kvpool.examples.http.HttpFront decode = io.kvpool.examples.http.HttpFront.start("127.0.0.1", 0,
            io.kvpool.examples.http.HttpLimits.DEFAULTS, call -> {
                call.startStream(200, "application/x-ndjson");
                call.write("{\"event\":\"admitted\"}\n{\"event\":\"transfer\",\"committed\":true}\n"
                    + "{\"event\":\"token\",\"text\":\"a\"}\n{\"event\":\"done\",\"text\":\"a\",\"completion_tokens\":1}\n");
                call.endStream();
            })) {
            final ObjectMapper json = new ObjectMapper();
            final RoleClient client = new RoleClient(DecodeRole.ROLE, decode.baseUri(), json);
            final RemoteDecodeCall call = RemoteDecodeCall.open(client, json, 44, "alice", 8, 2, Duration.ofSeconds(10));
            assertTrue(call.awaitAdmission(Duration.ofSeconds(10)).admitted());
            assertTrue(call.awaitTransfer(Duration.ofSeconds(10)).committed());
            final java.util.List<String> tokens = new java.util.ArrayList<>();
            final io.kvpool.examples.server.role.RoleLostException e = org.junit.jupiter.api.Assertions.assertThrows(
                io.kvpool.examples.server.role.RoleLostException.class, () -> call.generate(2, tokens::add));
            assertTrue(e.getMessage().contains("malformed 'done' event") && e.getMessage().contains("kv"), e.getMessage());
            assertEquals(java.util.List.of("a"), tokens);
        }
    }

    @Test
    void anAbortRightAfterARejectionTellsTheProcessNothingAndStopsCountingOnceTheStreamEnds() throws Exception {
        // the router aborts a rejected request as soon as its admission wait wakes, usually before the reader has read
        // the stream to its end: the request is finished already (nothing to post), and the stream counts as closing
        // only until the reader reaches its end, not for the whole DROP_AFTER
        final java.util.concurrent.atomic.AtomicInteger posts = new java.util.concurrent.atomic.AtomicInteger();
        try (io.kvpool.examples.http.HttpFront decode = countingAborts(posts, "{\"event\":\"rejected\",\"rejection\":{"
            + "\"role\":\"decode\",\"reason\":\"RETRY_LATER\",\"message\":\"full\",\"numbers\":{}}}\n", 100)) {
            final ObjectMapper json = new ObjectMapper();
            final RoleClient client = new RoleClient(DecodeRole.ROLE, decode.baseUri(), json);
            final AbortDelivery aborts = new AbortDelivery(client, null);
            final RemoteDecodeCall call = RemoteDecodeCall.open(client, json, aborts, 47, "alice", 8, 2, Duration.ofSeconds(10),
                Duration.ofSeconds(10));
            assertFalse(call.awaitAdmission(Duration.ofSeconds(10)).admitted());
            final long t0 = System.nanoTime();
            call.abort("request 47 ended without a completion"); // as Router's finally does, at once
            io.kvpool.examples.server.Await.until(() -> aborts.streamsClosing() == 0, Duration.ofSeconds(10),
                () -> "closing streams: " + aborts.streamsClosing());
            final long ms = (System.nanoTime() - t0) / 1_000_000;
            assertTrue(ms < RemoteDecodeCall.DROP_AFTER.toMillis() / 2, ms + " ms counted as closing after its stream ended");
            aborts.close(Duration.ofSeconds(5));
            assertEquals(0, posts.get(), "an abort posted for a request the process had rejected");
            client.close();
        }
    }

    @Test
    void aCallWhoseStreamWasReadToItsEndIsNotCountedAsClosingWhenAborted() throws Exception {
        // the router aborts every request that ends without a completion, a rejected one too: its stream holds no
        // connection by then, so it must not take a request off the router's cap for DROP_AFTER
        try (StubRole decode = StubRole.start("decode", path -> path.equals("/internal/decode")
                ? new StubRole.Reply(200, "{\"event\":\"rejected\",\"rejection\":{\"role\":\"decode\",\"reason\":\"RETRY_LATER\","
                    + "\"message\":\"full\",\"numbers\":{}}}\n") : StubRole.Reply.NO_CONTENT)) {
            final ObjectMapper json = new ObjectMapper();
            final RoleClient client = new RoleClient(DecodeRole.ROLE, decode.base(), json);
            final AbortDelivery aborts = new AbortDelivery(client, null);
            final RemoteDecodeCall call = RemoteDecodeCall.open(client, json, aborts, 45, "alice", 8, 2, Duration.ofSeconds(10),
                Duration.ofSeconds(10));
            assertFalse(call.awaitAdmission(Duration.ofSeconds(10)).admitted());
            io.kvpool.examples.server.Await.until(call::endedForTests, Duration.ofSeconds(10), () -> "the stream read to its end");
            call.abort("request 45 ended without a completion"); // as Router's finally does
            assertEquals(0, aborts.streamsClosing(), "a stream read to its end holds no connection");
            client.close();
        }
    }

    /**
     * A decode stub that streams {@code events} to every decode call, ends the stream {@code endAfterMs} later, and
     * counts the {@code /internal/abort} posts in {@code posts}.
     */
    private static io.kvpool.examples.http.HttpFront countingAborts(java.util.concurrent.atomic.AtomicInteger posts, String events,
                                                                     long endAfterMs) throws Exception {
        return io.kvpool.examples.http.HttpFront.start("127.0.0.1", 0, io.kvpool.examples.http.HttpLimits.DEFAULTS, call -> {
            if (call.path().equals("/internal/abort")) {
                posts.incrementAndGet();
                call.respond(204, "application/json", new byte[0]);
                return;
            }
            call.startStream(200, "application/x-ndjson");
            call.write(events);
            if (endAfterMs > 0) {
                try {
                    Thread.sleep(endAfterMs); // the end of the stream a moment after its last event
                } catch (InterruptedException e) {
                    Thread.currentThread().interrupt();
                }
            }
            call.endStream();
        });
    }
}
