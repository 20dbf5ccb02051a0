package io.kvpool.examples.server.remote;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import io.kvpool.examples.http.HttpCall;
import io.kvpool.examples.http.HttpHandler;
import io.kvpool.examples.server.api.ApiError;
import io.kvpool.examples.server.api.Auth;
import io.kvpool.examples.server.api.Http;
import io.kvpool.examples.server.api.Json;
import io.kvpool.examples.server.config.ServerConfig;
import io.kvpool.examples.server.metrics.ServerMetrics;
import io.kvpool.examples.server.role.PrefillRole;
import io.kvpool.examples.server.role.RoleStatus;

import java.io.IOException;
import java.util.Objects;
import java.util.function.BooleanSupplier;
import java.util.function.IntSupplier;
import java.util.function.Supplier;

/**
 * The internal endpoints every role process serves to the router ({@link io.kvpool.examples.server.RoleServer}), and the plumbing
 * of its role-specific ones:
 * <ul>
 *   <li>{@code GET /internal/status} — {@link RoleJson#status}: pool view, counters, gauges, transfers in
 *       flight, whether the KV link is up, and {@code identity} ({@link RoleIdentity}: build, environment, model,
 *       layout, pool pages, largest safe context);</li>
 *   <li>{@code GET /metrics} — the role's own Prometheus text ({@link ServerMetrics#forRole}: its JVM, pool and engine);</li>
 *   <li>{@code GET /internal/accounting} — checks the pool's accounting invariants ({@link io.kvpool.KvPool#verifyAccounting()};
 *       meaningful only at quiescence): {@code {"balanced":true,"idle":true,"snapshot":"…"}} (idle: nothing outstanding,
 *       {@link io.kvpool.PoolSnapshot#idle()}), or 409 naming the first violation;</li>
 *   <li>{@code POST /internal/abort} {@code {"request_id":7,"why":"…"}} — half of a paired abort; 204 always
 *       (idempotent, unknown ids included);</li>
 *   <li>anything else under {@code /internal/}: {@link #route}; elsewhere 404 naming the router.</li>
 * </ul>
 * Errors are the public API's JSON errors ({@link ApiError}): 400 for a malformed body (naming the field) — also
 * for a request id ≤ 0, a tenant that is not a tenant name, and on decode prompt_tokens ≤ 0 or max_new_tokens
 * &lt; 0, refused before the role starts anything (never a 200 followed by an error event),
 * 404, 405, 503 when the role is closed.
 */
public abstract class RoleEndpoint implements HttpHandler {

    private static final System.Logger LOG = System.getLogger("io.kvpool.examples.server");
    /** Smallest limit on an internal request body (the front answers 413 beyond {@link #maxBody}). */
    public static final int MAX_BODY = 4 << 20;
    /** Bytes of a prefill call per byte of prompt, at most: a 1-byte token is 4 of base64, 2 quotes and a comma. */
    static final int CALL_BYTES_PER_PROMPT_BYTE = 8;

    /**
     * @param config the role's configuration
     * @return the largest internal request body a role takes: the prefill call of the largest prompt a router with the
     *         same {@code --max-body-bytes} accepts, at least {@link #MAX_BODY}, at most 1 GiB (so for a
     *         {@code --max-body-bytes} up to 128 MiB)
     */
    public static long maxBody(ServerConfig config) {
        return Math.max(MAX_BODY, Math.min(1L << 30, (long) CALL_BYTES_PER_PROMPT_BYTE * config.maxBodyBytes()));
    }

    protected final ObjectMapper json;
    private final String role;
    private final ServerConfig config;
    private final Readouts readouts;
    private volatile ServerMetrics metrics;

    /**
     * What the common endpoints read of the role, as its own methods (for example {@code role::status}).
     *
     * @param pool            the role's pool (for the accounting check)
     * @param status          the role's status now
     * @param activeTransfers transfers not yet over
     * @param ready           whether the role takes requests: its KV link is up (and decode is not draining)
     */
    record Readouts(Supplier<io.kvpool.KvPool> pool, Supplier<RoleStatus> status, IntSupplier activeTransfers, BooleanSupplier ready) {
        Readouts {
            Objects.requireNonNull(pool, "pool");
            Objects.requireNonNull(status, "status");
            Objects.requireNonNull(activeTransfers, "activeTransfers");
            Objects.requireNonNull(ready, "ready");
        }
    }

    RoleEndpoint(String role, ObjectMapper json, ServerConfig config, Readouts readouts) {
        this.role = Objects.requireNonNull(role, "role");
        this.json = Objects.requireNonNull(json, "json");
        this.config = Objects.requireNonNull(config, "config");
        this.readouts = Objects.requireNonNull(readouts, "readouts");
    }

    /** Where this role's KV link goes or comes in; set once by its server, before it serves ({@code null} until). */
    private volatile String kv;

    /**
     * Sets the KV endpoint this role reports: where decode takes prefill's links, where prefill links to. Once, by the
     * role's server.
     */
    public void kvEndpoint(String endpoint) {
        kv = Objects.requireNonNull(endpoint, "endpoint");
    }

    /** @return who this role is and what it can carry (the router's and {@code preflight}'s check) */
    RoleIdentity identity() {
        final long pages = role.equals(PrefillRole.ROLE) ? config.prefillPages() : config.decodePages();
        return RoleIdentity.of(role, config, pages, readouts.pool().get().maxContextTokens(), kv);
    }

    /** Serves {@code metrics} on {@code GET /metrics} (the role process's registry); @return {@code metrics} */
    public ServerMetrics serveMetrics(ServerMetrics metrics) {
        this.metrics = Objects.requireNonNull(metrics, "metrics");
        return metrics;
    }

    /** @return the role's transfers not yet over (decode: with the committed sequences it still decodes) */
    public int activeTransfers() {
        return readouts.activeTransfers().getAsInt();
    }

    /** Aborts {@code requestId} (idempotent; unknown ids do nothing). */
    abstract void abort(long requestId, String why);

    /**
     * Handles a role-specific path.
     *
     * @return whether the path is one of the role's
     */
    abstract boolean route(HttpCall ex, String path) throws ApiError, IOException;

    @Override
    public final void handle(HttpCall ex) {
        try {
            final String path = ex.path();
            switch (path) {
                case "/internal/status" -> {
                    Http.method(ex, "GET");
                    final java.util.Map<String, Object> s = RoleJson.status(readouts.status().get(), readouts.activeTransfers().getAsInt(),
                        readouts.ready().getAsBoolean());
                    s.put("identity", identity().json());
                    Http.sendJson(ex, json, 200, s);
                }
                case "/metrics" -> {
                    Http.method(ex, "GET");
                    ex.respond(200, ServerMetrics.CONTENT_TYPE, Http.utf8(Objects.requireNonNull(metrics, "no metrics served").scrape()));
                }
                case "/internal/accounting" -> {
                    Http.method(ex, "GET");
                    final io.kvpool.PoolSnapshot snap;
                    try {
                        snap = readouts.pool().get().verifyAccounting();
                    } catch (IllegalStateException e) {
                        throw ApiError.of(409, "conflict", "accounting_violated", role + " pool: " + e.getMessage());
                    }
                    Http.sendJson(ex, json, 200, java.util.Map.of("balanced", snap.balanced(), "idle", snap.idle(), "snapshot", snap.toString()));
                }
                case "/internal/abort" -> {
                    Http.method(ex, "POST");
                    final JsonNode b = body(ex);
                    abort(requestId(b), b.path("why").asText("the router aborted it"));
                    ex.respond(204, "application/json", new byte[0]);
                }
                default -> {
                    if (!path.startsWith("/internal/") || !route(ex, path)) {
                        throw ApiError.of(404, "not_found", "no_such_path", "no endpoint at " + path + ": this is the " + role
                            + " role of the kvpool example; clients talk to the router (--role router)");
                    }
                }
            }
        } catch (ApiError e) {
            Http.sendError(ex, json, e);
        } catch (IllegalArgumentException e) {
            Http.sendError(ex, json, ApiError.badRequest("malformed_internal_request", e.getMessage()));
        } catch (IOException e) {
            LOG.log(System.Logger.Level.DEBUG, role + ": writing a response failed: " + e);
        } catch (RuntimeException e) {
            // the router passes a role's message on to its client (502 role_error): the id, not the text
            Http.sendError(ex, json, ApiError.internal(LOG, role + ": " + ex.method() + " " + ex.path(), e));
        }
    }


    /**
     * @return the request body as JSON
     * @throws ApiError                 415 unless the request says {@code Content-Type: application/json}: a browser
     *                                  page may post {@code text/plain} to any origin without asking first, and an
     *                                  internal endpoint must not act on one
     * @throws IllegalArgumentException if it is not a JSON object
     */
    JsonNode body(HttpCall ex) throws ApiError {
        final String type = ex.header("Content-Type");
        final String mediaType = type == null ? "" : type.split(";", 2)[0].strip();
        if (!mediaType.equalsIgnoreCase("application/json")) {
            throw ApiError.of(415, "invalid_request_error", "unsupported_media_type", "internal " + ex.method() + " " + ex.path()
                + " takes Content-Type: application/json, got " + (type == null ? "none" : "'" + type + "'"));
        }
        final byte[] b = ex.body(); // within maxBody: the front refused a larger one with 413
        final JsonNode n;
        try {
            n = Json.read(json, b);
        } catch (IOException e) {
            throw new IllegalArgumentException("internal request body is not JSON: " + e.getMessage());
        }
        if (n == null || !n.isObject()) {
            throw new IllegalArgumentException("internal request body must be a JSON object");
        }
        return n;
    }

    /**
     * @return the body's {@code request_id}
     * @throws ApiError 400 unless it is ≥ 1 (the router's ids are; a role must not start anything for another)
     */
    static long requestId(JsonNode b) throws ApiError {
        final long id = RoleJson.number(b, "request_id");
        if (id <= 0) {
            throw ApiError.badRequest("bad_field", "request_id must be ≥ 1, was " + id);
        }
        return id;
    }

    /**
     * @return the body's {@code tenant}
     * @throws ApiError 400 unless it is a tenant name ({@code [A-Za-z0-9_-]{1,64}}, as {@link Auth} accepts)
     */
    static String tenant(JsonNode b) throws ApiError {
        final String t = RoleJson.text(b, "tenant");
        if (!Auth.TENANT.matcher(t).matches()) {
            final String shown = t.length() > 80 ? t.substring(0, 80) + "…" : t;
            throw ApiError.badRequest("bad_field", "tenant '" + shown + "' is not a tenant name ([A-Za-z0-9_-]{1,64})");
        }
        return t;
    }

    /**
     * What a role's call that threw {@code e} answers: 503 with Retry-After when the role cannot take calls now (a
     * {@link io.kvpool.examples.server.role.RoleUnavailableException}, or any failure once the role is closing);
     * any other failure is the role's own fault and is thrown on, to be answered 500.
     *
     * @return the 503
     * @throws IllegalStateException {@code e}, when it is not the role being unavailable
     */
    static ApiError unavailableOr(IllegalStateException e, boolean roleClosed, String what) {
        if (e instanceof io.kvpool.examples.server.role.RoleUnavailableException || roleClosed) {
            return closed(what);
        }
        throw e;
    }

    /** @return a 503 for a role that is closed */
    static ApiError closed(String what) {
        return new ApiError(503, "service_unavailable", "unavailable", what, java.util.Map.of(), 1);
    }
}
