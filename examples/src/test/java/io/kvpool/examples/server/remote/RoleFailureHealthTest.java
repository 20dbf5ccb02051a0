package io.kvpool.examples.server.remote;

import com.fasterxml.jackson.databind.ObjectMapper;
import io.kvpool.examples.server.Await;
import io.kvpool.examples.server.role.RoleLostException;
import io.kvpool.examples.server.role.RoleRefusedException;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

import java.net.ServerSocket;
import java.time.Duration;
import java.util.List;
import java.util.concurrent.TimeUnit;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

/** Which failures of a call mark a role down in the router's health: only a role it could not reach. */
@Timeout(value = 60, unit = TimeUnit.SECONDS)
class RoleFailureHealthTest {

    @Test
    void aRoleThatFailsACallWithA500StaysReady() throws Exception {
        final StubRole role = stub(500);
        try (RemotePrefill prefill = new RemotePrefill(new RoleClient("prefill", role.base(), new ObjectMapper()))) {
            Await.until(() -> prefill.health().state() != null, Duration.ofSeconds(10), () -> "the first probe");
            final RoleRefusedException e = assertThrows(RoleRefusedException.class,
                () -> prefill.prefill(1, "alice", List.of(new byte[] {1})));
            assertEquals(500, e.status());
            assertTrue(prefill.health().state().ready(), () -> "a role that answered is up: " + prefill.health().state());
        } finally {
            role.close();
        }
    }

    @Test
    void aRoleThatCannotBeReachedIsMarkedDownAtOnce() throws Exception {
        final StubRole role = stub(500);
        try (RemotePrefill prefill = new RemotePrefill(new RoleClient("prefill", role.base(), new ObjectMapper()))) {
            Await.until(() -> prefill.health().state() != null && prefill.health().state().ready(), Duration.ofSeconds(10),
                () -> "the first probe");
            role.close();
            assertThrows(RoleLostException.class, () -> prefill.prefill(1, "alice", List.of(new byte[] {1})));
            assertFalse(prefill.health().state().ready(), () -> "the control: a lost role is down: " + prefill.health().state());
        }
    }

    @Test
    void statusReadsOfARoleGoOutAtMostThreeAtATime() throws Exception {
        // the live page and /metrics read the roles' status on the router's client: any number of them must not open
        // more connections than RemoteRole.SPARE_CONNECTIONS keeps for them
        final java.util.concurrent.atomic.AtomicInteger now = new java.util.concurrent.atomic.AtomicInteger();
        final java.util.concurrent.atomic.AtomicInteger most = new java.util.concurrent.atomic.AtomicInteger();
        final com.sun.net.httpserver.HttpServer server = com.sun.net.httpserver.HttpServer.create(
            new java.net.InetSocketAddress(java.net.InetAddress.getLoopbackAddress(), 0), 0);
        server.setExecutor(java.util.concurrent.Executors.newVirtualThreadPerTaskExecutor());
        server.createContext("/", ex -> { // slow status reads, so that they overlap
            most.accumulateAndGet(now.incrementAndGet(), Math::max);
            try {
                Thread.sleep(100);
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
            } finally {
                now.decrementAndGet();
            }
            ex.sendResponseHeaders(500, -1);
            ex.close();
        });
        server.start();
        final java.net.URI base = java.net.URI.create("http://127.0.0.1:" + server.getAddress().getPort() + "/");
        try (RemotePrefill prefill = new RemotePrefill(new RoleClient("prefill", base, new ObjectMapper()));
             java.util.concurrent.ExecutorService readers = java.util.concurrent.Executors.newVirtualThreadPerTaskExecutor()) {
            final List<java.util.concurrent.Future<?>> reads = new java.util.ArrayList<>();
            for (int i = 0; i < 12; i++) {
                reads.add(readers.submit(prefill::status));
            }
            for (java.util.concurrent.Future<?> r : reads) {
                r.get(30, TimeUnit.SECONDS);
            }
            // the health probe reads on its own client, one at a time
            assertTrue(most.get() <= RemoteRole.STATUS_READS + 1, () -> most.get() + " status reads at once");
            assertTrue(most.get() >= 2, () -> "the reads never overlapped, so this proves nothing: " + most.get());
        } finally {
            server.stop(0);
        }
    }

    @Test
    void statusReadsOfARoleFrozenMidAnswerEndInsteadOfHoldingEveryReadBehindThem() throws Exception {
        // headers, one byte of a 1000-byte body, then nothing: the request's own timeout has ended with the headers
        final ServerSocket frozen = new ServerSocket(0, 50, java.net.InetAddress.getLoopbackAddress());
        final List<java.net.Socket> held = new java.util.concurrent.CopyOnWriteArrayList<>();
        Thread.ofVirtual().start(() -> {
            try {
                while (true) {
                    final java.net.Socket s = frozen.accept();
                    held.add(s);
                    s.getInputStream().read(new byte[8192]);
                    s.getOutputStream().write("HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{"
                        .getBytes(java.nio.charset.StandardCharsets.UTF_8));
                    s.getOutputStream().flush();
                }
            } catch (java.io.IOException closed) {
                // the test is over
            }
        });
        final java.net.URI base = java.net.URI.create("http://127.0.0.1:" + frozen.getLocalPort() + "/");
        try (RemotePrefill prefill = new RemotePrefill(new RoleClient("prefill", base, new ObjectMapper()));
             java.util.concurrent.ExecutorService readers = java.util.concurrent.Executors.newVirtualThreadPerTaskExecutor()) {
            final List<java.util.concurrent.Future<io.kvpool.examples.server.role.RoleStatus>> reads = new java.util.ArrayList<>();
            for (int i = 0; i < 2 * RemoteRole.STATUS_READS; i++) { // more than the permits: some wait behind the frozen ones
                reads.add(readers.submit(prefill::status));
            }
            for (java.util.concurrent.Future<io.kvpool.examples.server.role.RoleStatus> r : reads) {
                final io.kvpool.examples.server.role.RoleStatus s = r.get(30, TimeUnit.SECONDS); // must not hang
                assertFalse(s.up(), s::toString);
            }
        } finally {
            frozen.close();
            for (java.net.Socket s : held) {
                s.close();
            }
        }
    }

    /** A prefill role whose every call but its status is answered {@code failure}. */
    private static StubRole stub(int failure) {
        return StubRole.start("prefill", path -> StubRole.Reply.error(failure, path));
    }
}
