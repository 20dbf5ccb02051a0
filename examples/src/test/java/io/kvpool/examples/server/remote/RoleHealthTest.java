package io.kvpool.examples.server.remote;

import com.fasterxml.jackson.databind.ObjectMapper;
import com.sun.net.httpserver.HttpServer;
import io.kvpool.examples.server.RoleServer;
import io.kvpool.examples.server.ServerTests;
import io.kvpool.examples.server.config.Topology;
import io.kvpool.examples.server.Await;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;

import java.io.OutputStream;
import java.net.InetAddress;
import java.net.InetSocketAddress;
import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.nio.file.Path;
import java.time.Duration;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicReference;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * What the router knows of a role: a call that finds the role lost marks it down, and only a status read that
 * began after that may mark it ready again.
 */
@Timeout(value = 60, unit = TimeUnit.SECONDS)
class RoleHealthTest {

    @TempDir
    Path dir;

    @Test
    void aStatusReadBegunBeforeALossDoesNotUndoIt() throws Exception {
        try (HeldRole role = new HeldRole(dir);
             RoleClient calls = new RoleClient("prefill", role.base, new ObjectMapper());
             // a re-check wait no loaded machine outlasts: the request waits for the held read, whatever the delays
             RoleHealth health = new RoleHealth(calls, "prefill", false, null, Duration.ofMinutes(1))) {
            role.holdNextProbeRead(health);
            final RoleHealth.Check underWay = health.check(); // joins the held read
            health.lost("connection reset by the role");
            role.release.countDown();
            final RoleHealth.State read = underWay.result().get(10, TimeUnit.SECONDS);
            assertTrue(read.ready(), "the held read itself found the role ready: " + read);
            assertEquals("connection reset by the role", health.state().why(), "the loss, newer than the read's start, stands");
            assertFalse(health.state().ready());

            // the next read begins after the loss: it may say ready again
            Await.until(() -> health.state().ready(), Duration.ofSeconds(10), () -> "a read begun after the loss: " + health.state());
            assertNull(health.unavailable());
        }
    }

    @Test
    void aRequestThatJoinsAReadBegunBeforeALossIsToldTheLoss() throws Exception {
        try (HeldRole role = new HeldRole(dir);
             RoleClient calls = new RoleClient("prefill", role.base, new ObjectMapper());
             // a re-check wait no loaded machine outlasts: the request waits for the held read, whatever the delays
             RoleHealth health = new RoleHealth(calls, "prefill", false, null, Duration.ofMinutes(1))) {
            role.holdNextProbeRead(health);
            final RoleHealth.Check underWay = health.check();
            health.lost("connection reset by the role");
            final AtomicReference<String> answer = new AtomicReference<>("(no answer)");
            final Thread request = Thread.ofPlatform().start(() -> {
                try {
                    answer.set(health.unavailable()); // joins the held read, which began before the loss
                } catch (InterruptedException e) {
                    Thread.currentThread().interrupt();
                }
            });
            // the request must be waiting on the held read before it is released
            while (request.getState() != Thread.State.TIMED_WAITING && request.getState() != Thread.State.TERMINATED) {
                Thread.onSpinWait();
            }
            assertEquals(Thread.State.TIMED_WAITING, request.getState(), () -> "the request answered without joining the held "
                + "read: " + answer.get());
            role.release.countDown();
            final RoleHealth.State read = underWay.result().get(10, TimeUnit.SECONDS);
            request.join(10_000);
            final String why = answer.get();
            assertTrue(read.ready(), "the joined read itself found the role ready: " + read);
            assertEquals("connection reset by the role", why, "the request is told what the router knows, not the older read");
        }
    }

    /** A role that answers its status as a real prefill did, and holds one read while the test says so. */
    private static final class HeldRole implements AutoCloseable {
        final AtomicBoolean holdNext = new AtomicBoolean();
        final CountDownLatch held = new CountDownLatch(1), release = new CountDownLatch(1);
        final HttpServer server;
        final URI base;

        /** Waits for the first probe's reading, then holds the next probe's read at the role until {@link #release}. */
        void holdNextProbeRead(RoleHealth health) throws InterruptedException {
            Await.until(() -> health.state() != null && health.state().ready(), Duration.ofSeconds(10),
                () -> "the first probe: " + health.state());
            holdNext.set(true);
            assertTrue(held.await(10, TimeUnit.SECONDS), "the next probe's read reached the role");
        }

        HeldRole(Path dir) throws Exception {
            final byte[] status;
            try (RoleServer prefill = RoleServer.start(ServerTests.small().role(Topology.Role.PREFILL).workDir(dir).build())) {
                status = HttpClient.newHttpClient().send(HttpRequest.newBuilder(prefill.baseUri().resolve("internal/status")).build(),
                    HttpResponse.BodyHandlers.ofByteArray()).body();
            }
            server = HttpServer.create(new InetSocketAddress(InetAddress.getLoopbackAddress(), 0), 0);
            server.setExecutor(java.util.concurrent.Executors.newVirtualThreadPerTaskExecutor());
            server.createContext("/internal/status", ex -> {
                if (holdNext.compareAndSet(true, false)) {
                    held.countDown();
                    try {
                        release.await();
                    } catch (InterruptedException e) {
                        Thread.currentThread().interrupt();
                    }
                }
                ex.sendResponseHeaders(200, status.length);
                try (OutputStream o = ex.getResponseBody()) {
                    o.write(status);
                }
            });
            server.start();
            base = URI.create("http://127.0.0.1:" + server.getAddress().getPort() + "/");
        }

        @Override
        public void close() {
            release.countDown();
            server.stop(0);
        }
    }
}
