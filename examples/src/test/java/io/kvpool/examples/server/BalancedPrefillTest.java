package io.kvpool.examples.server;

import com.sun.net.httpserver.HttpExchange;
import com.sun.net.httpserver.HttpServer;
import io.kvpool.examples.server.config.Topology;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;

import java.io.IOException;
import java.net.InetAddress;
import java.net.InetSocketAddress;
import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.nio.file.Path;
import java.time.Duration;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * A router whose {@code --prefill-url} is a balancer over two prefill processes linked to one decode: its status probe
 * and its prefill calls may reach different processes. The prefill call's answer names the engine that took the offer,
 * and the router names that one in decode's start, so decode reads the KV where it was offered. Before, the decode call
 * named the engine the probe read, which held no offer: every request ended in a timeout.
 */
@Timeout(value = 120, unit = TimeUnit.SECONDS)
class BalancedPrefillTest {

    @TempDir
    Path dir;

    /**
     * The worst balancer for the router: every prefill call to {@code called}, answered after {@code prefillDelay};
     * everything else (the status probe, the aborts) to {@code probed}.
     */
    private static final class SplittingBalancer implements AutoCloseable {
        final HttpServer server;
        final HttpClient client = HttpClient.newHttpClient();
        final AtomicInteger posts = new AtomicInteger();
        final AtomicInteger aborts = new AtomicInteger();

        SplittingBalancer(URI probed, URI called, Duration prefillDelay) throws IOException {
            server = HttpServer.create(new InetSocketAddress(InetAddress.getLoopbackAddress(), 0), 0);
            server.setExecutor(java.util.concurrent.Executors.newVirtualThreadPerTaskExecutor());
            server.createContext("/", ex -> {
                final boolean prefill = ex.getRequestURI().getPath().equals("/internal/prefill");
                if (ex.getRequestURI().getPath().equals("/internal/abort")) {
                    aborts.incrementAndGet();
                }
                forward(ex, prefill ? called : probed, prefill ? prefillDelay : Duration.ZERO);
            });
            server.start();
        }

        URI uri() {
            return URI.create("http://" + InetAddress.getLoopbackAddress().getHostAddress() + ":" + server.getAddress().getPort() + "/");
        }

        private void forward(HttpExchange ex, URI to, Duration delay) throws IOException {
            try (ex) {
                final byte[] body = ex.getRequestBody().readAllBytes();
                if (ex.getRequestMethod().equals("POST")) {
                    posts.incrementAndGet();
                }
                final HttpRequest.Builder req = HttpRequest.newBuilder(to.resolve(ex.getRequestURI().toString().substring(1)))
                    .timeout(Duration.ofSeconds(30)).method(ex.getRequestMethod(), body.length == 0
                        ? HttpRequest.BodyPublishers.noBody() : HttpRequest.BodyPublishers.ofByteArray(body));
                final String type = ex.getRequestHeaders().getFirst("Content-Type");
                if (type != null) {
                    req.header("Content-Type", type);
                }
                final HttpResponse<byte[]> r = client.send(req.build(), HttpResponse.BodyHandlers.ofByteArray());
                Thread.sleep(delay); // the answer, held: the router's call takes that long
                r.headers().firstValue("Content-Type").ifPresent(t -> ex.getResponseHeaders().add("Content-Type", t));
                ex.sendResponseHeaders(r.statusCode(), r.body().length == 0 ? -1 : r.body().length);
                ex.getResponseBody().write(r.body());
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
                throw new IOException(e);
            }
        }

        @Override
        public void close() {
            server.stop(0);
            client.close();
        }
    }

    @Test
    void aRouterBehindABalancerIsServedFromTheProcessThatTookThePrefillCall() throws Exception {
        try (RoleServer decode = RoleServer.start(ServerTests.small().role(Topology.Role.DECODE).workDir(dir).build());
             RoleServer probed = RoleServer.start(ServerTests.small().role(Topology.Role.PREFILL).workDir(dir).build());
             RoleServer called = RoleServer.start(ServerTests.small().role(Topology.Role.PREFILL).workDir(dir).build())) {
            Await.until(() -> InJvmRoleServers.linkedPrefills(decode) == 2, Duration.ofSeconds(30), () -> "both linked: " + InJvmRoleServers.status(decode.baseUri()));
            try (SplittingBalancer balancer = new SplittingBalancer(probed.baseUri(), called.baseUri(), Duration.ZERO);
                 KvServer router = KvServer.start(ServerTests.small().topology(Topology.DEFAULT.withRole(Topology.Role.ROUTER)
                     .withUrls(balancer.uri(), decode.baseUri())).build())) {
                for (int i = 0; i < 3; i++) {
                    final String prompt = "balanced " + i;
                    final TestClient.Response r = new TestClient(router).complete("alice", prompt, 2, false);
                    assertEquals(200, r.status(), r::body);
                    assertEquals(prompt, r.json().path("kvpool").path("kv_text").asText(), r::body);
                }
                assertTrue(balancer.posts.get() >= 3, "the prefill calls went through the balancer: " + balancer.posts.get());
            }
            assertEquals(3, InJvmRoleServers.transfersCompleted(called), "transfers from the process that took the calls");
            assertEquals(0, InJvmRoleServers.transfersCompleted(probed), "none from the one the probe read");
        }
    }

    @Test
    void aClientThatLeavesWhilePrefillComputesFreesTheOfferWhereItIsHeld() throws Exception {
        // the router's abort goes through the balancer to the probed process, which holds nothing; decode's give-back
        // names the engine that offered, and decode's CANCEL on that link ends the offer long before its timeout
        final Duration timeout = Duration.ofSeconds(30);
        try (RoleServer decode = RoleServer.start(ServerTests.small().role(Topology.Role.DECODE).workDir(dir).build());
             RoleServer probed = RoleServer.start(ServerTests.small().transferTimeout(timeout).role(Topology.Role.PREFILL).workDir(dir).build());
             RoleServer called = RoleServer.start(ServerTests.small().transferTimeout(timeout).role(Topology.Role.PREFILL).workDir(dir).build())) {
            Await.until(() -> InJvmRoleServers.linkedPrefills(decode) == 2, Duration.ofSeconds(30), () -> "both linked: " + InJvmRoleServers.status(decode.baseUri()));
            try (SplittingBalancer balancer = new SplittingBalancer(probed.baseUri(), called.baseUri(), Duration.ofMillis(1500));
                 KvServer router = KvServer.start(ServerTests.small().topology(Topology.DEFAULT.withRole(Topology.Role.ROUTER)
                     .withUrls(balancer.uri(), decode.baseUri())).build())) {
                try (java.net.Socket client = new TestClient(router).openRaw("alice", "gone before decode", 2, true)) {
                    Await.until(() -> active(called) == 1, Duration.ofSeconds(10), () -> "offered: " + InJvmRoleServers.status(called.baseUri()));
                } // the client leaves while the prefill call's answer is held
                final long left = System.nanoTime();
                Await.until(() -> balancer.aborts.get() >= 1, Duration.ofSeconds(10), () -> "the router's abort went to the probed process");
                Await.until(() -> active(called) == 0, Duration.ofSeconds(10), () -> "the offer is still held: "
                    + InJvmRoleServers.status(called.baseUri()));
                final Duration held = Duration.ofNanos(System.nanoTime() - left);
                assertTrue(held.compareTo(Duration.ofSeconds(8)) < 0, "released " + held.toMillis() + " ms after the client left, "
                    + "not at the " + timeout.toSeconds() + " s descriptor timeout");
                Await.until(() -> free(called) == total(called), Duration.ofSeconds(10), () -> "pages back: " + InJvmRoleServers.status(called.baseUri()));
            }
        }
    }

    private static int active(RoleServer r) {
        return InJvmRoleServers.status(r.baseUri()).path("active_transfers").asInt(-1);
    }

    private static long free(RoleServer r) {
        return InJvmRoleServers.status(r.baseUri()).path("pool").path("counters").path("free").asLong(-1);
    }

    private static long total(RoleServer r) {
        return InJvmRoleServers.status(r.baseUri()).path("pool").path("capacity").asLong(-2);
    }
}
