package io.kvpool.examples.server;

import io.kvpool.examples.server.config.Topology;
import io.kvpool.examples.server.remote.RemoteFixtures;
import io.kvpool.examples.server.role.PrefillService;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;

import java.net.InetAddress;
import java.net.ServerSocket;
import java.net.Socket;
import java.net.URI;
import java.net.http.HttpRequest;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.TimeUnit;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * Failing fast: the router answers a request for a role known down at once (503, Retry-After), has
 * prefill compute nothing for a decode that cannot take the KV, and sends its paired aborts without making the
 * client wait — and still delivers them. It guards against each request waiting ~4 s for its 503 with prefill's
 * link down, ~20 s with prefill frozen, and against a partition prefilling (and throwing away) every request.
 *
 * <p>The goal is 100 ms: the median of each run of answers must meet it (they measure ~10 ms on 2 cores); a single
 * answer may take up to 1 s, since a loaded 2-core CI machine stalls a thread now and then.
 */
@Timeout(value = 120, unit = TimeUnit.SECONDS)
class FailFastTest {

    /** The goal, asserted on the median of a run of answers. */
    static final long GOAL_MS = 100;

    /** The bound asserted per answer (CI machines are slow and shared). */
    static final long BOUND_MS = 1_000;

    @TempDir
    Path dir;

    private static KvServer router(URI prefill, URI decode) {
        return KvServer.start(ServerTests.small().topology(Topology.DEFAULT.withRole(Topology.Role.ROUTER).withUrls(prefill, decode)).build());
    }

    /** Sends {@code n} completions one after another; each must be a 503 with Retry-After and {@code reason}. @return their latencies, ms */
    private static List<Long> timed503s(KvServer router, int n, String reason) throws Exception {
        final TestClient client = new TestClient(router);
        final List<Long> ms = new ArrayList<>();
        for (int i = 0; i < n; i++) {
            final long t0 = System.nanoTime();
            final TestClient.Response r = client.send(HttpRequest.newBuilder(router.baseUri().resolve("/v1/completions"))
                .timeout(Duration.ofSeconds(5)).header("Authorization", "Bearer sk-alice")
                .POST(HttpRequest.BodyPublishers.ofString(TestClient.body("hello " + i, 2, false))).build());
            ms.add((System.nanoTime() - t0) / 1_000_000);
            assertEquals(503, r.status(), r::body);
            assertEquals("1", r.retryAfter(), r::body);
            assertEquals(reason, r.error().path("reason").asText(), r::body);
        }
        return ms;
    }

    /** @return whether the router knows the role cannot take a request (its answer to {@code unavailable}) */
    private static boolean knownDown(java.util.concurrent.Callable<String> unavailable) {
        try {
            return unavailable.call() != null;
        } catch (Exception e) {
            throw new AssertionError(e);
        }
    }

    private static long median(List<Long> ms) {
        final List<Long> s = new ArrayList<>(ms);
        s.sort(null);
        return s.get(s.size() / 2);
    }

    @Test
    void aDecodeThatCannotTakeTheKvGets503AtOnceAndPrefillComputesNothing() throws Exception {
        // two roles that never link (different work directories): decode is up but not ready, prefill is up
        final Path a = Files.createDirectory(dir.resolve("a")), b = Files.createDirectory(dir.resolve("b"));
        try (RoleServer decode = RoleServer.start(ServerTests.small().role(Topology.Role.DECODE).workDir(a).build());
             RoleServer prefill = RoleServer.start(ServerTests.small().role(Topology.Role.PREFILL).workDir(b).build());
             KvServer router = router(prefill.baseUri(), decode.baseUri())) {
            // the router's probe has read decode's status (not ready): from now on it is known down
            Await.until(() -> knownDown(router.roles().decode()::unavailable), Duration.ofSeconds(30), () -> "decode known not ready");
            final List<Long> ms = timed503s(router, 20, "decode_unavailable");
            System.out.println("FailFastTest: decode not ready → 503 in ms " + ms + ", median " + median(ms));
            assertTrue(ms.stream().allMatch(t -> t <= BOUND_MS), () -> "503s took " + ms + " ms");
            assertTrue(median(ms) <= GOAL_MS, () -> "median 503 " + median(ms) + " ms > " + GOAL_MS + " ms: " + ms);
            final var c = InJvmRoleServers.status(prefill.baseUri()).path("counters");
            assertEquals(0, c.path("admitted").asLong(), () -> "prefill computed KV for a decode that could not take it: " + c);
            assertEquals(0, c.path("abort_requests").asLong(), () -> "nothing to abort: " + c);
        }
    }

    @Test
    void aFrozenPrefillIsAnswered503AtOnce() throws Exception {
        // decode is ready (linked to a real prefill), but the router's prefill URL is a process that accepts and never answers
        try (InJvmRoleServers roles = InJvmRoleServers.start(ServerTests.small().workDir(dir), Duration.ofSeconds(30));
             Frozen frozen = new Frozen();
             KvServer router = router(frozen.uri(), roles.decode.baseUri())) {
            // the probe's status call has timed out: prefill known down from now on
            Await.until(() -> knownDown(router.roles().prefill()::unavailable), Duration.ofSeconds(30), () -> "prefill known down");
            final List<Long> ms = timed503s(router, 10, "prefill_unavailable");
            System.out.println("FailFastTest: prefill frozen → 503 in ms " + ms + ", median " + median(ms));
            assertTrue(ms.stream().allMatch(t -> t <= BOUND_MS), () -> "503s took " + ms + " ms");
            assertTrue(median(ms) <= GOAL_MS, () -> "median 503 " + median(ms) + " ms > " + GOAL_MS + " ms: " + ms);
        }
    }

    @Test
    void anAbortIsSentWithoutWaitingAndDeliveredOnceTheRoleIsBack() throws Exception {
        final int port = FixedPort.belowEphemeralRange();
        final URI down = URI.create("http://127.0.0.1:" + port + "/");
        try (PrefillService remote = RemoteFixtures.prefill(down, TestClient.JSON);
             Frozen frozen = new Frozen();
             PrefillService toFrozen = RemoteFixtures.prefill(frozen.uri(), TestClient.JSON)) {
            long t0 = System.nanoTime();
            toFrozen.abort(76, "test: a frozen role");
            final long frozenMs = (System.nanoTime() - t0) / 1_000_000;
            t0 = System.nanoTime();
            remote.abort(77, "test: a role that is down");
            final long downMs = (System.nanoTime() - t0) / 1_000_000;
            System.out.println("FailFastTest: abort() returned in " + frozenMs + " ms (frozen role), " + downMs + " ms (role down)");
            assertTrue(frozenMs <= BOUND_MS && downMs <= BOUND_MS, () -> "abort() made its caller wait " + frozenMs + " / " + downMs + " ms");
            Thread.sleep(300); // a few attempts fail: nothing listens there yet
            try (RoleServer prefill = RoleServer.start(ServerTests.small().role(Topology.Role.PREFILL).workDir(dir).port(port).build())) {
                Await.until(() -> InJvmRoleServers.status(prefill.baseUri()).path("counters").path("abort_requests").asLong() == 1,
                    Duration.ofSeconds(15), () -> "the abort sent while the role was down to reach it once it is back");
            }
        }
    }

    @Test
    void aRequestUnderWayWhenItsPrefillFreezesIsAnsweredBeforeItsCallTimesOut() throws Exception {
        // the request's prefill call is sent while prefill answers, then prefill freezes (SIGSTOP, a partition): two of
        // the router's status reads in a row get no answer (2 s each) and the second fails the call waiting on it, which
        // would otherwise wait out its own timeout (10 s)
        try (InJvmRoleServers roles = InJvmRoleServers.start(ServerTests.small().workDir(dir), Duration.ofSeconds(30));
             FreezingProxy proxy = new FreezingProxy(roles.prefill.port());
             KvServer router = router(proxy.uri(), roles.decode.baseUri())) {
            final TestClient client = new TestClient(router);
            final TestClient.Response before = client.complete("alice", "hello before the freeze", 2, false);
            assertEquals(200, before.status(), before::body);
            proxy.freeze();
            final long t0 = System.nanoTime();
            final TestClient.Response r = client.complete("alice", "hello during the freeze", 2, false);
            final long ms = (System.nanoTime() - t0) / 1_000_000;
            System.out.println("FailFastTest: prefill froze under the request → " + r.status() + " in " + ms + " ms");
            assertEquals(503, r.status(), r::body);
            assertEquals("1", r.retryAfter(), r::body);
            // two status reads at least, three at the most (a read begun before the call cannot fail it), 10 s before
            assertTrue(ms <= 7_000, () -> "the request waited " + ms + " ms for its 503: " + r.body());
        }
    }

    /** A TCP proxy to a local port that, once frozen, forwards nothing more either way (a SIGSTOPped process). */
    static final class FreezingProxy implements AutoCloseable {
        private final ServerSocket server;
        private final int target;
        private final List<Socket> sockets = new CopyOnWriteArrayList<>();
        private volatile boolean frozen;

        FreezingProxy(int target) throws Exception {
            this.target = target;
            this.server = new ServerSocket(0, 50, InetAddress.getLoopbackAddress());
            Thread.ofVirtual().start(() -> {
                try {
                    while (true) {
                        final Socket c = server.accept();
                        final Socket s = new Socket(InetAddress.getLoopbackAddress(), target);
                        sockets.add(c);
                        sockets.add(s);
                        Thread.ofVirtual().start(() -> pipe(c, s));
                        Thread.ofVirtual().start(() -> pipe(s, c));
                    }
                } catch (Exception closed) {
                    // done
                }
            });
        }

        URI uri() {
            return URI.create("http://127.0.0.1:" + server.getLocalPort() + "/");
        }

        void freeze() {
            frozen = true;
        }

        private void pipe(Socket from, Socket to) {
            try {
                final java.io.InputStream in = from.getInputStream();
                final java.io.OutputStream out = to.getOutputStream();
                final byte[] buf = new byte[8192];
                for (int k; (k = in.read(buf)) > 0; ) {
                    while (frozen) { // holds the bytes, as a stopped process leaves them unread
                        Thread.sleep(10);
                    }
                    out.write(buf, 0, k);
                    out.flush();
                }
            } catch (Exception closed) {
                // a side closed
            }
        }

        @Override
        public void close() throws Exception {
            server.close();
            frozen = false; // lets the pipes run into the closed sockets and end
            for (Socket s : sockets) {
                s.close();
            }
        }
    }

    /** A process that accepts connections and never answers (SIGSTOPped, or cut off mid-flight). */
    static final class Frozen implements AutoCloseable {
        private final ServerSocket server;
        private final List<Socket> held = new CopyOnWriteArrayList<>();

        Frozen() throws Exception {
            server = new ServerSocket(0, 50, InetAddress.getLoopbackAddress());
            Thread.ofVirtual().start(() -> {
                try {
                    while (true) {
                        held.add(server.accept());
                    }
                } catch (Exception closed) {
                    // done
                }
            });
        }

        URI uri() {
            return URI.create("http://127.0.0.1:" + server.getLocalPort() + "/");
        }

        @Override
        public void close() throws Exception {
            server.close();
            for (Socket s : held) {
                s.close();
            }
        }
    }
}
