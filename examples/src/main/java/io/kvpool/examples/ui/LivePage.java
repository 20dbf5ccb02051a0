package io.kvpool.examples.ui;

import com.sun.net.httpserver.HttpServer;

import java.util.function.Supplier;

/**
 * The live page: {@code GET /} serves a self-refreshing HTML page (resource {@code index.html} beside
 * this class) that polls {@code GET /api/state} and draws each pool's pages coloured by state, and the
 * counters.
 *
 * <p>{@code /api/state} answers {@link LiveState} as JSON:
 * <pre>
 * {"pools":[{"role":"prefill","capacity":512,"pages":"FFOOR...","counters":{"free":500,...}}, ...],
 *  "counters":{"requests":12,"completed":10,...}}
 * </pre>
 */
public final class LivePage {
    private LivePage() {
    }

    /** Registers {@code /} and {@code /api/state} on the server; {@code state} is called once per poll. */
    public static void mount(HttpServer server, Supplier<LiveState> state) {
        throw new UnsupportedOperationException("LivePage.mount: not written yet (issue #5, ui helper)");
    }
}
