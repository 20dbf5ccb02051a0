package io.kvpool.examples.ui;

import com.fasterxml.jackson.databind.node.JsonNodeFactory;
import com.fasterxml.jackson.databind.node.ObjectNode;
import com.sun.net.httpserver.HttpExchange;
import com.sun.net.httpserver.HttpHandler;
import com.sun.net.httpserver.HttpServer;

import java.io.IOException;
import java.io.InputStream;
import java.io.OutputStream;
import java.io.UncheckedIOException;
import java.nio.charset.StandardCharsets;
import java.util.Objects;
import java.util.function.Supplier;

/**
 * The live page: {@code GET /} serves a self-refreshing HTML page (resource {@code index.html} beside
 * this class: plain HTML, inline CSS and JavaScript, nothing fetched from elsewhere) that polls
 * {@code GET /api/state} and draws each pool's pages coloured by state and who holds them, rates over the last 1 and
 * 5 minutes (from the counters it polled), recent drains and quarantines, and the counters.
 *
 * <p>{@code /api/state} answers {@link LiveState} as JSON ({@link StateJson}), never cached
 * (docs/example-server.md, "The live page and /api/state"):
 * <pre>
 * {"pools":[{"role":"prefill","capacity":512,"pages":"FFOOR...","counters":{"free":500,...},
 *            "holders":[{"request_id":7,"tenant":"alice","phase":"prefill","pages":2,"slots":[2,3]}]}, ...],
 *  "counters":{"requests":12,"completed":10,...}}
 * </pre>
 *
 * <h2>Routes (one context, {@code /})</h2>
 * <pre>
 *   GET|HEAD /, /index.html   200 text/html      the page
 *   GET|HEAD /api/state       200 application/json   the state; 500 JSON {"error":...} if the supplier throws
 *   other methods on those    405 with Allow: GET, HEAD
 *   any other path under /    404 JSON {"error":"not found","path":...}
 * </pre>
 * The server's other routes ({@code /v1/...}, {@code /metrics}) are contexts of their own, which the
 * JDK server prefers to {@code /} for their paths.
 */
public final class LivePage {
    /** The page's path. */
    public static final String PAGE_PATH = "/";
    /** The state's path. */
    public static final String STATE_PATH = "/api/state";

    private static final String ALLOW = "GET, HEAD";
    /** Inline script and style only; the page may talk to its own origin and nothing else. */
    private static final String CSP = "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; "
        + "connect-src 'self'; img-src 'self' data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

    private LivePage() {
    }

    /**
     * Registers the context {@code /}, which serves the page and {@code /api/state} (see the routes above).
     *
     * @param server the server; it must not have a context at {@code /} yet
     * @param state  called once per {@code /api/state} request, on the server's executor
     * @throws IllegalArgumentException if the server already has a context at {@code /}
     */
    public static void mount(HttpServer server, Supplier<LiveState> state) {
        Objects.requireNonNull(server, "server");
        server.createContext(PAGE_PATH, handler(state));
    }

    /**
     * The handler {@link #mount} registers, for a server that routes by itself: it serves {@code /},
     * {@code /index.html} and {@code /api/state} and answers 404 for any other path.
     */
    public static HttpHandler handler(Supplier<LiveState> state) {
        return new Handler(Objects.requireNonNull(state, "state"), indexHtml());
    }

    /** @return the page's bytes (the classpath resource {@code index.html} beside this class) */
    public static byte[] indexHtml() {
        try (InputStream in = LivePage.class.getResourceAsStream("index.html")) {
            if (in == null) {
                throw new IllegalStateException("resource io/kvpool/examples/ui/index.html is missing from the classpath");
            }
            return in.readAllBytes();
        } catch (IOException e) {
            throw new UncheckedIOException("cannot read io/kvpool/examples/ui/index.html", e);
        }
    }

    /** Most bytes of a request body read (and dropped) before answering: these paths take no body. */
    public static final int DRAIN_LIMIT = 64 << 10;

    private record Handler(Supplier<LiveState> state, byte[] page) implements HttpHandler {
        @Override
        public void handle(HttpExchange ex) throws IOException {
            try (ex; InputStream body = ex.getRequestBody()) {
                if (!drain(body)) {
                    ex.getResponseHeaders().set("Connection", "close"); // the rest of a huge body is not read
                }
                final String path = ex.getRequestURI().getRawPath();
                final boolean isPage = PAGE_PATH.equals(path) || "/index.html".equals(path);
                if (!isPage && !STATE_PATH.equals(path)) {
                    json(ex, 404, error("not found", "path", path));
                    return;
                }
                final String method = ex.getRequestMethod();
                if (!"GET".equals(method) && !"HEAD".equals(method)) {
                    ex.getResponseHeaders().set("Allow", ALLOW);
                    json(ex, 405, error("method not allowed", "method", method));
                    return;
                }
                if (isPage) {
                    ex.getResponseHeaders().set("Content-Security-Policy", CSP);
                    ex.getResponseHeaders().set("Cache-Control", "no-cache");
                    send(ex, 200, "text/html; charset=utf-8", page);
                    return;
                }
                final byte[] json;
                try {
                    json = StateJson.write(state.get());
                } catch (RuntimeException e) {
                    json(ex, 500, error("state unavailable", "message", String.valueOf(e)));
                    return;
                }
                json(ex, 200, json);
            }
        }

        /**
         * Reads and drops what a client sent (none of these paths takes a body), at most {@link #DRAIN_LIMIT} bytes,
         * so that a small body leaves the connection reusable and a huge one cannot hold a thread.
         *
         * @return whether the body ended within the limit
         */
        private static boolean drain(InputStream in) throws IOException {
            long left = DRAIN_LIMIT;
            final byte[] sink = new byte[16 << 10];
            for (int r; (r = in.read(sink, 0, (int) Math.min(sink.length, left + 1))) > 0; ) {
                left -= r;
                if (left < 0) {
                    return false;
                }
            }
            return true;
        }

        private static byte[] error(String error, String key, String value) {
            final ObjectNode n = JsonNodeFactory.instance.objectNode();
            n.put("error", error);
            n.put(key, value);
            return n.toString().getBytes(StandardCharsets.UTF_8);
        }

        private static void json(HttpExchange ex, int status, byte[] body) throws IOException {
            ex.getResponseHeaders().set("Cache-Control", "no-store");
            send(ex, status, "application/json", body);
        }

        private static void send(HttpExchange ex, int status, String type, byte[] body) throws IOException {
            ex.getResponseHeaders().set("Content-Type", type);
            ex.getResponseHeaders().set("X-Content-Type-Options", "nosniff");
            if ("HEAD".equals(ex.getRequestMethod())) {
                ex.getResponseHeaders().set("Content-Length", Integer.toString(body.length));
                ex.sendResponseHeaders(status, -1);
                return;
            }
            ex.sendResponseHeaders(status, body.length);
            try (OutputStream out = ex.getResponseBody()) {
                out.write(body);
            }
        }
    }
}
