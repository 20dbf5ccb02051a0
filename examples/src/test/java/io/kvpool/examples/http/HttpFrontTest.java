package io.kvpool.examples.http;

import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;

import java.io.ByteArrayOutputStream;
import java.io.IOException;
import java.io.InputStream;
import java.io.OutputStream;
import java.net.InetAddress;
import java.net.Socket;
import java.net.SocketException;
import java.net.SocketTimeoutException;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.atomic.AtomicReference;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * {@link HttpFront} over raw sockets: each limit answered as HTTP says and in the documented error shape, a
 * client's close seen without a write, a client that stops reading bounded by the stall timeout, the connection
 * cap, pipelining, and the graceful stop.
 */
class HttpFrontTest {

    private static final HttpLimits FAST = new HttpLimits(8, 4096, 1024, Duration.ofMillis(300), Duration.ofMillis(300),
        Duration.ofMillis(300));

    private HttpFront front;

    @AfterEach
    void close() {
        if (front != null) {
            front.close();
        }
    }

    private HttpFront start(HttpLimits limits, HttpHandler handler) throws IOException {
        front = HttpFront.start("127.0.0.1", 0, limits, handler);
        return front;
    }

    /** Waits (up to 5 s) until the front counted {@code n} connections closed for {@code reason}. */
    private void awaitClosed(String reason, long n) throws InterruptedException {
        final long end = System.nanoTime() + TimeUnit.SECONDS.toNanos(5);
        while (front.closedConnections().get(reason) != n && System.nanoTime() < end) {
            Thread.sleep(2);
        }
        assertEquals(n, front.closedConnections().get(reason), () -> front.closedConnections().toString());
    }

    private Socket connect() throws IOException {
        final Socket s = new Socket(InetAddress.getLoopbackAddress(), front.port());
        s.setSoTimeout(10_000);
        return s;
    }

    private static void send(Socket s, String text) throws IOException {
        final OutputStream out = s.getOutputStream();
        out.write(text.getBytes(StandardCharsets.ISO_8859_1));
        out.flush();
    }

    /** @return everything until the server closes the connection */
    private static String readToClose(Socket s) throws IOException {
        final ByteArrayOutputStream b = new ByteArrayOutputStream();
        final InputStream in = s.getInputStream();
        final byte[] buf = new byte[8192];
        try {
            for (int n; (n = in.read(buf)) > 0; ) {
                b.write(buf, 0, n);
            }
        } catch (SocketException reset) {
            // closed with a reset after the answer: what was read stands
        }
        return b.toString(StandardCharsets.ISO_8859_1);
    }

    /** @return one response with a Content-Length body */
    private static String readOne(Socket s) throws IOException {
        final String head = readHead(s);
        final int length = head.lines().filter(l -> l.toLowerCase().startsWith("content-length:"))
            .mapToInt(l -> Integer.parseInt(l.substring(15).strip())).findFirst().orElse(0);
        return head + new String(s.getInputStream().readNBytes(length), StandardCharsets.UTF_8);
    }

    /** @return one response's status line and headers */
    private static String readHead(Socket s) throws IOException {
        final InputStream in = s.getInputStream();
        final StringBuilder head = new StringBuilder();
        while (!head.toString().endsWith("\r\n\r\n")) {
            final int c = in.read();
            if (c < 0) {
                throw new IOException("closed after: " + head);
            }
            head.append((char) c);
        }
        return head.toString();
    }

    @Test
    void aStreamWhoseHandlerFailsIsCutNotEnded() throws Exception {
        // a chunked stream that ends with its terminal chunk reads as complete: a handler that failed mid-stream, or
        // was interrupted (the front closing), must leave it visibly cut
        for (boolean interrupted : new boolean[] {false, true}) {
            start(HttpLimits.DEFAULTS, call -> {
                call.startStream(200, "text/event-stream");
                call.write("data: part\n\n");
                if (interrupted) {
                    Thread.currentThread().interrupt(); // what a handler that caught InterruptedException leaves
                    return;
                }
                throw new IllegalStateException("the handler failed mid-stream");
            });
            try (Socket s = connect()) {
                s.setSoTimeout(3_000); // an ended stream keeps its connection open: no close would come
                send(s, "GET /s HTTP/1.1\r\nHost: x\r\n\r\n");
                final ByteArrayOutputStream got = new ByteArrayOutputStream();
                boolean closed = false;
                try {
                    closed = s.getInputStream().transferTo(got) >= 0; // returns once the server closed
                } catch (java.net.SocketTimeoutException stillOpen) {
                    // not cut
                } catch (SocketException reset) {
                    closed = true;
                }
                final String all = got.toString(StandardCharsets.ISO_8859_1);
                final String what = interrupted ? "interrupted" : "failed";
                assertTrue(all.contains("data: part"), all);
                assertFalse(all.endsWith("0\r\n\r\n"), () -> what + ", yet ended: " + all);
                assertTrue(closed, () -> what + ", yet the connection stays open: " + all);
            }
            front.close();
            front = null;
        }
    }

    private static final HttpHandler ECHO = call -> call.respond(200, "text/plain", (call.method() + " " + call.uri() + " "
        + call.body().length).getBytes(StandardCharsets.UTF_8));

    /** {@link #ECHO}, where {@code /slow} first waits (5 s at most) for {@code release}. */
    private static HttpHandler echoAfterSlow(CountDownLatch release) {
        return call -> {
            if (call.path().equals("/slow")) {
                release.await(5, TimeUnit.SECONDS);
            }
            ECHO.handle(call);
        };
    }

    @Test
    void aPortInUseIsRefusedNamingIt_andAClosedFrontFreesItsPort() throws Exception {
        final int port;
        try (java.net.ServerSocket taken = new java.net.ServerSocket(0, 50, InetAddress.getLoopbackAddress())) {
            port = taken.getLocalPort();
            final IOException e = assertThrows(IOException.class, () -> HttpFront.start("127.0.0.1", port, HttpLimits.DEFAULTS, ECHO));
            assertTrue(e.getMessage().contains("127.0.0.1:" + port), e.getMessage());
        }
        final HttpFront ok = HttpFront.start("127.0.0.1", port, HttpLimits.DEFAULTS, ECHO);
        try {
            assertEquals("http://127.0.0.1:" + port + "/", ok.baseUri().toString());
        } finally {
            ok.close();
            ok.close(); // idempotent
        }
        try (java.net.ServerSocket again = new java.net.ServerSocket(port, 50, InetAddress.getLoopbackAddress())) {
            assertEquals(port, again.getLocalPort(), "the port is free again");
        }
    }

    @Test
    void aHeadOverTheLimitIs431InTheErrorShape() throws Exception {
        start(FAST, ECHO);
        try (Socket s = connect()) {
            send(s, "GET / HTTP/1.1\r\nHost: x\r\nX-Big: " + "a".repeat(5000) + "\r\n\r\n");
            final String r = readToClose(s);
            assertTrue(r.startsWith("HTTP/1.1 431 "), r);
            assertTrue(r.contains("{\"error\":{\"type\":\"invalid_request_error\",\"reason\":\"header_too_large\","
                + "\"message\":\"request header fields exceed 4096 bytes\",\"max_header_bytes\":4096}}"), r);
        }
        assertEquals(1, front.refusedRequests());
        awaitClosed("refused", 1);
    }

    @Test
    void trailerFieldsOverTheLimitAre431AsHeaderFieldsAre() throws Exception {
        start(FAST, ECHO);
        try (Socket s = connect()) {
            send(s, "POST /a HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n2\r\n{}\r\n0\r\nX-Pad: " + "a".repeat(8000)
                + "\r\n\r\n");
            final String r = readToClose(s);
            assertTrue(r.startsWith("HTTP/1.1 431 ") && r.contains("\"reason\":\"header_too_large\"")
                && r.contains("\"max_header_bytes\":4096"), r);
        }
    }

    @Test
    void aMalformedChunkSizeIs400() throws Exception {
        start(FAST, ECHO);
        try (Socket s = connect()) {
            send(s, "POST /x HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nhello\r\n0\r\n\r\n");
            final String r = readToClose(s);
            assertTrue(r.startsWith("HTTP/1.1 400 "), r);
            assertTrue(r.contains("\"reason\":\"malformed_body\""), r);
        }
    }

    @Test
    void aBodyOverTheLimitIs413_declaredOrChunked() throws Exception {
        start(FAST, ECHO);
        try (Socket s = connect()) {
            send(s, "POST /x HTTP/1.1\r\nHost: x\r\nContent-Length: 5000\r\n\r\n" + "b".repeat(5000));
            final String r = readToClose(s);
            assertTrue(r.startsWith("HTTP/1.1 413 "), r);
            assertTrue(r.contains("\"reason\":\"body_too_large\",\"message\":\"request body of 5000 bytes exceeds the limit of 1024 bytes\","
                + "\"max_body_bytes\":1024,\"content_length\":5000}}"), r);
        }
        try (Socket s = connect()) {
            final String chunk = Integer.toHexString(800) + "\r\n" + "c".repeat(800) + "\r\n";
            send(s, "POST /x HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n" + chunk + chunk + "0\r\n\r\n");
            final String r = readToClose(s);
            assertTrue(r.startsWith("HTTP/1.1 413 "), r);
            assertTrue(r.contains("exceeds the limit of 1024 bytes"), r);
        }
        try (Socket s = connect()) { // at the limit: served
            send(s, "POST /x HTTP/1.1\r\nHost: x\r\nContent-Length: 1024\r\n\r\n" + "d".repeat(1024));
            assertTrue(readOne(s).endsWith("POST /x 1024"));
        }
    }

    @Test
    void aHeadTrickledSlowerThanTheHeaderTimeoutIs408AndClosed() throws Exception {
        start(FAST, ECHO);
        try (Socket s = connect()) {
            final long t0 = System.nanoTime();
            send(s, "GET / HTTP/1.1\r\n");
            final Thread trickle = Thread.ofVirtual().start(() -> {
                try {
                    for (int i = 0; i < 100; i++) { // one header byte every 50 ms: each byte alone is in time
                        send(s, "X");
                        Thread.sleep(50);
                    }
                } catch (IOException | InterruptedException closed) {
                    // the server closed it: expected
                }
            });
            final String r = readToClose(s);
            final long ms = TimeUnit.NANOSECONDS.toMillis(System.nanoTime() - t0);
            trickle.join(5_000);
            assertTrue(r.startsWith("HTTP/1.1 408 "), r);
            assertTrue(r.contains("\"reason\":\"header_timeout\""), r);
            assertTrue(ms < 3_000, ms + " ms: the head's deadline counts from its first byte, not from the last");
        }
    }

    /**
     * The next request's head may arrive in the same read as the end of the one before it; its deadline still runs from
     * that read, so a head that never completes is 408 after the header timeout, not an idle close after the idle
     * timeout. Blank lines after a request are not a head (RFC 9112 §2.2): that connection closes as idle.
     */
    @Test
    void aHeadBegunInTheReadThatEndedTheRequestBeforeIsTimedAsAHead() throws Exception {
        start(new HttpLimits(8, 4096, 1024, Duration.ofMillis(300), Duration.ofSeconds(3), Duration.ofSeconds(3)), ECHO);
        try (Socket s = connect()) {
            final long t0 = System.nanoTime();
            send(s, "POST /a HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\nabGET /b HTTP/1.1\r\nHo");
            assertTrue(readOne(s).endsWith("POST /a 2"));
            final String r = readToClose(s);
            final long ms = TimeUnit.NANOSECONDS.toMillis(System.nanoTime() - t0);
            assertTrue(r.startsWith("HTTP/1.1 408 ") && r.contains("\"reason\":\"header_timeout\""), () -> ms + " ms: " + r);
            assertTrue(ms < 2_000, ms + " ms: timed as an idle connection (3 s), not as a head (300 ms)");
        }
        awaitClosed("refused", 1);
        try (Socket s = connect()) { // control: trailing blank lines only
            send(s, "POST /a HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\nab\r\n\r\n");
            assertTrue(readOne(s).endsWith("POST /a 2"));
            assertEquals("", readToClose(s), "closed as idle with nothing to answer");
        }
        awaitClosed("idle", 1);
    }

    @Test
    void anIdleConnectionIsClosedAfterTheIdleTimeout_aBusyOneIsNot() throws Exception {
        final CountDownLatch release = new CountDownLatch(1);
        start(FAST, echoAfterSlow(release));
        try (Socket s = connect()) {
            send(s, "GET /a HTTP/1.1\r\nHost: x\r\n\r\n");
            assertTrue(readOne(s).endsWith("GET /a 0"));
            assertEquals("", readToClose(s), "closed with nothing more to say");
        }
        awaitClosed("idle", 1);
        try (Socket s = connect()) {
            send(s, "GET /slow HTTP/1.1\r\nHost: x\r\n\r\n");
            Thread.sleep(900); // three idle timeouts while the handler works
            release.countDown();
            assertTrue(readOne(s).endsWith("GET /slow 0"));
        }
    }

    @Test
    void aClientsCloseIsSeenWithoutAWrite() throws Exception {
        final CompletableFuture<Long> seen = new CompletableFuture<>();
        final AtomicLong closedAt = new AtomicLong();
        final CountDownLatch entered = new CountDownLatch(1);
        start(HttpLimits.DEFAULTS, call -> {
            call.onClientGone(() -> seen.complete(System.nanoTime()));
            entered.countDown();
            seen.get(10, TimeUnit.SECONDS); // writes nothing until then
            assertTrue(call.clientGone());
            assertThrows(IOException.class, () -> call.respond(200, "text/plain", new byte[1]));
        });
        try (Socket s = connect()) {
            send(s, "GET /wait HTTP/1.1\r\nHost: x\r\n\r\n");
            assertTrue(entered.await(10, TimeUnit.SECONDS));
            closedAt.set(System.nanoTime());
        }
        final long ms = TimeUnit.NANOSECONDS.toMillis(seen.get(10, TimeUnit.SECONDS) - closedAt.get());
        System.out.println("HttpFrontTest: a client's close seen after " + ms + " ms");
        assertTrue(ms < 2_000, ms + " ms");
    }

    @Test
    void aClientThatStopsReadingAStreamEndsItAfterTheStallTimeout() throws Exception {
        final CompletableFuture<Throwable> ended = new CompletableFuture<>();
        final AtomicLong written = new AtomicLong();
        start(FAST, call -> {
            call.startStream(200, "text/plain");
            final byte[] piece = new byte[16 << 10];
            try {
                for (int i = 0; i < 100_000; i++) { // 1.6 GB if nothing held it back
                    call.write(piece);
                    written.addAndGet(piece.length);
                }
                ended.complete(null);
            } catch (IOException e) {
                ended.complete(e);
            }
        });
        try (Socket s = connect()) {
            s.setReceiveBufferSize(4096);
            send(s, "GET /stream HTTP/1.1\r\nHost: x\r\n\r\n");
            final Throwable e = ended.get(10, TimeUnit.SECONDS); // the client reads nothing
            assertTrue(e instanceof IOException && e.getMessage().contains("stall timeout"), String.valueOf(e));
            awaitClosed("cut", 1);
            assertTrue(written.get() < 64 << 20, written.get() + " bytes written for a client that read nothing");
        }
    }

    @Test
    void aLargeAnswerReadSlowlyButSteadilyIsNotCutByTheStallTimeout() throws Exception {
        // 300 ms stall timeout, a 1 MiB/s floor: a 24 MiB answer read at ~8 MiB/s takes ~3 s, far beyond the stall
        // timeout once the socket buffers are full, and is read steadily all along
        final HttpLimits limits = new HttpLimits(8, 4096, 1024, Duration.ofMillis(300), Duration.ofMillis(300),
            Duration.ofMillis(300), 1 << 20);
        final byte[] answer = new byte[24 << 20];
        start(limits, call -> call.respond(200, "application/octet-stream", answer));
        try (Socket s = connect()) {
            s.setReceiveBufferSize(16 << 10);
            send(s, "GET /big HTTP/1.1\r\nHost: x\r\n\r\n");
            final String head = readHead(s);
            assertTrue(head.startsWith("HTTP/1.1 200"), head);
            final InputStream in = s.getInputStream();
            final byte[] buf = new byte[64 << 10];
            long read = 0;
            final long start = System.nanoTime();
            try {
                for (int n; read < answer.length && (n = in.read(buf)) > 0; ) {
                    read += n;
                    final long due = start + read * 1_000_000_000L / (8 << 20); // ~8 MiB/s
                    final long wait = due - System.nanoTime();
                    if (wait > 0) {
                        Thread.sleep(wait / 1_000_000, (int) (wait % 1_000_000));
                    }
                }
            } catch (SocketException reset) {
                // cut: asserted below with how much came
            }
            assertEquals(answer.length, read, "bytes read before the connection ended, after "
                + (System.nanoTime() - start) / 1_000_000 + " ms; closed: " + front.closedConnections());
        }
        assertEquals(0L, front.closedConnections().getOrDefault("cut", 0L), () -> front.closedConnections().toString());
    }

    @Test
    void aLargeAnswerNobodyReadsIsCutAfterTheStallTimeoutAndItsBytesAtTheMinimumRate() throws Exception {
        // 300 ms, then what the socket did not take (≤ 24 MiB) at 64 MiB/s: cut within ~0.7 s
        final HttpLimits limits = new HttpLimits(8, 4096, 1024, Duration.ofMillis(300), Duration.ofMillis(300),
            Duration.ofMillis(300), 64 << 20);
        final byte[] answer = new byte[24 << 20];
        start(limits, call -> call.respond(200, "application/octet-stream", answer));
        try (Socket s = connect()) {
            s.setReceiveBufferSize(16 << 10);
            send(s, "GET /big HTTP/1.1\r\nHost: x\r\n\r\n");
            awaitClosed("cut", 1); // the client reads nothing
        }
    }

    @Test
    void connectionsOverTheCapAreClosedOnArrival() throws Exception {
        start(new HttpLimits(2, 4096, 1024, Duration.ofSeconds(10), Duration.ofSeconds(10), Duration.ofSeconds(10)), ECHO);
        try (Socket a = connect(); Socket b = connect()) {
            send(a, "GET /a HTTP/1.1\r\nHost: x\r\n\r\n");
            assertTrue(readOne(a).endsWith("GET /a 0"));
            send(b, "GET /b HTTP/1.1\r\nHost: x\r\n\r\n");
            assertTrue(readOne(b).endsWith("GET /b 0"));
            try (Socket c = connect()) {
                assertEquals("", readToClose(c), "the third connection is closed before it is read");
            }
            assertEquals(1, front.refusedConnections());
            send(a, "GET /a2 HTTP/1.1\r\nHost: x\r\n\r\n");
            assertTrue(readOne(a).endsWith("GET /a2 0"), "the first two still serve");
        }
        final long until = System.nanoTime() + TimeUnit.SECONDS.toNanos(5);
        while (front.openConnections() > 0 && System.nanoTime() < until) {
            Thread.sleep(5);
        }
        try (Socket d = connect()) { // room again
            send(d, "GET /d HTTP/1.1\r\nHost: x\r\n\r\n");
            assertTrue(readOne(d).endsWith("GET /d 0"));
        }
    }

    @Test
    void pipelinedRequestsAreAnsweredInOrder_andHeadHasNoBody() throws Exception {
        start(FAST, ECHO);
        try (Socket s = connect()) {
            send(s, "GET /1 HTTP/1.1\r\nHost: x\r\n\r\nPOST /2 HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n\r\nabc"
                + "HEAD /3 HTTP/1.1\r\nHost: x\r\n\r\nGET /4 HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
            assertTrue(readOne(s).endsWith("GET /1 0"));
            assertTrue(readOne(s).endsWith("POST /2 3"));
            final String head = readHead(s); // the Content-Length says 9 ("HEAD /3 0"), but no body follows a HEAD
            assertTrue(head.startsWith("HTTP/1.1 200") && head.contains("content-length: 9"), head);
            final String last = readToClose(s);
            assertTrue(last.startsWith("HTTP/1.1 200") && last.endsWith("GET /4 0") && last.contains("connection: close"), last);
        }
        awaitClosed("requested", 1);
    }

    /** Blank lines on an idle connection are not a request's head (RFC 9112 §2.2): no 408, an idle close. */
    @Test
    void aBlankLineOnAnIdleConnectionIsNotTimedAsAHead() throws Exception {
        start(new HttpLimits(8, 4096, 1024, Duration.ofMillis(300), Duration.ofMillis(1_500), Duration.ofSeconds(3)), ECHO);
        try (Socket s = connect()) {
            send(s, "GET /a HTTP/1.1\r\nHost: x\r\n\r\n");
            assertTrue(readOne(s).endsWith("GET /a 0"));
            send(s, "\r\n");
            assertEquals("", readToClose(s), "closed as idle with nothing to answer, not refused");
        }
        awaitClosed("idle", 1);
        assertEquals(0L, front.closedConnections().get("refused"));
    }

    /**
     * Blank lines are no activity either: a client that sends one every half idle timeout is closed as idle all the same.
     * A head that starts with a space is a head (the decoder takes the space as the start of its line): timed as one.
     */
    @Test
    void aTrickleOfBlankLinesDoesNotKeepAConnection_aLeadingSpaceStartsAHead() throws Exception {
        start(new HttpLimits(8, 4096, 1024, Duration.ofMillis(300), Duration.ofMillis(1_000), Duration.ofSeconds(3)), ECHO);
        try (Socket s = connect()) {
            final long t0 = System.nanoTime();
            final Thread trickle = Thread.ofVirtual().start(() -> {
                try {
                    for (int i = 0; i < 20; i++) {
                        send(s, "\r\n");
                        Thread.sleep(400);
                    }
                } catch (IOException | InterruptedException closed) {
                    // closed by the server: expected
                }
            });
            assertEquals("", readToClose(s), "closed with nothing to answer");
            final long ms = TimeUnit.NANOSECONDS.toMillis(System.nanoTime() - t0);
            trickle.join(10_000);
            assertTrue(ms < 4_000, ms + " ms: the blank lines kept an idle connection (idle timeout 1,000 ms)");
        }
        awaitClosed("idle", 1);
        try (Socket s = connect()) {
            send(s, " ");
            final String r = readToClose(s);
            assertTrue(r.startsWith("HTTP/1.1 408 ") && r.contains("header_timeout"), r);
        }
    }

    /**
     * A request that expects 100 Continue behind a call still with the handler gets its 100 once that call is answered
     * (HTTP/1.1 answers in order), not never: a client that waits for it sends its body then.
     */
    @Test
    void aPipelinedExpectContinueGetsItsContinueAfterTheAnswerBefore() throws Exception {
        final CountDownLatch release = new CountDownLatch(1);
        start(FAST, echoAfterSlow(release));
        try (Socket s = connect()) {
            send(s, "GET /slow HTTP/1.1\r\nHost: x\r\n\r\nPOST /b HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n"
                + "Expect: 100-continue\r\n\r\n");
            Thread.sleep(600); // both heads read; the first call is with the handler for two body timeouts (300 ms)
            release.countDown();
            assertTrue(readOne(s).endsWith("GET /slow 0"));
            final String cont = readHead(s);
            assertTrue(cont.startsWith("HTTP/1.1 100 "), "no 100 Continue after the answer before it: " + cont);
            Thread.sleep(100); // the body's time runs from the 100, not from the head
            send(s, "abc");
            assertTrue(readOne(s).endsWith("POST /b 3"));
        }
    }

    /**
     * A request that expects 100 Continue, read before the front stopped but behind a call still with the handler, gets
     * its 100 once that call is answered: the stop waits to answer it, and its client waits for the 100.
     */
    @Test
    void aPipelinedExpectContinueReadBeforeTheStopStillGetsItsContinue() throws Exception {
        final CountDownLatch release = new CountDownLatch(1);
        start(FAST, echoAfterSlow(release));
        try (Socket s = connect()) {
            send(s, "GET /slow HTTP/1.1\r\nHost: x\r\n\r\nPOST /b HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n"
                + "Expect: 100-continue\r\n\r\n");
            Thread.sleep(200); // both heads read
            final Thread stop = Thread.ofVirtual().start(() -> front.stopListening(Duration.ofSeconds(5))); // while /slow is busy
            Thread.sleep(200);
            release.countDown();
            assertTrue(readOne(s).endsWith("GET /slow 0"));
            final String cont = readHead(s);
            assertTrue(cont.startsWith("HTTP/1.1 100 "), "no 100 Continue while stopping: " + cont);
            send(s, "abc");
            final String last = readToClose(s);
            assertTrue(last.startsWith("HTTP/1.1 200") && last.endsWith("POST /b 3"), last);
            stop.join(10_000);
        }
    }

    /** A request target in absolute form (RFC 9112 §3.2.2: a server must accept it) reaches the handler as its path. */
    @Test
    void anAbsoluteFormTargetReachesTheHandlerAsItsPath() throws Exception {
        start(FAST, ECHO);
        try (Socket s = connect()) {
            send(s, "GET http://x/a?b=1 HTTP/1.1\r\nHost: x\r\n\r\nGET HTTPS://x:8080?q HTTP/1.1\r\nHost: x\r\n\r\n"
                + "GET httpx://x/d HTTP/1.1\r\nHost: x\r\n\r\nGET http:///e HTTP/1.1\r\nHost: x\r\n\r\n"
                + "GET /c HTTP/1.1\r\nHost: x\r\n\r\n");
            assertTrue(readOne(s).endsWith("GET /a?b=1 0"));
            assertTrue(readOne(s).endsWith("GET /?q 0"));
            assertTrue(readOne(s).endsWith("GET httpx://x/d 0"), "not http(s): as sent");
            assertTrue(readOne(s).endsWith("GET http:///e 0"), "no host: as sent");
            assertTrue(readOne(s).endsWith("GET /c 0"));
        }
    }

    /** The front's own refusal of a HEAD request has no body either, as any answer to HEAD. */
    @Test
    void aRefusalOfAHeadRequestHasNoBody() throws Exception {
        start(FAST, ECHO);
        try (Socket s = connect()) {
            send(s, "HEAD / HTTP/1.1\r\n\r\n"); // no Host: 400
            final String r = readToClose(s);
            assertTrue(r.startsWith("HTTP/1.1 400 ") && r.contains("content-length: "), r);
            assertTrue(r.endsWith("\r\n\r\n"), () -> "a body followed the head: " + r);
        }
        try (Socket s = connect()) { // control: the same refusal of a GET has its JSON body
            send(s, "GET / HTTP/1.1\r\n\r\n");
            final String r = readToClose(s);
            assertTrue(r.startsWith("HTTP/1.1 400 ") && r.endsWith("}"), r);
        }
    }

    /** A stream has no head-only form: a handler that starts one for HEAD is refused, and no chunk reaches the client. */
    @Test
    void aStreamStartedForHeadIsRefusedWithoutAFramedBody() throws Exception {
        start(FAST, call -> {
            call.startStream(200, "text/plain");
            call.write("chunk".getBytes(StandardCharsets.UTF_8));
            call.endStream();
        });
        try (Socket s = connect()) {
            send(s, "HEAD /s HTTP/1.1\r\nHost: x\r\n\r\nGET /s HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
            final String head = readHead(s);
            assertTrue(head.startsWith("HTTP/1.1 500") && !head.contains("chunked"), head);
            final String last = readToClose(s);
            assertTrue(last.startsWith("HTTP/1.1 200") && last.contains("chunked") && last.contains("chunk"), last);
        }
    }

    /**
     * A request refused by the front while the one before it is still with the handler: the refusal waits for that
     * answer and follows it, in order. A client that sends its next request as soon as it read an answer meets this
     * too, when the answer's write is done before the front has seen it done.
     */
    @Test
    void aRefusalBehindACallInProgressIsAnsweredAfterIt_bodyOrHead() throws Exception {
        final String[] refused = {
            "POST /big HTTP/1.1\r\nHost: x\r\nContent-Length: 5000\r\n\r\n" + "b".repeat(5000),
            "POST /big HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n" + ("320\r\n" + "c".repeat(800) + "\r\n").repeat(2)
                + "0\r\n\r\n",
            "GET /big HTTP/1.1\r\nHost: x\r\nX-Big: " + "a".repeat(5000) + "\r\n\r\n"};
        final String[] expected = {"HTTP/1.1 413 ", "HTTP/1.1 413 ", "HTTP/1.1 431 "};
        final String queued = "GET /queued HTTP/1.1\r\nHost: x\r\n\r\n";
        final AtomicReference<CountDownLatch> release = new AtomicReference<>();
        final AtomicReference<CountDownLatch> entered = new AtomicReference<>();
        start(FAST, call -> {
            if (call.path().equals("/slow")) {
                entered.get().countDown();
                release.get().await(10, TimeUnit.SECONDS);
            }
            ECHO.handle(call);
        });
        for (int i = 0; i < refused.length + 1; i++) {
            final boolean withQueued = i == refused.length; // a request queued between them is answered too, in order
            final int k = withQueued ? 0 : i;
            entered.set(new CountDownLatch(1));
            release.set(new CountDownLatch(1));
            try (Socket s = connect()) {
                send(s, "GET /slow HTTP/1.1\r\nHost: x\r\n\r\n" + (withQueued ? queued : "") + refused[k]);
                assertTrue(entered.get().await(10, TimeUnit.SECONDS));
                final long end = System.nanoTime() + TimeUnit.SECONDS.toNanos(10);
                while (front.refusedRequests() != i + 1 && System.nanoTime() < end) {
                    Thread.sleep(1); // until the refusal is made, while /slow is still with the handler
                }
                assertEquals(i + 1, front.refusedRequests(), "refused while the call before it is in progress");
                release.get().countDown();
                final String first = readOne(s);
                assertTrue(first.startsWith("HTTP/1.1 200") && first.endsWith("GET /slow 0"), first);
                if (withQueued) {
                    final String second = readOne(s);
                    assertTrue(second.startsWith("HTTP/1.1 200") && second.endsWith("GET /queued 0"), second);
                }
                final String last = readToClose(s);
                assertTrue(last.startsWith(expected[k]), refused[k].substring(0, 40) + " → " + last);
            }
            awaitClosed("refused", i + 1);
        }
        assertEquals(0, front.closedConnections().get("pipeline"));
    }

    /** A refusal waiting for a call in progress does not let its client stream on: past the drain limit, closed. */
    @Test
    void aRefusalWaitingForACallBoundsWhatItsClientMaySendMeanwhile() throws Exception {
        final CountDownLatch entered = new CountDownLatch(1);
        final CountDownLatch release = new CountDownLatch(1);
        start(FAST, call -> {
            entered.countDown();
            release.await(20, TimeUnit.SECONDS);
            ECHO.handle(call);
        });
        try (Socket s = connect()) {
            send(s, "GET /slow HTTP/1.1\r\nHost: x\r\n\r\nPOST /big HTTP/1.1\r\nHost: x\r\nContent-Length: 100000000000\r\n\r\n");
            assertTrue(entered.await(10, TimeUnit.SECONDS));
            final byte[] chunk = new byte[1 << 20];
            try {
                for (long sent = 0; sent <= Connection.DRAIN_LIMIT + chunk.length; sent += chunk.length) {
                    s.getOutputStream().write(chunk);
                }
            } catch (IOException closed) {
                // the server closed it while we were still sending: what this test expects
            }
            awaitClosed("pipeline", 1);
        } finally {
            release.countDown();
        }
        assertEquals(1, front.refusedRequests());
    }

    @Test
    void a204CarriesNoContentLengthAndTheConnectionServesOn() throws Exception {
        start(FAST, call -> {
            if (call.path().equals("/none")) {
                call.respond(204, "application/json", new byte[0]);
            } else {
                ECHO.handle(call);
            }
        });
        try (Socket s = connect()) {
            send(s, "POST /none HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}GET /after HTTP/1.1\r\nHost: x\r\n\r\n");
            final String head = readHead(s).toLowerCase(java.util.Locale.ROOT);
            assertTrue(head.startsWith("http/1.1 204") && !head.contains("content-length") && !head.contains("content-type"), head);
            assertTrue(readOne(s).endsWith("GET /after 0"));
        }
    }

    @Test
    void aHandlerThatThrowsOrAnswersNothingGets500WithoutItsText_andTheConnectionServesOn() throws Exception {
        start(FAST, call -> {
            if (call.path().equals("/throw")) {
                throw new IllegalStateException("injected");
            }
            if (call.path().equals("/ok")) {
                ECHO.handle(call);
            }
        });
        final java.util.logging.Logger log = java.util.logging.Logger.getLogger("io.kvpool.examples.http");
        final java.util.List<java.util.logging.LogRecord> logged = new java.util.concurrent.CopyOnWriteArrayList<>();
        final java.util.logging.Handler capture = new java.util.logging.Handler() {
            @Override
            public void publish(java.util.logging.LogRecord r) {
                logged.add(r);
            }

            @Override
            public void flush() {
            }

            @Override
            public void close() {
            }
        };
        log.addHandler(capture);
        try (Socket s = connect()) {
            send(s, "GET /throw HTTP/1.1\r\nHost: x\r\n\r\n");
            final String a = readOne(s);
            final java.util.regex.Matcher id = java.util.regex.Pattern.compile("\"error_id\":\"([0-9a-f]{16})\"").matcher(a);
            assertTrue(a.startsWith("HTTP/1.1 500") && a.contains("\"reason\":\"internal_error\"") && id.find(), a);
            assertFalse(a.contains("injected") || a.contains("IllegalStateException"), "the exception's text stays in the log: " + a);
            assertTrue(logged.stream().anyMatch(r -> r.getMessage().contains(id.group(1)) && r.getThrown() != null
                && "injected".equals(r.getThrown().getMessage())), "the log has the exception under the answer's id");
            send(s, "GET /none HTTP/1.1\r\nHost: x\r\n\r\n");
            final String b = readOne(s);
            assertTrue(b.startsWith("HTTP/1.1 500") && b.contains("returned without an answer"), b);
            send(s, "GET /ok HTTP/1.1\r\nHost: x\r\n\r\n");
            assertTrue(readOne(s).endsWith("GET /ok 0"));
        } finally {
            log.removeHandler(capture);
        }
    }

    @Test
    void aGracefulStopLetsTheCallsInProgressOrArrivingAnswer_closesIdleOnes_andRefusesNewOnes() throws Exception {
        final CountDownLatch entered = new CountDownLatch(1);
        final AtomicReference<HttpCall> busy = new AtomicReference<>();
        start(HttpLimits.DEFAULTS, call -> {
            if (call.path().equals("/slow")) {
                busy.set(call);
                entered.countDown();
                Thread.sleep(300);
            }
            ECHO.handle(call);
        });
        try (Socket idle = connect(); Socket working = connect(); Socket arriving = connect()) {
            send(idle, "GET /i HTTP/1.1\r\nHost: x\r\n\r\n");
            assertTrue(readOne(idle).endsWith("GET /i 0"));
            send(working, "GET /slow HTTP/1.1\r\nHost: x\r\n\r\n");
            assertTrue(entered.await(10, TimeUnit.SECONDS));
            // a request half arrived: its head read (the 100 Continue says so), its body still coming
            send(arriving, "POST /a HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\nExpect: 100-continue\r\n\r\n");
            assertTrue(readHead(arriving).startsWith("HTTP/1.1 100"));
            final int port = front.port();
            final java.util.concurrent.CompletableFuture<Void> stopping = java.util.concurrent.CompletableFuture.runAsync(
                () -> front.stopListening(Duration.ofSeconds(5)));
            final long until = System.nanoTime() + TimeUnit.SECONDS.toNanos(10);
            while (front.callsInFlight() > 0 && System.nanoTime() < until) {
                Thread.sleep(5);
            }
            assertEquals(0, front.callsInFlight(), "the call in progress did not end");
            assertFalse(stopping.isDone(), "the stop did not wait for the request still arriving");
            send(arriving, "0123456789"); // after the call in progress ended: only the arriving one holds the stop
            final String arrived = readToClose(arriving);
            assertTrue(arrived.startsWith("HTTP/1.1 200") && arrived.endsWith("POST /a 10"), "a request arriving at the stop was cut: " + arrived);
            final String answer = readToClose(working);
            assertTrue(answer.startsWith("HTTP/1.1 200") && answer.endsWith("GET /slow 0"), answer);
            assertEquals("", readToClose(idle), "the idle connection was closed");
            stopping.get(10, TimeUnit.SECONDS);
            awaitClosed("stopping", 3); // the idle one at once, the others after their answers
            assertFalse(busy.get().clientGone() && answer.isEmpty());
            assertThrows(IOException.class, () -> {
                try (Socket late = new Socket(InetAddress.getLoopbackAddress(), port)) {
                    late.setSoTimeout(2_000);
                    send(late, "GET / HTTP/1.1\r\nHost: x\r\n\r\n");
                    if (late.getInputStream().read() < 0) {
                        throw new IOException("closed");
                    }
                } catch (SocketTimeoutException e) {
                    throw new AssertionError("a new connection was taken after the stop", e);
                }
            });
        }
    }

    @Test
    void anHttp11RequestWithoutExactlyOneHostIs400AndEveryAnswerHasADate() throws Exception {
        start(FAST, ECHO);
        for (String[] c : new String[][] {{"GET / HTTP/1.1\r\n\r\n", "missing_host"},
            {"GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n", "duplicate_host"}}) {
            try (Socket s = connect()) {
                send(s, c[0]);
                final String answer = readToClose(s);
                assertTrue(answer.startsWith("HTTP/1.1 400") && answer.contains(c[1]), answer);
                assertTrue(answer.toLowerCase(java.util.Locale.ROOT).contains("\r\ndate: "), "the front's own answer has a Date: " + answer);
            }
        }
        try (Socket s = connect()) {
            send(s, "GET /ok HTTP/1.1\r\nHost: x\r\n\r\n");
            final String answer = readOne(s);
            assertTrue(answer.startsWith("HTTP/1.1 200"), answer);
            assertTrue(answer.toLowerCase(java.util.Locale.ROOT).contains("\r\ndate: "), "a handler's answer has a Date: " + answer);
        }
        try (Socket s = connect()) { // HTTP/1.0 needs no Host
            send(s, "GET /old HTTP/1.0\r\n\r\n");
            assertTrue(readToClose(s).startsWith("HTTP/1.1 200"));
        }
    }

    @Test
    void twoHostLinesOnAnyVersionOrAHostThatIsNoHostIs400() throws Exception {
        // RFC 9112 §3.2: any request with more than one Host line, and one whose Host is not a valid host[:port]
        start(FAST, ECHO);
        for (String[] c : new String[][] {{"GET /a HTTP/1.0\r\nHost: a.example\r\nHost: b.example\r\n\r\n", "duplicate_host"},
            {"GET /a HTTP/1.1\r\nHost: x y/z\r\nConnection: close\r\n\r\n", "invalid_host"}}) {
            try (Socket s = connect()) {
                send(s, c[0]);
                final String answer = readToClose(s);
                assertTrue(answer.startsWith("HTTP/1.1 400") && answer.contains("\"reason\":\"" + c[1] + "\""), answer);
            }
        }
        for (String host : new String[] {"a.example:8080", "127.0.0.1", "[::1]:80", "xn--bcher-kva.example"}) {
            try (Socket s = connect()) {
                send(s, "GET /ok HTTP/1.1\r\nHost: " + host + "\r\nConnection: close\r\n\r\n");
                final String answer = readToClose(s);
                assertTrue(answer.startsWith("HTTP/1.1 200"), () -> host + ": " + answer);
            }
        }
    }

    @Test
    void anHttp10KeepAliveClientIsToldTheConnectionStays() throws Exception {
        start(FAST, ECHO);
        try (Socket s = connect()) {
            send(s, "GET /one HTTP/1.0\r\nConnection: keep-alive\r\n\r\n");
            final String first = readOne(s);
            assertTrue(first.toLowerCase(java.util.Locale.ROOT).contains("connection: keep-alive"),
                "an HTTP/1.0 client reads to the close unless told: " + first);
            s.setSoTimeout(2_000);
            send(s, "GET /two HTTP/1.0\r\nConnection: keep-alive\r\n\r\n");
            assertTrue(readOne(s).contains("GET /two"), "the second request is answered on the same connection");
        }
        try (Socket s = connect()) { // without keep-alive, HTTP/1.0 closes as before
            send(s, "GET /three HTTP/1.0\r\n\r\n");
            final String answer = readToClose(s).toLowerCase(java.util.Locale.ROOT);
            assertFalse(answer.contains("keep-alive"), answer);
        }
    }

    @Test
    void aStreamToAnHttp10ClientIsUnframedAndEndsWithTheConnection() throws Exception {
        start(FAST, call -> {
            call.startStream(200, "text/event-stream");
            call.write("data: first\n\n");
            call.write("data: second\n\n");
            call.endStream();
        });
        try (Socket s = connect()) {
            send(s, "GET /s HTTP/1.0\r\nConnection: keep-alive\r\n\r\n");
            final String answer = readToClose(s);
            final String head = answer.substring(0, answer.indexOf("\r\n\r\n") + 4).toLowerCase(java.util.Locale.ROOT);
            assertFalse(head.contains("transfer-encoding"), "RFC 9112 §6.1: no Transfer-Encoding in an answer to HTTP/1.0: " + head);
            assertTrue(head.contains("connection: close"), head);
            assertEquals("data: first\n\ndata: second\n\n", answer.substring(head.length()), "the body, unframed");
        }
        try (Socket s = connect()) { // HTTP/1.1 streams stay chunked
            send(s, "GET /s HTTP/1.1\r\nHost: x\r\n\r\n");
            assertTrue(readHead(s).toLowerCase(java.util.Locale.ROOT).contains("transfer-encoding: chunked"));
        }
    }

    @Test
    void aRequestPipelinedBehindAStreamSpanningTheStopIsStillAnswered() throws Exception {
        final CountDownLatch endStream = new CountDownLatch(1);
        start(HttpLimits.DEFAULTS, call -> {
            if (call.path().equals("/stream")) {
                call.startStream(200, "text/plain");
                call.write("tick\n");
                endStream.await(10, TimeUnit.SECONDS);
                call.endStream();
            } else {
                ECHO.handle(call);
            }
        });
        try (Socket s = connect()) {
            send(s, "GET /stream HTTP/1.1\r\nHost: x\r\n\r\n");
            readHead(s); // its head went out before the stop: it does not say close
            send(s, "POST /p HTTP/1.1\r\nHost: x\r\nContent-Length: 4\r\n\r\n"); // pipelined: the head now, the body later
            final long until = System.nanoTime() + TimeUnit.SECONDS.toNanos(10);
            while (front.requestsArriving() == 0 && System.nanoTime() < until) {
                Thread.sleep(2);
            }
            assertEquals(1, front.requestsArriving(), "the pipelined head was not read");
            final java.util.concurrent.CompletableFuture<Void> stopping = java.util.concurrent.CompletableFuture.runAsync(
                () -> front.stopListening(Duration.ofSeconds(5)), r -> new Thread(r).start());
            endStream.countDown();
            Thread.sleep(100); // the stream's end is on the wire; the connection must still wait for the body
            send(s, "abcd");
            final String rest = readToClose(s);
            assertTrue(rest.contains("HTTP/1.1 200") && rest.endsWith("POST /p 4"), "the pipelined request was not answered: " + rest);
            stopping.get(10, TimeUnit.SECONDS);
        }
    }

    @Test
    void aRefusalStillDrainingAtTheStopClosesItselfAfterTheDrain() throws Exception {
        start(FAST, ECHO);
        try (Socket s = connect()) {
            send(s, "POST /x HTTP/1.1\r\nHost: x\r\nContent-Length: 5000\r\n\r\n" + "b".repeat(100));
            assertTrue(readHead(s).startsWith("HTTP/1.1 413 "), "the refusal came; its upload is being drained");
            front.stopAccepting();
            Thread.sleep(100); // the stop's close of idle connections ran
            send(s, "b".repeat(4900)); // the rest of the upload: the drain ends, then the connection
            readToClose(s);
            awaitClosed("refused", 1);
            assertEquals(0L, front.closedConnections().get("stopping"), () -> "the stop cut a refusal mid-drain: " + front.closedConnections());
        }
    }

    @Test
    void aPartHeadAtTheStopDoesNotHoldIt() throws Exception {
        start(HttpLimits.DEFAULTS, ECHO);
        try (Socket s = connect()) {
            send(s, "GET /x HTT"); // a head never finished: the stop does not wait for it (its timeout is 10 s)
            Thread.sleep(100);
            final long t0 = System.nanoTime();
            front.stopListening(Duration.ofSeconds(5));
            assertTrue(System.nanoTime() - t0 < TimeUnit.SECONDS.toNanos(2), "the stop waited for a head that never came");
            assertEquals("", readToClose(s));
        }
    }

    @Test
    void aStreamEndedAfterItsClientLeftStillEndsTheCall() throws Exception {
        final CountDownLatch gone = new CountDownLatch(1);
        final CompletableFuture<Throwable> ending = new CompletableFuture<>();
        start(FAST, call -> {
            call.onClientGone(gone::countDown);
            call.startStream(200, "text/plain");
            call.write("first\n");
            gone.await(10, TimeUnit.SECONDS);
            try {
                call.endStream();
                ending.complete(null);
            } catch (IOException e) {
                ending.complete(e);
            }
        });
        try (Socket s = connect()) {
            send(s, "GET /s HTTP/1.1\r\nHost: x\r\n\r\n");
            readHead(s);
        }
        assertTrue(ending.get(10, TimeUnit.SECONDS) instanceof IOException, "endStream after the close throws");
        assertTrue(front.awaitNoCalls(Duration.ofSeconds(5)), front.callsInFlight() + " calls still counted in flight");
    }

    @Test
    void aGracefulStopAnswersThePipelinedRequestsAlreadyRead_theLastSayingClose() throws Exception {
        final CountDownLatch entered = new CountDownLatch(1);
        final CountDownLatch stopped = new CountDownLatch(1);
        start(HttpLimits.DEFAULTS, call -> {
            if (call.path().equals("/slow")) {
                entered.countDown();
                stopped.await(); // both heads are built after the stop began
            }
            ECHO.handle(call);
        });
        try (Socket s = connect()) {
            send(s, "GET /slow HTTP/1.1\r\nHost: x\r\n\r\nGET /next HTTP/1.1\r\nHost: x\r\n\r\n");
            assertTrue(entered.await(10, TimeUnit.SECONDS));
            awaitQueued(1); // the second request is read and queued behind the first, before the stop
            final Thread stopper = stopInBackground();
            stopped.countDown();
            final String first = readOne(s);
            final String second = readToClose(s);
            stopper.join(10_000);
            assertTrue(first.endsWith("GET /slow 0"), first);
            assertFalse(first.toLowerCase(java.util.Locale.ROOT).contains("connection: close"),
                "an answer with a request queued behind it must not say close: " + first);
            assertTrue(second.startsWith("HTTP/1.1 200") && second.endsWith("GET /next 0")
                && second.toLowerCase(java.util.Locale.ROOT).contains("connection: close"), second);
        }
    }

    @Test
    void anAnswerBuiltAfterTheStopSaysCloseHoweverLateTheEventLoopRuns() throws Exception {
        final CountDownLatch entered = new CountDownLatch(1), stopped = new CountDownLatch(1), headBuilt = new CountDownLatch(1);
        start(HttpLimits.DEFAULTS, call -> {
            entered.countDown();
            stopped.await();
            call.startStream(200, "text/plain"); // built after the stop began, nothing queued: it must say close
            headBuilt.countDown();
            call.write("part;");
            call.endStream();
        });
        front.handlerExecutor = e -> r -> { // the event loop stalls right after it handed the call over
            e.execute(r);
            try {
                headBuilt.await(10, TimeUnit.SECONDS);
            } catch (InterruptedException ie) {
                Thread.currentThread().interrupt();
            }
        };
        try (Socket s = connect()) {
            final Thread stopper = streamWhoseHeadComesAfterTheStop(s, entered, stopped);
            readToClose(s);
            stopper.join(10_000);
        }
    }

    /**
     * Asks for {@code /stream}, stops the front once its handler has {@code entered}, lets the handler build its head
     * ({@code stopped}), and checks the head says close.
     *
     * @return the thread running the stop
     */
    private Thread streamWhoseHeadComesAfterTheStop(Socket s, CountDownLatch entered, CountDownLatch stopped) throws Exception {
        send(s, "GET /stream HTTP/1.1\r\nHost: x\r\n\r\n");
        assertTrue(entered.await(10, TimeUnit.SECONDS));
        final Thread stopper = stopInBackground();
        stopped.countDown();
        final String head = readHead(s);
        assertTrue(head.toLowerCase(java.util.Locale.ROOT).contains("connection: close"), head);
        return stopper;
    }

    @Test
    void aGracefulStopAnswersNothingAfterAnAnswerThatSaidClose() throws Exception {
        final CountDownLatch entered = new CountDownLatch(1);
        final CountDownLatch stopped = new CountDownLatch(1);
        final CountDownLatch release = new CountDownLatch(1);
        start(HttpLimits.DEFAULTS, call -> {
            if (call.path().equals("/stream")) {
                entered.countDown();
                stopped.await(); // the head is built after the stop began, with nothing queued: it says close
                call.startStream(200, "text/plain");
                call.write("part;");
                release.await();
                call.endStream();
                return;
            }
            ECHO.handle(call);
        });
        try (Socket s = connect()) {
            final Thread stopper = streamWhoseHeadComesAfterTheStop(s, entered, stopped);
            send(s, "GET /next HTTP/1.1\r\nHost: x\r\n\r\n"); // sent before the client read the close
            awaitQueued(1);
            release.countDown();
            final String rest = readToClose(s);
            stopper.join(10_000);
            assertTrue(rest.contains("part;"), rest);
            assertFalse(rest.contains("HTTP/1.1"), "answered after an answer that said close: " + rest);
            awaitClosed("stopping", 1);
        }
    }

    @Test
    void requestsPipelinedAfterTheStopCannotHoldTheConnectionOpen() throws Exception {
        final CountDownLatch entered = new CountDownLatch(1);
        final CountDownLatch release = new CountDownLatch(1);
        start(HttpLimits.DEFAULTS, call -> {
            if (call.path().equals("/slow")) {
                entered.countDown();
                release.await();
            }
            ECHO.handle(call);
        });
        try (Socket s = connect()) {
            send(s, "GET /slow HTTP/1.1\r\nHost: x\r\n\r\n");
            assertTrue(entered.await(10, TimeUnit.SECONDS));
            final Thread stopper = stopInBackground();
            // a client that keeps pipelining: had these kept the answer in progress from saying close, each of
            // their answers would find the next queued behind it
            send(s, "GET /a HTTP/1.1\r\nHost: x\r\n\r\nGET /b HTTP/1.1\r\nHost: x\r\n\r\n");
            awaitQueued(2);
            release.countDown();
            final String all = readToClose(s);
            stopper.join(10_000);
            assertTrue(all.startsWith("HTTP/1.1 200") && all.endsWith("GET /slow 0")
                && all.toLowerCase(java.util.Locale.ROOT).contains("connection: close"), all);
            assertFalse(all.contains("GET /a") || all.contains("GET /b"), "answered after an answer that said close: " + all);
        }
    }

    /** Starts a graceful stop (5 s of grace) on another thread; returns once the front no longer accepts. */
    private Thread stopInBackground() throws InterruptedException {
        final Thread stopper = Thread.ofVirtual().start(() -> front.stopListening(Duration.ofSeconds(5)));
        final long end = System.nanoTime() + TimeUnit.SECONDS.toNanos(5);
        while (front.accepting() && System.nanoTime() < end) {
            Thread.sleep(1);
        }
        assertFalse(front.accepting());
        return stopper;
    }

    /** Waits (up to 5 s) until {@code n} requests are queued behind calls in progress. */
    private void awaitQueued(int n) throws InterruptedException {
        final long end = System.nanoTime() + TimeUnit.SECONDS.toNanos(5);
        while (front.queuedRequests() != n && System.nanoTime() < end) {
            Thread.sleep(1);
        }
        assertEquals(n, front.queuedRequests(), "requests queued");
    }

    @Test
    void aBodyTrickledLongerThanTheIdleTimeoutIs408() throws Exception {
        start(FAST, ECHO);
        try (Socket s = connect()) {
            final long t0 = System.nanoTime();
            send(s, "POST /b HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\n");
            final Thread trickle = Thread.ofVirtual().start(() -> {
                try {
                    for (int i = 0; i < 1000; i++) { // one byte every 50 ms: each alone well within the idle timeout
                        send(s, "b");
                        Thread.sleep(50);
                    }
                } catch (IOException | InterruptedException closed) {
                    // the server closed it: expected
                }
            });
            final String r = readToClose(s);
            final long ms = TimeUnit.NANOSECONDS.toMillis(System.nanoTime() - t0);
            trickle.join(5_000);
            assertTrue(r.startsWith("HTTP/1.1 408 ") && r.contains("\"reason\":\"body_timeout\""), r);
            assertTrue(ms < 3_000, ms + " ms: the body's deadline counts from its head, not from its last byte");
        }
    }
}
