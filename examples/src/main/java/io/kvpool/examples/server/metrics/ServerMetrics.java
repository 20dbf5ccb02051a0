package io.kvpool.examples.server.metrics;

import io.kvpool.examples.server.config.ServerConfig;
import io.kvpool.examples.server.role.DecodeRole;
import io.kvpool.examples.server.role.MeteredRole;
import io.kvpool.examples.server.role.PrefillRole;
import io.kvpool.examples.server.role.RoleStatus;
import io.kvpool.examples.server.role.Roles;
import io.kvpool.examples.server.router.Router;
import io.kvpool.examples.server.router.RouterCounters;
import io.micrometer.core.instrument.FunctionCounter;
import io.micrometer.core.instrument.Gauge;
import io.micrometer.core.instrument.Meter;
import io.micrometer.core.instrument.Tags;
import io.micrometer.core.instrument.binder.jvm.ClassLoaderMetrics;
import io.micrometer.core.instrument.binder.jvm.JvmGcMetrics;
import io.micrometer.core.instrument.binder.jvm.JvmMemoryMetrics;
import io.micrometer.core.instrument.binder.jvm.JvmThreadMetrics;
import io.micrometer.core.instrument.binder.system.FileDescriptorMetrics;
import io.micrometer.core.instrument.binder.system.ProcessorMetrics;
import io.micrometer.core.instrument.binder.system.UptimeMetrics;
import io.micrometer.prometheusmetrics.PrometheusConfig;
import io.micrometer.prometheusmetrics.PrometheusMeterRegistry;

import java.util.ArrayList;
import java.util.HashSet;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.function.Supplier;

/**
 * The example server's meters and its {@code GET /metrics}: one Micrometer {@link PrometheusMeterRegistry} per
 * process, which writes the Prometheus text (nothing here writes exposition format). What is in it
 * (docs/example-server.md, "Metrics", has the table):
 * <ul>
 *   <li>JVM and process metrics: {@link JvmMemoryMetrics}, {@link JvmGcMetrics}, {@link JvmThreadMetrics},
 *       {@link ClassLoaderMetrics}, {@link ProcessorMetrics}, {@link UptimeMetrics}, {@link FileDescriptorMetrics};</li>
 *   <li>the router's counters ({@link RouterCounters}: {@code kvpool_requests_*}, {@code kvpool_http_errors_total});</li>
 *   <li>each role in this JVM ({@link MeteredRole}): its pool and transfer engine through the library's binders
 *       ({@code kvpool_pool_*}, {@code kvpool_transfer_*}, {@code kvpool_peer_*}), tag {@code role};</li>
 *   <li>each role in another process (the router of {@code --role router}): the same {@code kvpool_pool_*} names,
 *       read from the status the router already fetches ({@code /internal/status}), tag {@code role}; that
 *       process's engine meters are on its own {@code /metrics};</li>
 *   <li>every role: {@code kvpool_role_up}, {@code kvpool_role_events_total{event,role}} (its {@link RoleStatus#counters()})
 *       and its gauges ({@code kvpool_role_active_transfers}, {@code kvpool_role_link_up},
 *       {@code kvpool_role_held_sequences}), from its status;</li>
 *   <li>{@code kvpool_unsafe_switch{name}} 1 for each safeguard switched off.</li>
 * </ul>
 * A role process ({@link #forRole}) has its JVM, its own role and the switches, every meter tagged with its role.
 *
 * <p>The status-fed meters read the statuses of the last {@link #scrape()} (or {@link #liveCounters}): each scrape
 * asks each role for its status once, registers the events and gauges it names for the first time, then renders.
 * Thread-safe.
 */
public final class ServerMetrics implements AutoCloseable {

    /** The content type of {@link #scrape()}: the Prometheus text format 0.0.4. */
    public static final String CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8";

    /** The router's meters {@link #liveCounters} reports, in that order. */
    private static final List<String> ROUTER_METERS = List.of("kvpool.requests", "kvpool.requests.completed",
        "kvpool.requests.aborted", "kvpool.requests.timed.out", RouterCounters.REJECTED, RouterCounters.FAILED,
        "kvpool.requests.in.flight", RouterCounters.ERRORS);

    private static final Map<String, String> GAUGES = Map.of(
        RoleStatus.ACTIVE_TRANSFERS, "Transfers the role's engine has not finished (decode: committed sequences decoding are held_sequences)",
        RoleStatus.LINK_UP, "1 while the role's KV link to the other role is up",
        RoleStatus.HELD_SEQUENCES, "Committed sequences the decode role holds while it decodes them",
        RoleStatus.PAGES_IN_FLIGHT, "Pages the prefill role is writing to decode now (posted, not yet terminal)",
        RoleStatus.DRAINING, "1 while the decode role is stopping: it finishes what it promised and takes no new request");

    private final PrometheusMeterRegistry registry;
    private final List<Feed> feeds = new ArrayList<>();
    private final List<AutoCloseable> closeables = new ArrayList<>();
    private boolean closed;

    private ServerMetrics(PrometheusMeterRegistry registry, ServerConfig config) {
        this.registry = registry;
        final JvmGcMetrics gc = new JvmGcMetrics();
        closeables.add(gc);
        for (var binder : List.of(new JvmMemoryMetrics(), gc, new JvmThreadMetrics(), new ClassLoaderMetrics(), new ProcessorMetrics(),
            new UptimeMetrics(), new FileDescriptorMetrics())) {
            binder.bindTo(registry);
        }
        for (String flag : config.unsafeSwitches()) {
            Gauge.builder("kvpool.unsafe.switch", () -> 1).tag("name", flag.substring(2))
                .description("Safeguards switched OFF (incident replay only): 1 each; such a server can mix tenants' data")
                .register(registry);
        }
    }

    /** @return a registry of the kind {@code /metrics} serves */
    static PrometheusMeterRegistry newRegistry() {
        return new PrometheusMeterRegistry(PrometheusConfig.DEFAULT);
    }

    /**
     * The meters of the HTTP front ({@link io.kvpool.examples.server.KvServer}): the router's registry ({@link RouterCounters#registry()}), with
     * the JVM's meters and both roles' added: bound live for a role in this JVM, fed by its status for one elsewhere.
     *
     * @throws IllegalArgumentException if the router's counters are not in a Prometheus registry
     */
    public static ServerMetrics forServer(ServerConfig config, Router router, Roles roles) {
        if (!(router.counters().registry() instanceof PrometheusMeterRegistry r)) {
            throw new IllegalArgumentException("the router's counters are not in a Prometheus registry: " + router.counters().registry());
        }
        final ServerMetrics m = new ServerMetrics(r, config);
        try {
            m.role(PrefillRole.ROLE, roles.prefill(), roles.prefill()::status);
            m.role(DecodeRole.ROLE, roles.decode(), roles.decode()::status);
        } catch (RuntimeException | Error e) {
            closeAfter(m, e); // its GC listener is the JVM's: nothing else would stop it
            throw e;
        }
        return m;
    }

    /** The meters of a role process ({@link io.kvpool.examples.server.RoleServer}): its JVM and its role, every meter tagged {@code role=…}. */
    public static ServerMetrics forRole(ServerConfig config, MeteredRole role) {
        final PrometheusMeterRegistry r = newRegistry();
        r.config().commonTags("role", role.roleName());
        final ServerMetrics m = new ServerMetrics(r, config);
        try {
            m.role(role.roleName(), role, role::status);
        } catch (RuntimeException | Error e) {
            closeAfter(m, e);
            throw e;
        }
        return m;
    }

    /** Closes {@code m} after {@code failure}, which stays the cause: a failure of the close is suppressed in it. */
    private static void closeAfter(ServerMetrics m, Throwable failure) {
        try {
            m.close();
        } catch (RuntimeException | Error e) {
            failure.addSuppressed(e);
        }
    }

    private void role(String name, Object service, Supplier<RoleStatus> status) {
        final Tags tags = Tags.of("role", name);
        final boolean local = service instanceof MeteredRole;
        if (service instanceof MeteredRole l) {
            l.bindMeters(registry, tags);
        }
        final Feed f = new Feed(name, status, tags);
        feeds.add(f);
        Gauge.builder("kvpool.role.up", f, x -> x.last.up() ? 1 : 0)
            .description("1 if the role's status could be read (0: a role process the router cannot reach; its pool then reads 0)")
            .tags(tags).register(registry);
        if (!local) {
            poolFromStatus(f);
        }
    }

    /**
     * Reads every role's status once, then renders the registry.
     *
     * @return {@code /metrics}: the Prometheus text format 0.0.4 ({@link #CONTENT_TYPE})
     */
    public synchronized String scrape() {
        refresh();
        return registry.scrape();
    }

    /**
     * What the live page shows as the server's counters ({@code /api/state}), named after the Prometheus names:
     * {@code kvpool_X_total} (or gauge {@code kvpool_X}), summed over its tags, is {@code X}; a role's
     * {@code kvpool_role_events_total{event="E",role="R"}} is {@code R_E}. For example {@code requests_completed},
     * {@code requests_rejected}, {@code requests_in_flight}, {@code decode_transfers_committed}.
     *
     * @param statuses the roles' statuses, as the live page shows them (they also feed the meters)
     * @return the counters in display order: the router's, then each role's
     */
    public synchronized Map<String, Long> liveCounters(List<RoleStatus> statuses) {
        for (RoleStatus s : statuses) {
            for (Feed f : feeds) {
                if (f.role.equals(s.role())) {
                    f.update(s);
                }
            }
        }
        final Map<String, Long> m = new LinkedHashMap<>();
        for (String name : ROUTER_METERS) {
            double sum = 0;
            for (Meter meter : registry.find(name).meters()) {
                for (var measure : meter.measure()) {
                    sum += measure.getValue();
                }
            }
            m.put(liveName(name), (long) sum);
        }
        for (RoleStatus s : statuses) {
            s.counters().forEach((event, v) -> m.put(s.role() + "_" + event, v));
        }
        return m;
    }

    /** @return {@code kvpool.requests.timed.out} → {@code requests_timed_out}: the Prometheus name less {@code kvpool_} and {@code _total} */
    static String liveName(String meter) {
        return meter.substring("kvpool.".length()).replace('.', '_');
    }

    private void refresh() {
        for (Feed f : feeds) {
            f.update(f.status.get());
        }
    }

    /** A role's last status, and the status-fed meters registered for it. */
    private final class Feed {
        final String role;
        final Supplier<RoleStatus> status;
        final Tags tags;
        final Set<String> events = new HashSet<>();
        final Set<String> gauges = new HashSet<>();
        /** The last status, read or not: the gauges (all 0 while the role cannot be reached). */
        volatile RoleStatus last;
        /**
         * The last status read from the role: the counters. They keep their values while the role cannot be reached,
         * since a counter that dropped to 0 and came back would read as a reset, counting its whole total again.
         */
        volatile RoleStatus lastRead;

        Feed(String role, Supplier<RoleStatus> status, Tags tags) {
            this.role = role;
            this.status = status;
            this.tags = tags;
            this.last = RoleStatus.unreachable(role, "not read yet");
            this.lastRead = last;
        }

        void update(RoleStatus s) {
            last = s;
            if (s.up()) {
                lastRead = s;
            }
            for (String event : s.counters().keySet()) {
                if (events.add(event)) {
                    FunctionCounter.builder("kvpool.role.events", this, f -> f.lastRead.counters().getOrDefault(event, 0L))
                        .description("What each role did, by event (its own counters: admitted, transfers_committed, "
                            + "generated_tokens ...)").tags(tags).tag("event", event).register(registry);
                }
            }
            for (String gauge : s.gauges().keySet()) {
                if (gauges.add(gauge)) {
                    Gauge.builder("kvpool.role." + gauge.replace('_', '.'), this, f -> f.last.gauges().getOrDefault(gauge, 0L))
                        .description(GAUGES.getOrDefault(gauge, "The role's gauge " + gauge)).tags(tags).register(registry);
                }
            }
        }

        /** @return a pool gauge of the last status (0 while the role cannot be reached) */
        long pool(String field) {
            return last.pool().counters().getOrDefault(field, 0L);
        }

        /** @return a pool counter of the last status read from the role */
        long poolCount(String field) {
            return lastRead.pool().counters().getOrDefault(field, 0L);
        }
    }

    /**
     * A role elsewhere: its pool's meters under the names {@link io.kvpool.micrometer.KvPoolMeterBinder} gives a pool
     * in this JVM, read from the pool counters of its last status: the gauges read 0 while it cannot be reached, the
     * counters keep their last values read.
     */
    private void poolFromStatus(Feed f) {
        for (String state : new String[] {"free", "owned", "receiving", "draining", "quarantined", "retired"}) {
            poolGauge(f, state, "kvpool.pool.pages", "pages", "Pages by state; the states add up to the capacity at a quiescent point")
                .tag("state", state).register(registry);
        }
        poolGauge(f, "capacity", "kvpool.pool.capacity", "pages", "Pages the pool was built with").register(registry);
        poolGauge(f, "reserved", "kvpool.pool.reserved", "pages", "Pages reserved for admitted requests and not yet allocated")
            .register(registry);
        poolGauge(f, "cached_free", "kvpool.pool.cached.free", "pages", "FREE pages that still hold a published prefix (counted in state=free too)")
            .register(registry);
        poolGauge(f, "published_prefixes", "kvpool.pool.prefix.indexed", "pages", "Pages in the prefix index, free or not")
            .register(registry);
        poolGauge(f, "open_sequences", "kvpool.pool.sequences.open", null, "Sequences not yet closed").register(registry);
        poolGauge(f, "open_reservations", "kvpool.pool.reservations.open", null, "Reservations from tryReserve not yet opened or cancelled")
            .register(registry);
        poolCounter(f, "allocations", "kvpool.pool.allocations", "Times a page left FREE").register(registry);
        poolCounter(f, "prefix_hits", "kvpool.pool.prefix.hits", "Pages attached from the prefix cache").register(registry);
        poolCounter(f, "evictions", "kvpool.pool.evictions", "Cached free pages evicted to satisfy an allocation").register(registry);
        final String rejected = "Admissions the pool refused, by reason (retry_later: it fits the pool, but not now)";
        for (String[] r : new String[][] {{"rejected_context_too_long", "context_too_long"}, {"rejected_exceeds_pool", "exceeds_pool"},
            {"retry_later", "retry_later"}}) {
            poolCounter(f, r[0], "kvpool.pool.admissions.rejected", rejected).tag("reason", r[1]).register(registry);
        }
        final String refused = "Operations refused for their page handle, by reason (stale: an older generation or invalid; "
            + "foreign: another pool's)";
        poolCounter(f, "stale_handles_refused", "kvpool.pool.handles.refused", refused).tag("reason", "stale").register(registry);
        poolCounter(f, "foreign_handles_refused", "kvpool.pool.handles.refused", refused).tag("reason", "foreign").register(registry);
        poolCounter(f, "quarantine_events", "kvpool.pool.quarantine.events", "Pages that entered QUARANTINED").register(registry);
    }

    private static Gauge.Builder<Feed> poolGauge(Feed f, String field, String name, String unit, String description) {
        return Gauge.builder(name, f, x -> x.pool(field)).description(description).baseUnit(unit).tags(f.tags);
    }

    private static FunctionCounter.Builder<Feed> poolCounter(Feed f, String field, String name, String description) {
        return FunctionCounter.builder(name, f, x -> x.poolCount(field)).description(description).tags(f.tags);
    }

    /**
     * Adds the HTTP front's meters: connections open, connections closed on arrival over the cap, requests the
     * front refused itself (431, 414, 413, 408, 400, 505), calls with a handler.
     */
    public void bindHttp(io.kvpool.examples.http.HttpFront front) {
        Gauge.builder("kvpool.http.connections.open", front, io.kvpool.examples.http.HttpFront::openConnections)
            .description("HTTP connections open now").register(registry);
        Gauge.builder("kvpool.http.calls.in.flight", front, io.kvpool.examples.http.HttpFront::callsInFlight)
            .description("HTTP requests with a handler now").register(registry);
        FunctionCounter.builder("kvpool.http.connections.refused", front, io.kvpool.examples.http.HttpFront::refusedConnections)
            .description("HTTP connections closed on arrival because --max-connections were open").register(registry);
        FunctionCounter.builder("kvpool.http.requests.refused", front, io.kvpool.examples.http.HttpFront::refusedRequests)
            .description("HTTP requests the front answered with an error before any handler: over a limit (431, 414, 413), "
                + "too slow (408) or malformed (400, 505)").register(registry);
        for (String reason : front.closedConnections().keySet()) {
            FunctionCounter.builder("kvpool.http.connections.closed", front, f -> f.closedConnections().get(reason))
                .tag("reason", reason)
                .description("HTTP connections closed, by who and why: client (the client's own close), requested "
                    + "(Connection: close), idle, refused (after the front's own error), cut (an answer cut short), pipeline, "
                    + "failed, stopping").register(registry);
        }
    }

    /** Stops the GC listener and closes the registry. Idempotent. */
    @Override
    public synchronized void close() {
        if (closed) {
            return;
        }
        closed = true;
        for (AutoCloseable c : closeables) {
            try {
                c.close();
            } catch (Exception e) {
                System.getLogger("io.kvpool.examples.server").log(System.Logger.Level.DEBUG, "closing " + c + " failed: " + e);
            }
        }
        registry.close();
    }

    @Override
    public String toString() {
        return "ServerMetrics[" + registry.getMeters().size() + " meters, roles " + feeds.stream().map(f -> f.role).toList() + "]";
    }
}
