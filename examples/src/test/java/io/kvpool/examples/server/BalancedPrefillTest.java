package io.kvpool.examples.server;

import com.fasterxml.jackson.databind.JsonNode;
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
     * The worst balancer for the router: every GET (the status probe) to {@code probed}, every POST (the prefill call,
     * the abort) to {@code called}.
     */
    private static final class SplittingBalancer implements AutoCloseable {
        final HttpServer server;
        final HttpClient client = HttpClient.newHttpClient();
        final AtomicInteger posts = new AtomicInteger();

        SplittingBalancer(URI probed, URI called) throws IOException {
            server = HttpServer.create(new InetSocketAddress(InetAddress.getLoopbackAddress(), 0), 0);
            server.createContext("/", ex -> forward(ex, ex.getRequestMethod().equals("GET") ? probed : called));
            server.start();
        }

        URI uri() {
            return URI.create("http://" + InetAddress.getLoopbackAddress().getHostAddress() + ":" + server.getAddress().getPort() + "/");
        }

        private void forward(HttpExchange ex, URI to) throws IOException {
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
            Await.until(() -> linked(decode) == 2, Duration.ofSeconds(30), () -> "both linked: " + InJvmRoleServers.status(decode.baseUri()));
            try (SplittingBalancer balancer = new SplittingBalancer(probed.baseUri(), called.baseUri());
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
            assertEquals(3, completed(called), "transfers from the process that took the calls");
            assertEquals(0, completed(probed), "none from the one the probe read");
        }
    }

    private static int linked(RoleServer decode) {
        final JsonNode l = InJvmRoleServers.status(decode.baseUri()).path("linked_instances");
        return l.isArray() ? l.size() : -1;
    }

    private static long completed(RoleServer prefill) {
        final JsonNode c = InJvmRoleServers.status(prefill.baseUri()).path("counters").path("transfers_completed");
        assertTrue(c.isIntegralNumber(), c::toString);
        return c.asLong();
    }
}
