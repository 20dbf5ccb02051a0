package io.kvpool.examples.server.remote;

import com.fasterxml.jackson.databind.ObjectMapper;
import com.sun.net.httpserver.HttpServer;
import io.kvpool.examples.server.Await;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

import java.io.IOException;
import java.io.OutputStream;
import java.net.InetAddress;
import java.net.InetSocketAddress;
import java.net.URI;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicInteger;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assumptions.assumeTrue;

/** The router's abort delivery to a role process: paced while the role is away, and a last try at close. */
@Timeout(value = 60, unit = TimeUnit.SECONDS)
class AbortDeliveryTest {

    /** A role whose {@code /internal/abort} answers {@code downStatus} until {@link #up}, each answer after a short pause. */
    static final class Role implements AutoCloseable {
        final HttpServer server;
        final AtomicBoolean up = new AtomicBoolean();
        final AtomicInteger attempts = new AtomicInteger(), inFlight = new AtomicInteger(), mostInFlight = new AtomicInteger();
        final AtomicInteger taken = new AtomicInteger();

        Role(long pauseMs) throws IOException {
            this(pauseMs, 503); // closing
        }

        Role(long pauseMs, int downStatus) throws IOException {
            server = HttpServer.create(new InetSocketAddress(InetAddress.getLoopbackAddress(), 0), 0);
            server.setExecutor(java.util.concurrent.Executors.newVirtualThreadPerTaskExecutor());
            server.createContext("/internal/abort", ex -> {
                ex.getRequestBody().readAllBytes();
                attempts.incrementAndGet();
                mostInFlight.accumulateAndGet(inFlight.incrementAndGet(), Math::max);
                try {
                    Thread.sleep(pauseMs);
                } catch (InterruptedException e) {
                    Thread.currentThread().interrupt();
                }
                inFlight.decrementAndGet();
                if (up.get()) {
                    taken.incrementAndGet();
                    ex.sendResponseHeaders(204, -1);
                    ex.close();
                    return;
                }
                final byte[] b = "{\"error\":{\"type\":\"service_unavailable\",\"reason\":\"closing\",\"message\":\"closing\"}}"
                    .getBytes(StandardCharsets.UTF_8);
                ex.sendResponseHeaders(downStatus, b.length);
                try (OutputStream o = ex.getResponseBody()) {
                    o.write(b);
                }
            });
            server.start();
        }

        URI base() {
            return URI.create("http://127.0.0.1:" + server.getAddress().getPort() + "/");
        }

        @Override
        public void close() {
            server.stop(0);
        }
    }

    @Test
    void anAbortedStreamCountsAgainstTheRoutersRequestsUntilItIsDropped() throws Exception {
        // an aborted call's stream holds a connection of the role for up to DROP_AFTER after its request left the
        // router's count: the router's cap on requests in flight takes it off (RemoteDecode.maxRequestsInFlight)
        final RoleClient client = new RoleClient("decode", java.net.URI.create("http://127.0.0.1:1/"), new ObjectMapper());
        final AbortDelivery aborts = new AbortDelivery(client, null);
        final java.util.concurrent.CountDownLatch dropped = new java.util.concurrent.CountDownLatch(2);
        aborts.dropLater(Duration.ofMillis(200), dropped::countDown);
        aborts.dropLater(Duration.ofMillis(200), () -> {
            dropped.countDown();
            throw new IllegalStateException("a drop that fails still ends its count");
        });
        assertEquals(2, aborts.streamsClosing());
        assertTrue(dropped.await(10, java.util.concurrent.TimeUnit.SECONDS));
        Await.until(() -> aborts.streamsClosing() == 0, Duration.ofSeconds(10), () -> "the count back to 0: " + aborts.streamsClosing());
        client.close();
    }

    @Test
    void theAbortsStillPendingAtCloseTryOnceMoreBeforeCloseReturns() throws Exception {
        try (Role role = new Role(0)) {
            final RoleClient client = new RoleClient("prefill", role.base(), new ObjectMapper());
            final AbortDelivery aborts = new AbortDelivery(client, null);
            aborts.send(7, "the client left");
            Await.until(() -> role.attempts.get() >= 3, Duration.ofSeconds(10), () -> "three refused tries");
            role.up.set(true); // the role is back while the delivery waits out its backoff
            aborts.close(Duration.ZERO);
            client.close(); // as RemoteRole.close does right after
            assertEquals(1, aborts.delivered(), "the last try went before close returned");
            assertEquals(1, role.taken.get());
            assertEquals(0, aborts.pending());
        }
    }

    @Test
    void anAbortTheRoleFailedWithA5xxOrTimedOutIsRetriedUntilTaken() throws Exception {
        // 408: the role's front gave up on a request that stalled on its way, which a later try need not meet
        for (int failed : new int[] {500, 502, 504, 408}) {
            try (Role role = new Role(0, failed)) {
                final RoleClient client = new RoleClient("prefill", role.base(), new ObjectMapper());
                final AbortDelivery aborts = new AbortDelivery(client, null);
                aborts.send(7, "the client left");
                Await.until(() -> role.attempts.get() >= 2, Duration.ofSeconds(10), () -> "a second try after a " + failed);
                role.up.set(true);
                Await.until(() -> aborts.delivered() == 1, Duration.ofSeconds(10),
                    () -> "delivered after " + failed + "s; abandoned " + aborts.abandoned());
                assertEquals(0, aborts.abandoned());
                aborts.close(Duration.ZERO);
                client.close();
            }
        }
    }

    @Test
    void aPostIsRetriedForItsOwnGiveUpThenAbandoned() throws Exception {
        try (Role role = new Role(0, 503)) {
            final RoleClient client = new RoleClient("decode", role.base(), new ObjectMapper());
            final AbortDelivery aborts = new AbortDelivery(client, null);
            final long t0 = System.nanoTime();
            aborts.send("internal/abort", 7, "the client left", Duration.ofMillis(600));
            Await.until(() -> aborts.abandoned() == 1, Duration.ofSeconds(10), () -> "given up after its 600 ms");
            final long tookMs = (System.nanoTime() - t0) / 1_000_000;
            assertTrue(tookMs >= 600, "abandoned after " + tookMs + " ms, before its give-up");
            assertTrue(role.attempts.get() >= 3, role.attempts.get() + " tries: retried until then");
            aborts.close(Duration.ZERO);
            client.close();
        }
    }

    @Test
    void aGiveBackIsRetriedAsLongAsDecodeHoldsTheReservation() {
        final ObjectMapper json = new ObjectMapper();
        for (long timeoutS : new long[] {1, 30, 120}) {
            try (RemoteDecode decode = new RemoteDecode(new RoleClient("decode", URI.create("http://127.0.0.1:9/"), json), json,
                Duration.ofSeconds(timeoutS))) {
                final Duration giveUp = decode.unreserveGiveUp();
                assertTrue(giveUp.compareTo(io.kvpool.examples.server.role.DecodeRole.reservationTtl(Duration.ofSeconds(timeoutS))) >= 0
                    && giveUp.compareTo(AbortDelivery.GIVE_UP) >= 0, "request timeout " + timeoutS + " s: give-backs retried for "
                    + giveUp + ", as long as the longer of an abort's and the reservation's life");
            }
        }
    }

    @Test
    void anAbortAnsweredWithA2xxAndNoBodyIsDelivered() throws Exception {
        // a proxy in front of the role, or another build, may answer 200 with an empty body: the role took the abort
        final HttpServer server = HttpServer.create(new InetSocketAddress(InetAddress.getLoopbackAddress(), 0), 0);
        final AtomicInteger attempts = new AtomicInteger();
        server.createContext("/internal/abort", ex -> {
            ex.getRequestBody().readAllBytes();
            attempts.incrementAndGet();
            ex.sendResponseHeaders(200, -1);
            ex.close();
        });
        server.start();
        final RoleClient client = new RoleClient("prefill", URI.create("http://127.0.0.1:" + server.getAddress().getPort() + "/"),
            new ObjectMapper());
        try {
            final AbortDelivery aborts = new AbortDelivery(client, null);
            aborts.send(7, "the client left");
            Await.until(() -> aborts.pending() == 0, Duration.ofSeconds(10), () -> "delivered; retries " + aborts.retries());
            assertEquals(1, aborts.delivered());
            assertEquals(0, aborts.retries());
            assertEquals(1, attempts.get());
        } finally {
            client.close();
            server.stop(0);
        }
    }

    @Test
    void anAbortTheRoleRefusedWithA4xxIsNotRetried() throws Exception {
        try (Role role = new Role(0, 400)) {
            final RoleClient client = new RoleClient("prefill", role.base(), new ObjectMapper());
            final AbortDelivery aborts = new AbortDelivery(client, null);
            aborts.send(7, "the client left");
            Await.until(() -> aborts.abandoned() == 1, Duration.ofSeconds(10), () -> "given up after the 400");
            assertEquals(1, role.attempts.get(), "one try: a 400 will never turn into a 204");
            aborts.close(Duration.ZERO);
            client.close();
        }
    }

    @Test
    void anAbortWaitingForATurnAtCloseGoesAtOnce() throws Exception {
        try (Role role = new Role(3_000)) { // each answer takes 3 s: the turns stay taken
            final RoleClient client = new RoleClient("prefill", role.base(), new ObjectMapper());
            final AbortDelivery aborts = new AbortDelivery(client, null);
            final long t0 = System.nanoTime();
            for (int i = 1; i <= AbortDelivery.MAX_POSTS + 1; i++) {
                aborts.send(i, "the client left");
            }
            Await.until(() -> role.inFlight.get() == AbortDelivery.MAX_POSTS, Duration.ofSeconds(10), () -> "every turn taken");
            final long tookMs = (System.nanoTime() - t0) / 1_000_000;
            assumeTrue(tookMs < 1_500, () -> "the posts took " + tookMs + " ms to start: a turn may free before close");
            final Thread closer = Thread.ofVirtual().start(() -> aborts.close(Duration.ZERO));
            Await.until(() -> role.attempts.get() == AbortDelivery.MAX_POSTS + 1, Duration.ofMillis(1_500),
                () -> "the abort waiting for a turn to try at once; " + role.attempts + " tries reached the role");
            closer.join();
            client.close();
        }
    }

    @Test
    void atMostMaxPostsAreUnderWayAtOnceWhileARoleIsAway() throws Exception {
        try (Role role = new Role(30)) {
            final RoleClient client = new RoleClient("prefill", role.base(), new ObjectMapper());
            final AbortDelivery aborts = new AbortDelivery(client, null);
            final int n = 6 * AbortDelivery.MAX_POSTS;
            for (int i = 1; i <= n; i++) {
                aborts.send(i, "the client left");
            }
            Await.until(() -> role.attempts.get() >= 2 * n, Duration.ofSeconds(20), () -> "every abort tried twice: " + role.attempts);
            role.up.set(true);
            Await.until(() -> aborts.delivered() == n, Duration.ofSeconds(20), () -> "delivered " + aborts.delivered() + " of " + n);
            assertTrue(role.mostInFlight.get() <= AbortDelivery.MAX_POSTS, () -> role.mostInFlight + " posts at once");
            assertTrue(role.mostInFlight.get() > 1, () -> "the posts overlapped: " + role.mostInFlight);
            aborts.close(Duration.ZERO);
            client.close();
        }
    }
}
