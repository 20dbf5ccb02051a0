package io.kvpool.examples.server;

import com.fasterxml.jackson.databind.ObjectMapper;
import io.kvpool.KvPool;
import io.kvpool.examples.http.HttpCall;
import io.kvpool.examples.http.HttpFront;
import io.kvpool.examples.http.HttpHandler;
import io.kvpool.examples.server.api.ApiError;
import io.kvpool.examples.server.api.Http;
import io.kvpool.examples.server.api.Json;
import io.kvpool.examples.server.config.ServerConfig;
import io.kvpool.examples.server.metrics.ServerMetrics;
import io.kvpool.examples.server.remote.RemoteRoles;
import io.kvpool.examples.server.role.InJvmRoles;
import io.kvpool.examples.server.role.RoleStatus;
import io.kvpool.examples.server.role.Roles;
import io.kvpool.examples.server.router.CompletionsHandler;
import io.kvpool.examples.server.router.Router;
import io.kvpool.examples.server.router.RouterCounters;
import io.kvpool.examples.ui.LivePage;
import io.kvpool.examples.ui.LiveState;

import java.io.IOException;
import java.io.UncheckedIOException;
import java.net.URI;
import java.time.Duration;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Objects;
import java.util.concurrent.CountDownLatch;

/**
 * The example server: an HTTP front ({@link HttpFront}: Netty, one virtual thread per request)
 * over a {@link Router} and two roles — by default {@link InJvmRoles}: prefill and decode in this JVM,
 * each with its own pool and transfer engine, KV moving between them through the transfer protocol; with
 * {@code --role router}, {@link RemoteRoles}: the roles are processes of their own ({@link RoleServer}), and
 * {@code /metrics} and the live page merge what each reports.
 *
 * <h2>Endpoints</h2>
 * <ul>
 *   <li>{@code POST /v1/completions} — {@link CompletionsHandler}</li>
 *   <li>{@code GET /metrics} — Prometheus text ({@link ServerMetrics})</li>
 *   <li>{@code GET /} and {@code GET /api/state} — the live page ({@link LivePage}), fed by {@link #liveState()}</li>
 * </ul>
 *
 * <pre>{@code
 * try (KvServer server = KvServer.start(ServerConfig.builder().port(0).build())) {
 *     URI uri = server.baseUri();                      // http://127.0.0.1:<port>/
 *     ...
 *     server.awaitQuiescence(Duration.ofSeconds(5));   // nothing in flight, every transfer over
 *     server.prefillPool().verifyAccounting();
 * }
 * }</pre>
 */
public final class KvServer implements AutoCloseable {

    private static final System.Logger LOG = System.getLogger("io.kvpool.examples.server");

    private final ServerConfig config;
    private final Roles roles;
    private final Router router;
    private final ServerMetrics metrics;
    private final HttpFront http;
    private final ObjectMapper json = Json.strict();
    private final CountDownLatch closedLatch = new CountDownLatch(1);
    private boolean closed;

    private KvServer(ServerConfig config, Roles roles) throws IOException {
        this.config = config;
        this.roles = roles;
        this.router = new Router(config, roles.prefill(), roles.decode());
        this.metrics = ServerMetrics.forServer(config, router, roles);
        final HttpHandler completions = new CompletionsHandler(router, json);
        final HttpHandler page = LivePage.handler(this::liveState); // GET /, /index.html and /api/state; 404 elsewhere
        try {
            this.http = HttpFront.start(config.host(), config.port(), Http.limits(config, config.maxBodyBytes()), call -> {
                final String path = call.path();
                if (path.equals("/v1") || path.startsWith("/v1/")) {
                    completions.handle(call); // 404 for any other /v1 path, in the API's error shape
                } else if (path.equals("/metrics")) {
                    metrics(call);
                } else {
                    page.handle(call);
                }
            });
        } catch (IOException | RuntimeException e) {
            metrics.close(); // nothing else holds it: the server never started
            throw e;
        }
        metrics.bindHttp(http);
    }

    /**
     * Starts the server: with both roles in this JVM ({@link InJvmRoles}) for {@code --role all}, or as the
     * router of role processes elsewhere ({@link RemoteRoles}) for {@code --role router}.
     *
     * @throws io.kvpool.PoolCapacityException if a pool cannot hold the advertised context (names both numbers)
     * @throws IllegalArgumentException        for a configuration this build cannot run, or {@code --role prefill|decode}
     *                                         (those are {@link RoleServer}s)
     * @throws IllegalStateException           for a router whose roles do not match it ({@link RemoteRoles#preflight}: the table)
     * @throws UncheckedIOException            if the port cannot be bound
     */
    public static KvServer start(ServerConfig config) {
        return switch (config.topology().role()) {
            case ALL -> start(config, InJvmRoles.start(config, Duration.ofSeconds(10)));
            case ROUTER -> {
                final ServerConfig checked = RemoteRoles.preflight(config); // refuses roles that do not match
                yield start(checked, RemoteRoles.connect(checked));
            }
            default -> throw new IllegalArgumentException("--role " + config.topology().role().flag()
                + " runs one role, not the HTTP front: start it with RoleServer.start");
        };
    }

    /**
     * Starts the HTTP front over the given roles (which the server then owns and closes).
     *
     * @throws UncheckedIOException if the port cannot be bound (the roles are closed then)
     */
    public static KvServer start(ServerConfig config, Roles roles) {
        Objects.requireNonNull(config, "config");
        Objects.requireNonNull(roles, "roles");
        if (config.unsafe()) {
            LOG.log(System.Logger.Level.ERROR, "UNSAFE example server: safeguards OFF " + config.unsafeSwitches()
                + " — for the incident replay only; responses can contain other tenants' data");
        }
        try {
            return new KvServer(config, roles);
        } catch (IOException | RuntimeException e) {
            roles.close();
            if (e instanceof IOException io) {
                throw new UncheckedIOException("cannot serve HTTP on " + config.host() + ":" + config.port() + ": " + io.getMessage(), io);
            }
            throw (RuntimeException) e;
        }
    }

    /** @return the configuration */
    public ServerConfig config() {
        return config;
    }

    /** @return the port the server listens on (the actual one when the configuration asked for 0) */
    public int port() {
        return http.port();
    }

    /** @return {@code http://host:port/} */
    public URI baseUri() {
        return http.baseUri();
    }

    /** @return the roles */
    public Roles roles() {
        return roles;
    }

    /**
     * @return the prefill pool, for accounting checks
     * @throws IllegalStateException if the roles are not in this JVM
     */
    public KvPool prefillPool() {
        return inJvm().prefillPool();
    }

    /**
     * @return the decode pool, for accounting checks
     * @throws IllegalStateException if the roles are not in this JVM
     */
    public KvPool decodePool() {
        return inJvm().decodePool();
    }

    private InJvmRoles inJvm() {
        if (roles instanceof InJvmRoles r) {
            return r;
        }
        throw new IllegalStateException("the roles are not in this JVM: " + roles);
    }

    /** @return the router's counters by name: requests, completed, aborted, timed_out, rejected, failed, in_flight */
    public Map<String, Long> counters() {
        final RouterCounters c = router.counters();
        final Map<String, Long> m = new LinkedHashMap<>();
        m.put("requests", (long) c.requests.count());
        m.put("completed", (long) c.completed.count());
        m.put("aborted", (long) c.aborted.count());
        m.put("timed_out", (long) c.timedOut.count());
        m.put("rejected", c.rejectedTotal());
        m.put("failed", c.failedTotal());
        m.put("in_flight", (long) c.inFlight.get());
        return m;
    }

    /** @return both roles' status, prefill first */
    public List<RoleStatus> roleStatus() {
        return List.of(roles.prefill().status(), roles.decode().status());
    }

    /**
     * @return what the live page shows: both pools and the counters, named after their Prometheus names
     *         ({@link ServerMetrics#liveCounters}: the router's, then each role's prefixed by its name)
     */
    public LiveState liveState() {
        final List<RoleStatus> s = roleStatus();
        return new LiveState(List.of(s.get(0).pool(), s.get(1).pool()), metrics.liveCounters(s));
    }

    /** @return the {@code /metrics} text (Micrometer's Prometheus registry, {@link ServerMetrics}) */
    public String metricsText() {
        return metrics.scrape();
    }

    /**
     * Waits until no request is in flight and neither role has a transfer or a decoded sequence open: the
     * point where both pools' accounting can be checked.
     *
     * @return whether that happened before the timeout
     */
    public boolean awaitQuiescence(Duration timeout) throws InterruptedException {
        final long end = System.nanoTime() + timeout.toNanos();
        while (router.counters().inFlight.get() > 0 || roles.prefill().activeTransfers() > 0 || roles.decode().activeTransfers() > 0) {
            if (System.nanoTime() - end > 0) {
                return false;
            }
            Thread.sleep(2);
        }
        return true;
    }

    /** Blocks until {@link #close()} finished. */
    public void awaitClose() throws InterruptedException {
        closedLatch.await();
    }

    private void metrics(HttpCall call) throws IOException {
        try {
            Http.method(call, "GET");
        } catch (ApiError e) {
            Http.sendError(call, json, e);
            return;
        }
        call.respond(200, ServerMetrics.CONTENT_TYPE, Http.utf8(metricsText()));
    }

    /**
     * Stops gracefully, as {@code serve} does on SIGTERM or Ctrl-C: takes no new connection and answers a new request
     * on an open one 503 {@code server_draining} (Retry-After), lets the requests in flight finish for up to
     * {@code grace} (each connection closes after its answer), then {@link #close()}s, which aborts what is left.
     * Returns as soon as nothing is in flight. Idempotent, as {@link #close()} is.
     */
    public void shutdown(Duration grace) {
        Objects.requireNonNull(grace, "grace");
        router.drain();
        http.stopAccepting();
        http.awaitNoCalls(grace);
        close(); // what is left is aborted, and its clients are told so
    }

    /**
     * Closes this server if the JVM exits first (Ctrl-C, SIGTERM), so that its pool files in {@code /dev/shm} do not
     * outlive the process, for a command that runs the server for a while and closes it itself.
     *
     * @return what takes the hook back: call it once the command closed the server (it does nothing once the JVM exits)
     */
    public Runnable closeOnExit() {
        final Thread hook = new Thread(() -> {
            close();
            try { // a close already under way on another thread (the command's own): the JVM halts when hooks end
                closedLatch.await(30, java.util.concurrent.TimeUnit.SECONDS);
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
            }
        }, "kvpool-close-on-exit");
        Runtime.getRuntime().addShutdownHook(hook);
        return () -> {
            try {
                Runtime.getRuntime().removeShutdownHook(hook);
            } catch (IllegalStateException exiting) {
                // the JVM is exiting: the hook runs or ran, and close() is idempotent
            }
        };
    }

    /**
     * Stops taking requests (503), aborts those in flight (paired; their clients get a 503 {@code server_closing}
     * error, counted as a failure, not as a client abort), lets their transfers drain (up to 2 s), stops the HTTP
     * server, then closes the roles. Idempotent.
     */
    @Override
    public void close() {
        synchronized (this) {
            if (closed) {
                return;
            }
            closed = true;
        }
        try {
            router.close(); // first: new requests get 503, those in flight end as the server's (not their clients') aborts
            try {
                awaitQuiescence(Duration.ofSeconds(2)); // ... and can still tell their clients so
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
            }
            http.stopListening(Duration.ofSeconds(1)); // the calls of those requests write their errors (the router's count ended before)
            // each step even if one before it throws: a role that fails to close must not keep the port or the GC listener
            Throwable failed = null;
            for (Runnable step : new Runnable[] {roles::close, http::close, metrics::close}) {
                try {
                    step.run();
                } catch (RuntimeException | Error e) {
                    if (failed == null) {
                        failed = e;
                    } else {
                        failed.addSuppressed(e);
                    }
                }
            }
            if (failed instanceof RuntimeException e) {
                throw e;
            }
            if (failed != null) {
                throw (Error) failed;
            }
        } finally {
            closedLatch.countDown();
        }
    }

    @Override
    public String toString() {
        return "KvServer[" + baseUri() + ", " + roles + "]";
    }
}
