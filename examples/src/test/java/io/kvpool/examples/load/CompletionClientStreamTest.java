package io.kvpool.examples.load;

import io.kvpool.examples.http.HttpFront;
import io.kvpool.examples.http.HttpLimits;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.condition.EnabledIfSystemProperty;

import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTimeoutPreemptively;
import static org.junit.jupiter.api.Assertions.assertTrue;

/** How the load generator's client ends a stream: it reads past {@code [DONE]} to the end before it lets go. */
class CompletionClientStreamTest {

    private static final String PROMPT = "SECRET-t1-1";

    /** A completed stream of the server's shape, with {@code after} sent after {@code [DONE]} and a pause before its end. */
    private static HttpFront server(String after) throws Exception {
        return server(after, 20);
    }

    private static HttpFront server(String after, long pauseMillis) throws Exception {
        return HttpFront.start("127.0.0.1", 0, HttpLimits.DEFAULTS, call -> {
            call.startStream(200, "text/event-stream");
            call.write("data: {\"choices\":[{\"text\":\"x\",\"finish_reason\":null}]}\n\n");
            call.write("data: {\"choices\":[{\"text\":\"\",\"finish_reason\":\"length\"}],\"kvpool\":{\"kv_text\":\"" + PROMPT
                + "\",\"kv_tenants\":[\"t1\"],\"kv_misplaced_tokens\":0}}\n\n");
            call.write("data: [DONE]\n\n" + after);
            Thread.sleep(pauseMillis); // the end comes late: a client that closes at [DONE] closes before it
            call.endStream();
        });
    }

    private static Shot streamed(long i) {
        return new Shot(i, "t1", Shot.Kind.NORMAL, PROMPT, 4, 1, true, -1, null);
    }

    /**
     * A stream closed at {@code [DONE]}, before its end was read, closes its connection, and the JDK client may by
     * then have put that connection back in its pool: the next request on it gets no answer. Read to the end, every
     * stream of a session leaves its one connection open for the next.
     */
    @Test
    void aCompletedStreamIsReadToItsEndAndKeepsItsConnection() throws Exception {
        try (HttpFront front = server("");
             CompletionClient client = new CompletionClient(front.baseUri(), Duration.ofSeconds(10), 1 << 20);
             CompletionClient.Session session = client.session()) {
            for (int i = 0; i < 20; i++) {
                final Outcome o = session.send(streamed(i));
                assertEquals(Outcome.Kind.COMPLETED, o.kind(), o.toString());
            }
            assertEquals(0L, front.closedConnections().get("client"), "streams closed before their end closed their connections");
            assertEquals(1, front.openConnections(), "20 streams one after another on one session use one connection");
        }
    }

    /** Anything but blank lines after {@code [DONE]} is not the documented stream. */
    @Test
    void dataAfterDoneIsUnexpected() throws Exception {
        try (HttpFront front = server("data: {\"late\":1}\n\n");
             CompletionClient client = new CompletionClient(front.baseUri(), Duration.ofSeconds(10), 1 << 20)) {
            final Outcome o = client.send(streamed(0));
            assertEquals(Outcome.Kind.UNEXPECTED, o.kind(), o.toString());
            assertEquals("data_after_done", o.reason(), o.toString());
        }
    }

    /** Another tenant's marker that comes only after {@code [DONE]} is a leak, not only an unexpected answer. */
    @Test
    void anotherTenantsMarkerAfterDoneIsALeak() throws Exception {
        try (HttpFront front = server("data: {\"choices\":[{\"text\":\" SECRET-tenant9-4\"}]}\n\n");
             CompletionClient client = new CompletionClient(front.baseUri(), Duration.ofSeconds(10), 1 << 20)) {
            final Outcome o = client.send(streamed(0));
            assertEquals(Outcome.Kind.UNEXPECTED, o.kind(), o.toString());
            assertEquals("data_after_done", o.reason(), o.toString());
            assertTrue(o.leaked(), () -> "tenant9's marker after [DONE] was not counted: " + o);
        }
    }

    /**
     * A stream the client aborts is read for markers as a completed one is: in its stray lines too, not only in its tokens'
     * text. An abort whose tokens echo its prompt is otherwise clean: a run of such aborts is judged by its pools alone.
     */
    @Test
    void anotherTenantsMarkerOnALineThatIsNotDataIsALeakAlsoInAnAbortedStream() throws Exception {
        final String first = io.kvpool.examples.server.echo.EchoTokenizer.text(io.kvpool.examples.server.echo.EchoTokenizer.encode(PROMPT).get(0));
        for (String stray : new String[] {"event: SECRET-tenant9-4", ": SECRET-tenant9-4", "SECRET-tenant9-4"}) {
            try (HttpFront front = HttpFront.start("127.0.0.1", 0, HttpLimits.DEFAULTS, call -> {
                    call.startStream(200, "text/event-stream");
                    call.write(": admitted\n\n" + stray + "\n");
                    call.write("data: {\"choices\":[{\"text\":\"" + first + "\",\"finish_reason\":null}]}\n\n");
                    Thread.sleep(2_000); // the client aborts here
                    call.endStream();
                });
                 CompletionClient client = new CompletionClient(front.baseUri(), Duration.ofSeconds(10), 1 << 20)) {
                final Outcome o = client.send(new Shot(0, "t1", Shot.Kind.NORMAL, PROMPT, 4, 2, true, 1, null));
                assertEquals(Outcome.Kind.ABORTED, o.kind(), o::toString);
                assertTrue(o.leaked(), () -> "tenant9's marker on '" + stray + "' of an aborted stream was not counted: " + o);
                assertFalse(LoadReport.clean(new LoadGenerator.Result(List.of(o), 1_000_000L, 1), new PoolCheck(true, List.of())), o::toString);
            }
        }
    }

    /** A comment after {@code [DONE]} is no data, but it is read for markers as a comment before it is: a leak is a leak. */
    @Test
    void anotherTenantsMarkerInACommentAfterDoneIsALeak() throws Exception {
        try (HttpFront front = server(": SECRET-tenant9-4\n\n");
             CompletionClient client = new CompletionClient(front.baseUri(), Duration.ofSeconds(10), 1 << 20)) {
            final Outcome o = client.send(streamed(0));
            assertTrue(o.leaked(), () -> "tenant9's marker in a comment after [DONE] was not counted: " + o);
        }
    }

    /** A line of the stream that is not data (an SSE field or comment, or a stray line) is read for markers too. */
    @Test
    void anotherTenantsMarkerOnALineThatIsNotDataIsALeak() throws Exception {
        for (String stray : new String[] {"event: SECRET-tenant9-4", ": SECRET-tenant9-4", "SECRET-tenant9-4"}) {
            try (HttpFront front = HttpFront.start("127.0.0.1", 0, HttpLimits.DEFAULTS, call -> {
                    call.startStream(200, "text/event-stream");
                    call.write(stray + "\n");
                    call.write("data: {\"choices\":[{\"text\":\"x\",\"finish_reason\":null}]}\n\n");
                    call.write("data: {\"choices\":[{\"text\":\"\",\"finish_reason\":\"length\"}],\"kvpool\":{\"kv_text\":\"" + PROMPT
                        + "\",\"kv_tenants\":[\"t1\"],\"kv_misplaced_tokens\":0}}\n\n");
                    call.write("data: [DONE]\n\n");
                    call.endStream();
                });
                 CompletionClient client = new CompletionClient(front.baseUri(), Duration.ofSeconds(10), 1 << 20)) {
                final Outcome o = client.send(streamed(0));
                assertTrue(o.leaked(), () -> "tenant9's marker on '" + stray + "' was not counted: " + o);
            }
        }
    }

    /** The same when the stream then does not end: what came before the timeout is read for markers. */
    @Test
    void anotherTenantsMarkerAfterDoneIsALeakAlsoWhenTheStreamDoesNotEnd() throws Exception {
        try (HttpFront front = server("data: {\"kvpool\":{\"kv_tenants\":[\"tenant2\"]}}\n\n", 2_000);
             CompletionClient client = new CompletionClient(front.baseUri(), Duration.ofMillis(300), 1 << 20)) {
            final Outcome o = client.send(streamed(0));
            assertEquals("no_end_after_done", o.reason(), o.toString());
            assertTrue(o.leaked(), () -> "tenant2 after [DONE] was not counted: " + o);
        }
    }

    /** The prompt of the shots below: request 17 of tenant3, 9 tokens. */
    private static final String MINE = Mix.prompt("tenant3", 17, 9);

    /** A stream of these data lines, each its own event, then {@code [DONE]} and the end. */
    private static HttpFront serving(String... data) throws Exception {
        return HttpFront.start("127.0.0.1", 0, HttpLimits.DEFAULTS, call -> {
            call.startStream(200, "text/event-stream");
            call.write(": admitted\n\n");
            for (String d : data) {
                call.write("data: " + d + "\n\n");
            }
            call.write("data: [DONE]\n\n");
            call.endStream();
        });
    }

    /** A token chunk of MINE's token {@code i}: {@code finish_reason} null, as the server writes it. */
    private static String token(int i) {
        final String text = io.kvpool.examples.server.echo.EchoTokenizer.text(io.kvpool.examples.server.echo.EchoTokenizer.encode(MINE).get(i));
        return "{\"choices\":[{\"index\":0,\"text\":\"" + text + "\",\"finish_reason\":null}]}";
    }

    /** A final chunk with a {@code kvpool} section whose KV text is {@code kvText}, all of tenant3. */
    private static String last(String kvText) {
        return "{\"choices\":[{\"index\":0,\"text\":\"\",\"finish_reason\":\"length\"}],\"kvpool\":{\"kv_text\":\"" + kvText
            + "\",\"kv_tenants\":[\"tenant3\"],\"kv_misplaced_tokens\":0}}";
    }

    /** {@return the outcome of one 4-token shot of MINE against this stream, asserting that the run's verdict is FAIL} */
    private static Outcome failsTheRun(String... data) throws Exception {
        try (HttpFront front = serving(data);
             CompletionClient client = new CompletionClient(front.baseUri(), Duration.ofSeconds(10), 1 << 20)) {
            final Outcome o = client.send(new Shot(0, "tenant3", Shot.Kind.NORMAL, MINE, 9, 4, true, -1, null));
            assertFalse(LoadReport.clean(new LoadGenerator.Result(List.of(o), 1_000_000L, 1), new PoolCheck(true, List.of())),
                () -> "judged clean: " + o);
            return o;
        }
    }

    /** The same stream as the server writes it is clean: the cases below differ from it in one chunk. */
    @Test
    void theServersStreamShapeIsClean() throws Exception {
        try (HttpFront front = serving(token(0), token(1), last(MINE));
             CompletionClient client = new CompletionClient(front.baseUri(), Duration.ofSeconds(10), 1 << 20)) {
            final Outcome o = client.send(new Shot(0, "tenant3", Shot.Kind.NORMAL, MINE, 9, 4, true, -1, null));
            assertEquals(Outcome.Kind.COMPLETED, o.kind(), o::toString);
            assertTrue(LoadReport.clean(new LoadGenerator.Result(List.of(o), 1_000_000L, 1), new PoolCheck(true, List.of())), o::toString);
        }
    }

    /**
     * A chunk with no {@code finish_reason} key is neither a token chunk ({@code null}) nor the final chunk (a reason): its
     * text, here not the prompt's echo, must not go unread by the echo check.
     */
    @Test
    void aChunkWithoutAFinishReasonKeyIsUnexpected() throws Exception {
        final Outcome o = failsTheRun(token(0), "{\"choices\":[{\"index\":0,\"text\":\" not the echo\"}]}", token(1), last(MINE));
        assertEquals(Outcome.Kind.UNEXPECTED, o.kind(), o::toString);
        assertEquals("malformed_chunk", o.reason(), o::toString);
    }

    /**
     * A stream has one {@code kvpool} section, on its one final chunk: a second final chunk, or a section on a token chunk,
     * would leave one section (here another request's KV of the same tenant, which holds no foreign marker) unchecked.
     */
    @Test
    void aSecondKvpoolSectionIsUnexpected() throws Exception {
        final String other = Mix.prompt("tenant3", 18, 9);
        final String tokenWithKv = token(1).replace("\"finish_reason\":null}]", "\"finish_reason\":null}],\"kvpool\":{\"kv_text\":\""
            + other + "\",\"kv_tenants\":[\"tenant3\"],\"kv_misplaced_tokens\":0}");
        for (String[] stream : new String[][] {{token(0), token(1), last(other), last(MINE)}, {token(0), tokenWithKv, last(MINE)}}) {
            final Outcome o = failsTheRun(stream);
            assertEquals(Outcome.Kind.UNEXPECTED, o.kind(), o::toString);
            assertEquals("malformed_chunk", o.reason(), o::toString);
        }
    }

    /** A comment line after {@code [DONE]} is not data; a stream that does not end is given up after the client's timeout. */
    @Test
    void aStreamThatDoesNotEndAfterDoneIsGivenUpAfterTheTimeout() throws Exception {
        try (HttpFront front = server(": still here\n\n");
             CompletionClient client = new CompletionClient(front.baseUri(), Duration.ofSeconds(10), 1 << 20)) {
            assertEquals(Outcome.Kind.COMPLETED, client.send(streamed(0)).kind(), "a comment after [DONE]");
        }
        try (HttpFront front = server("", 2_000);
             CompletionClient client = new CompletionClient(front.baseUri(), Duration.ofMillis(300), 1 << 20)) {
            final long t0 = System.nanoTime();
            final Outcome o = client.send(streamed(0));
            final long ms = (System.nanoTime() - t0) / 1_000_000;
            assertEquals(Outcome.Kind.UNEXPECTED, o.kind(), o.toString());
            assertEquals("no_end_after_done", o.reason(), o.toString());
            assertTrue(ms < 1_900, "gave up after " + ms + " ms, the timeout is 300 ms and the stream ends at 2,000");
        }
    }

    /** A stream that stops before {@code [DONE]} (a request hung in the server) is given up once it sent nothing for the timeout. */
    @Test
    void aStreamThatStallsBeforeDoneIsGivenUpAfterTheTimeout() throws Exception {
        try (HttpFront front = HttpFront.start("127.0.0.1", 0, HttpLimits.DEFAULTS, call -> {
                call.startStream(200, "text/event-stream");
                call.write(": admitted; waiting for the KV transfer\n\n");
                Thread.sleep(5_000); // the request hangs after its headers
                call.endStream();
            });
             // 1 s: the timeout also bounds the wait for the headers, which a cold JVM on a loaded machine took > 300 ms for
             CompletionClient client = new CompletionClient(front.baseUri(), Duration.ofMillis(1_000), 1 << 20)) {
            final long t0 = System.nanoTime();
            final Outcome o = assertTimeoutPreemptively(Duration.ofSeconds(4), () -> client.send(streamed(0)));
            final long ms = (System.nanoTime() - t0) / 1_000_000;
            assertEquals(Outcome.Kind.UNEXPECTED, o.kind(), o.toString());
            assertEquals("stream_stalled", o.reason(), o.toString());
            assertTrue(ms < 3_500, "gave up after " + ms + " ms; the timeout is 1,000 ms and the server hangs for 5,000");
        }
    }

    /**
     * 16 sessions on one client object, 4,000 streams each with no pause before their end: every request finds its
     * answer and no connection is closed. Opt-in ({@code -Dkvpool.soak=true}, ~1 min on 2 cores): a rate, not a
     * case; closing each stream at {@code [DONE]} on one shared client failed 7 times in 4 runs of 64,000 requests.
     */
    @Test
    @EnabledIfSystemProperty(named = "kvpool.soak", matches = "true")
    void sixteenSessionsFindEveryAnswer() throws Exception {
        try (HttpFront front = server("", 0);
             CompletionClient client = new CompletionClient(front.baseUri(), Duration.ofSeconds(30), 1 << 20);
             ExecutorService threads = Executors.newVirtualThreadPerTaskExecutor()) {
            final List<Future<List<Outcome>>> parts = new ArrayList<>();
            for (int t = 0; t < 16; t++) {
                parts.add(threads.submit(() -> {
                    final List<Outcome> bad = new ArrayList<>();
                    try (CompletionClient.Session session = client.session()) {
                        for (int i = 0; i < 4_000; i++) {
                            final Outcome o = session.send(streamed(i));
                            if (o.kind() != Outcome.Kind.COMPLETED) {
                                bad.add(o);
                            }
                        }
                    }
                    return bad;
                }));
            }
            final List<Outcome> bad = new ArrayList<>();
            for (Future<List<Outcome>> f : parts) {
                bad.addAll(f.get());
            }
            assertEquals(List.of(), bad, "requests without their answer");
            final long closed = front.closedConnections().get("client");
            assertTrue(closed <= 16, closed + " connections closed by the client: more than each session's one, at its close");
        }
    }
}
