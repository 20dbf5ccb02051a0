package io.kvpool.examples.ui;

import io.kvpool.examples.http.HttpCall;
import io.kvpool.examples.http.HttpHandler;
import io.kvpool.examples.http.InternalErrors;

import java.io.IOException;
import java.io.InputStream;
import java.io.UncheckedIOException;
import java.util.Map;
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
 * <h2>Routes ({@link #handler})</h2>
 * <pre>
 *   GET|HEAD /, /index.html   200 text/html      the page
 *   GET|HEAD /api/state       200 application/json   the state; 500 JSON error if the supplier throws
 *   other methods on those    405 with Allow: GET, HEAD
 *   any other path            404 JSON error
 * </pre>
 * Errors are the server's documented shape, {@code {"error":{"type":…,"reason":…,"message":…}}}. A server with
 * other routes ({@code /v1/...}, {@code /metrics}) routes those itself and hands the rest to this handler.
 */
public final class LivePage {
    /** The page's path. */
    public static final String PAGE_PATH = "/";
    /** The state's path. */
    public static final String STATE_PATH = "/api/state";

    private static final System.Logger LOG = System.getLogger(LivePage.class.getName());
    private static final String ALLOW = "GET, HEAD";
    /** Inline script and style only; the page may talk to its own origin and nothing else. */
    private static final String CSP = "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; "
        + "connect-src 'self'; img-src 'self' data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

    private LivePage() {
    }

    /**
     * The handler that serves {@code /}, {@code /index.html} and {@code /api/state} and answers 404 for any
     * other path.
     *
     * @param state called once per {@code /api/state} request, on the request's thread
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

    private record Handler(Supplier<LiveState> state, byte[] page) implements HttpHandler {
        @Override
        public void handle(HttpCall ex) throws IOException {
            final String path = ex.path();
            final boolean isPage = PAGE_PATH.equals(path) || "/index.html".equals(path);
            if (!isPage && !STATE_PATH.equals(path)) {
                error(ex, 404, "not_found", "no_such_path", "no endpoint at " + path);
                return;
            }
            final String method = ex.method();
            if (!"GET".equals(method) && !"HEAD".equals(method)) {
                ex.setHeader("Allow", ALLOW);
                error(ex, 405, "method_not_allowed", "method_not_allowed", method + " " + path + " is not allowed; use " + ALLOW);
                return;
            }
            ex.setHeader("X-Content-Type-Options", "nosniff");
            if (isPage) {
                ex.setHeader("Content-Security-Policy", CSP);
                ex.setHeader("Cache-Control", "no-cache");
                ex.respond(200, "text/html; charset=utf-8", page);
                return;
            }
            final byte[] json;
            try {
                json = StateJson.write(state.get());
            } catch (RuntimeException e) {
                final String id = InternalErrors.log(LOG, "reading the live state", e); // its text stays in the log
                error(ex, 500, "server_error", "state_unavailable", "state unavailable: " + InternalErrors.message(id),
                    Map.of("error_id", id));
                return;
            }
            ex.setHeader("Cache-Control", "no-store");
            ex.respond(200, "application/json", json);
        }

        private static void error(HttpCall ex, int status, String type, String reason, String message) throws IOException {
            error(ex, status, type, reason, message, Map.of());
        }

        private static void error(HttpCall ex, int status, String type, String reason, String message, Map<String, ?> fields)
            throws IOException {
            ex.setHeader("Cache-Control", "no-store");
            ex.setHeader("X-Content-Type-Options", "nosniff");
            ex.respondError(status, type, reason, message, fields, 0);
        }
    }
}
