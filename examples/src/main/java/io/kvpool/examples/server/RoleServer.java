package io.kvpool.examples.server;

import com.fasterxml.jackson.databind.ObjectMapper;
import io.kvpool.examples.http.HttpFront;
import io.kvpool.examples.server.api.Http;
import io.kvpool.examples.server.api.Json;
import io.kvpool.examples.server.config.ServerConfig;
import io.kvpool.examples.server.config.Topology;
import io.kvpool.examples.server.link.LinkGate;
import io.kvpool.examples.server.metrics.ServerMetrics;
import io.kvpool.examples.server.remote.DecodeEndpoint;
import io.kvpool.examples.server.remote.PrefillEndpoint;
import io.kvpool.examples.server.remote.RoleEndpoint;
import io.kvpool.examples.server.role.Drains;
import io.kvpool.examples.server.role.MeteredRole;
import io.kvpool.examples.server.role.PrefillRole;
import io.kvpool.examples.server.role.SeparateRoles;

import java.io.IOException;
import java.io.UncheckedIOException;
import java.net.URI;
import java.util.Objects;
import java.util.concurrent.CountDownLatch;

/**
 * One role of the example server in a process of its own ({@code --role prefill} or {@code --role decode}):
 * the role ({@link SeparateRoles}: its pool, its transfer engine and the KV transport to the other role) and
 * an HTTP front ({@link HttpFront}) on {@code --host}/{@code --port} with the internal endpoints the router calls
 * ({@link PrefillEndpoint}, {@link DecodeEndpoint}, and {@link RoleEndpoint}'s common ones).
 *
 * <pre>
 *   router ──POST /internal/prefill, /internal/abort──▶ prefill process ══ KV (shm / ucx) ══▶ decode process
 *   router ──POST /internal/decode (events stream back), /internal/abort──────────────────▶ decode process
 *   router ──GET /internal/status (pool view, counters, gauges)──▶ both
 * </pre>
 * The endpoints trust their caller (no keys): bind them to loopback or a private network.
 */
public final class RoleServer implements AutoCloseable {

    /**
     * System property that enables the prefill process's <b>test hook</b> {@code POST /internal/test/gate}
     * (hold prefill's page writes, drop its KV link). Never set it outside tests.
     */
    public static final String TEST_HOOKS = "kvpool.examples.testHooks";

    private final ServerConfig config;
    private final AutoCloseable role;
    private final String kvLink;
    private final ServerMetrics metrics;
    private final HttpFront http;
    private final java.util.function.IntSupplier activeTransfers;
    private final CountDownLatch closedLatch = new CountDownLatch(1);
    private boolean closed;

    private RoleServer(ServerConfig config, AutoCloseable role, RoleEndpoint endpoint, String kvLink) throws IOException {
        this.config = config;
        this.role = role;
        this.kvLink = kvLink;
        this.activeTransfers = endpoint::activeTransfers;
        this.metrics = endpoint.serveMetrics(ServerMetrics.forRole(config, (MeteredRole) role));
        try {
            this.http = HttpFront.start(config.host(), config.port(), Http.limits(config, RoleEndpoint.maxBody(config)), endpoint);
        } catch (IOException | RuntimeException e) {
            metrics.close(); // nothing else holds it: the server never started
            throw e;
        }
        metrics.bindHttp(http);
    }

    /**
     * Starts the role the configuration names ({@code --role prefill} or {@code --role decode}).
     *
     * @throws IllegalArgumentException        for any other role, or a configuration this build cannot run
     * @throws io.kvpool.PoolCapacityException if the pool cannot hold the advertised context (names both numbers)
     * @throws IllegalStateException           if another decode role already listens in the work directory
     * @throws UncheckedIOException            if the port, the work directory or the KV listener cannot be had
     * @throws io.kvpool.transfer.ucx.UcxUnavailableException with {@code --transport ucx} where UCX cannot load
     * @throws IllegalStateException           with {@code --device cuda} where no CUDA device can be used (the reason)
     */
    public static RoleServer start(ServerConfig config) {
        Objects.requireNonNull(config, "config");
        final ObjectMapper json = Json.strict();
        return switch (config.topology().role()) {
            case PREFILL -> {
                final LinkGate gate = Boolean.getBoolean(TEST_HOOKS) ? LinkGate.create(false) : null;
                final ServerConfig cfg = gate == null ? config : config.toBuilder().gate(gate).build();
                final PrefillRole p = SeparateRoles.prefill(cfg);
                final String kv = cfg.device() == ServerConfig.Device.CUDA ? "cuda-ipc:" + SeparateRoles.socketPath(cfg.workDir())
                    : cfg.topology().transport() == Topology.Transport.SHM
                    ? "shm:" + SeparateRoles.socketPath(cfg.workDir()) : "ucx:" + cfg.topology().kvAddress();
                yield open(cfg, p, new PrefillEndpoint(p, json, cfg, gate), kv);
            }
            case DECODE -> {
                final SeparateRoles.Decode d = SeparateRoles.decode(config);
                yield open(config, d.role(), new DecodeEndpoint(d.role(), json, config), d.kvListen());
            }
            default -> throw new IllegalArgumentException("RoleServer runs --role prefill or --role decode, not --role "
                + config.topology().role().flag() + " (KvServer runs the router and the one-JVM server)");
        };
    }

    /**
     * @return a KV endpoint with its socket's path made absolute, normalized and, where its directory exists, free of
     *         symbolic links: {@code --work-dir w} run in {@code /srv} and {@code --work-dir /srv/w} name one socket,
     *         and compare equal. A UCX address is returned as it is.
     */
    static String canonicalKv(String kv) {
        final int colon = kv.indexOf(':');
        final String scheme = kv.substring(0, colon + 1);
        if (!scheme.equals("shm:") && !scheme.equals("cuda-ipc:")) {
            return kv;
        }
        final java.nio.file.Path socket = java.nio.file.Path.of(kv.substring(colon + 1)).toAbsolutePath().normalize();
        try {
            return scheme + socket.getParent().toRealPath().resolve(socket.getFileName());
        } catch (IOException | RuntimeException e) { // no such directory (yet): as absolute as it gets
            return scheme + socket;
        }
    }

    private static RoleServer open(ServerConfig cfg, AutoCloseable role, RoleEndpoint endpoint, String kv) {
        endpoint.kvEndpoint(canonicalKv(kv)); // reported in its identity: preflight compares prefill's with decode's
        try {
            return new RoleServer(cfg, role, endpoint, kv);
        } catch (IOException | RuntimeException e) {
            try {
                role.close();
            } catch (Exception ignored) {
                // failing anyway
            }
            if (e instanceof IOException io) {
                throw new UncheckedIOException("cannot serve the " + cfg.topology().role().flag() + " role's endpoints on "
                    + cfg.host() + ":" + cfg.port() + ": " + io.getMessage(), io);
            }
            throw (RuntimeException) e;
        }
    }

    /**
     * The role's endpoints have no authentication: anyone who reaches them can start transfers, read status and
     * abort requests. Bound to anything but a loopback address they are reachable from the network.
     *
     * @return the warning to print for {@code host}, or {@code null} for a loopback host
     */
    static String exposureWarning(String host) {
        boolean loopback;
        try {
            loopback = java.net.InetAddress.getByName(host).isLoopbackAddress();
        } catch (java.net.UnknownHostException e) {
            loopback = false;
        }
        if (loopback) {
            return null;
        }
        final String line = "!".repeat(100);
        return line + "\n!!! WARNING: this role's internal endpoints listen on --host " + host + ", which is not loopback."
            + "\n!!! They have NO authentication: whoever reaches this port can start and abort transfers and read pool state."
            + "\n!!! Bind role processes to 127.0.0.1 or a private network only the router can reach (firewall it).\n" + line;
    }

    /** @return which role this process runs */
    public Topology.Role role() {
        return config.topology().role();
    }

    /** @return the configuration */
    public ServerConfig config() {
        return config;
    }

    /** @return the port the internal endpoints listen on */
    public int port() {
        return http.port();
    }

    /** @return {@code http://host:port/}, what the router's {@code --prefill-url} / {@code --decode-url} names */
    public URI baseUri() {
        return http.baseUri();
    }

    /** @return where the KV link is: decode's listener ({@code shm:<socket>}, {@code ucx:<host>:<port>}), or what prefill connects to */
    public String kvLink() {
        return kvLink;
    }

    /** Blocks until {@link #close()} finished. */
    public void awaitClose() throws InterruptedException {
        closedLatch.await();
    }

    /**
     * Stops gracefully, as {@code serve} does on SIGTERM or Ctrl-C, within {@code grace} in all, then {@link #close()}s.
     * A role that {@link Drains} (decode) first refuses new requests and reads not ready while it keeps listening, until
     * the requests it promised are done: a request it reserved is still with prefill, and its decode call, give-back or
     * abort comes later. Then the server takes no new connection, and lets the calls in flight (a decode stream runs
     * until its generation ends) and the role's transfers finish. Returns as soon as nothing is in flight.
     * Idempotent, as {@link #close()} is.
     */
    public void shutdown(java.time.Duration grace) {
        final long end = System.nanoTime() + grace.toNanos();
        if (role instanceof Drains d) {
            d.beginDrain();
            while ((d.pendingWork() > 0 || !http.awaitNoCalls(java.time.Duration.ZERO)) && System.nanoTime() - end < 0
                && pause()) {
                // the promised requests' calls still arrive
            }
        }
        http.stopAccepting();
        http.awaitNoCalls(java.time.Duration.ofNanos(Math.max(0, end - System.nanoTime())));
        while (activeTransfers.getAsInt() > 0 && System.nanoTime() - end < 0 && pause()) {
            // the role's transfers end
        }
        close();
    }

    /** Sleeps 5 ms. @return false if interrupted (the interrupt is kept) */
    private static boolean pause() {
        try {
            Thread.sleep(5);
            return true;
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            return false;
        }
    }

    /** Stops the endpoints, then closes the role (prefill aborts what is in flight; decode fails it and lets it drain). Idempotent. */
    @Override
    public void close() {
        synchronized (this) {
            if (closed) {
                return;
            }
            closed = true;
        }
        try {
            http.stopListening(java.time.Duration.ZERO);
            try {
                role.close();
            } catch (Exception e) {
                System.getLogger("io.kvpool.examples.server").log(System.Logger.Level.WARNING, "closing the role failed: " + e);
            }
            http.close();
            metrics.close();
        } finally {
            closedLatch.countDown();
        }
    }

    @Override
    public String toString() {
        return "RoleServer[" + role().flag() + " at " + baseUri() + ", KV " + kvLink + "]";
    }
}
