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
 * sends (here: nothing after "admitted"). Was (from a review, 2026-11-30): the abort dropped the stream, the
 * stream's end was taken for "ours" and reported nothing, and a request waiting for its transfer waited out its
 * whole timeout — on a router closing, its client's connection was cut instead of answered 503.
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
}
