package io.kvpool.examples.server.remote;

import com.fasterxml.jackson.databind.ObjectMapper;
import com.sun.net.httpserver.HttpServer;
import io.kvpool.examples.server.ServerTests;
import io.kvpool.examples.server.role.RoleStatus;
import io.kvpool.examples.ui.PoolView;

import java.io.IOException;
import java.io.OutputStream;
import java.io.UncheckedIOException;
import java.net.InetAddress;
import java.net.InetSocketAddress;
import java.net.URI;
import java.nio.charset.StandardCharsets;
import java.util.Map;
import java.util.function.Function;

/**
 * A role process of a test's making, on loopback: {@code GET /internal/status} reads ready, with an identity that
 * matches a router of {@link ServerTests#small()}; every other path answers what the test's function says.
 */
public final class StubRole implements AutoCloseable {

    /** One answer: an HTTP status and a JSON body (none for 204). */
    public record Reply(int status, String body) {
        /** 204, no body. */
        public static final Reply NO_CONTENT = new Reply(204, "");

        /** @return {@code status} with a JSON error naming {@code path} */
        public static Reply error(int status, String path) {
            return new Reply(status, "{\"error\":{\"type\":\"server_error\",\"reason\":\"stub\",\"message\":\"no endpoint at " + path
                + "\"}}");
        }
    }

    private final HttpServer server;
    private final java.util.Queue<String> paths;
    private final java.util.Queue<String> bodies;

    private StubRole(HttpServer server, java.util.Queue<String> paths, java.util.Queue<String> bodies) {
        this.server = server;
        this.paths = paths;
        this.bodies = bodies;
    }

    /** @return each call received so far but the status reads, as {@code "<path> <body>"}, in the order they came */
    public java.util.List<String> calls() {
        return java.util.List.copyOf(bodies);
    }

    /** @return the paths of the calls received so far but the status reads, in the order they came */
    public java.util.List<String> paths() {
        return java.util.List.copyOf(paths);
    }

    /**
     * @param role    "prefill" or "decode", as its status names it
     * @param answers the reply to each call but the status, by path ({@code /internal/prefill} …); called on the
     *                server's threads
     */
    public static StubRole start(String role, Function<String, Reply> answers) {
        return start(role, 0, null, answers);
    }

    /**
     * As {@link #start(String, Function)}, with a status that reports engine instance ids.
     *
     * @param instance the role's engine id (0: none)
     * @param linked   the other role's engine ids linked to it, or {@code null}
     */
    public static StubRole start(String role, long instance, java.util.List<Long> linked, Function<String, Reply> answers) {
        final byte[] status;
        final java.util.Queue<String> paths = new java.util.concurrent.ConcurrentLinkedQueue<>();
        final java.util.Queue<String> bodies = new java.util.concurrent.ConcurrentLinkedQueue<>();
        try {
            status = new ObjectMapper().writeValueAsBytes(RemoteFixtures.statusJson(new RoleStatus(role, new PoolView(role, 0, "",
                Map.of()), Map.of(), Map.of()).withInstances(instance, linked), 0, true, ServerTests.small().build(), 128, 512));
            final HttpServer s = HttpServer.create(new InetSocketAddress(InetAddress.getLoopbackAddress(), 0), 0);
            s.setExecutor(java.util.concurrent.Executors.newVirtualThreadPerTaskExecutor());
            s.createContext("/", ex -> {
                final String body = new String(ex.getRequestBody().readAllBytes(), StandardCharsets.UTF_8);
                final String path = ex.getRequestURI().getPath();
                if (!path.equals("/internal/status")) {
                    paths.add(path);
                    bodies.add(path + " " + body);
                }
                final Reply r = path.equals("/internal/status") ? new Reply(200, new String(status, StandardCharsets.UTF_8))
                    : answers.apply(path);
                if (r.status() == 204) {
                    ex.sendResponseHeaders(204, -1);
                    ex.close();
                    return;
                }
                final byte[] b = r.body().getBytes(StandardCharsets.UTF_8);
                ex.getResponseHeaders().set("Content-Type", "application/json");
                ex.sendResponseHeaders(r.status(), b.length);
                try (OutputStream out = ex.getResponseBody()) {
                    out.write(b);
                }
            });
            s.start();
            return new StubRole(s, paths, bodies);
        } catch (IOException e) {
            throw new UncheckedIOException(e);
        }
    }

    /** @return e.g. {@code http://127.0.0.1:40123/} */
    public URI base() {
        return URI.create("http://127.0.0.1:" + server.getAddress().getPort() + "/");
    }

    /** Stops the server at once; idempotent. */
    @Override
    public void close() {
        server.stop(0);
    }
}
