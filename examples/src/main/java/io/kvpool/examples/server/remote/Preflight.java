package io.kvpool.examples.server.remote;

import io.kvpool.examples.server.config.ServerConfig;
import io.kvpool.examples.server.role.RoleStatus;

import java.util.ArrayList;
import java.util.List;
import java.util.Objects;

/**
 * The deployment check: each role's identity and capacity ({@link RoleIdentity}) against what the router expects.
 * The router runs it at startup (refusing to start on a mismatch, naming each role's numbers; {@code --clamp-context}
 * lets it advertise the smallest role's largest safe context instead), its probes on every reconnect, and the
 * {@code preflight} subcommand against a running deployment.
 *
 * @param expected    what the router expects
 * @param advertised  the context the router advertises
 * @param prefill     the prefill role's status
 * @param decode      the decode role's status
 * @param mismatches  every difference; a role that does not answer, or reports no identity, is one too
 */
public record Preflight(RoleIdentity expected, long advertised, RemoteStatus prefill, RemoteStatus decode, List<RoleIdentity.Mismatch> mismatches) {

    /** Reads nothing: checks the two statuses given. */
    public static Preflight check(ServerConfig cfg, RemoteStatus prefill, RemoteStatus decode) {
        final RoleIdentity expected = RoleIdentity.expected(cfg);
        final List<RoleIdentity.Mismatch> m = new ArrayList<>();
        for (RemoteStatus s : List.of(prefill, decode)) {
            m.addAll(mismatches(s, expected, cfg.contextTokens(), cfg.strictBuild()));
        }
        final RoleIdentity p = prefill.identity(), d = decode.identity();
        final boolean endpointsDiffer = p != null && d != null && !RoleIdentity.sameKvEndpoint(p.kv(), d.kv());
        if (m.isEmpty()) { // any other mismatch explains a link that is down (a refused HELLO, a role that is not up)
            for (RemoteStatus s : List.of(prefill, decode)) {
                if (!s.ready()) {
                    m.add(new RoleIdentity.Mismatch(s.status().role(), KV_LINK, "up", s.status().draining()
                        ? "draining (the process is stopping)" : "down (the roles are not linked: another "
                        + "--work-dir, --kv-address or --transport, or not linked yet)"));
                }
            }
        }
        if (endpointsDiffer) { // these two can never be linked to each other, though each may be linked elsewhere
            m.add(new RoleIdentity.Mismatch(p.role(), KV_ENDPOINT, d.kv() + " (where decode listens)", p.kv()));
        } else if (m.isEmpty()) {
            final RoleIdentity.Mismatch notLinked = notLinkedTo(prefill, decode);
            if (notLinked != null) {
                m.add(notLinked);
            }
        }
        return new Preflight(expected, cfg.contextTokens(), prefill, decode, List.copyOf(m));
    }

    /**
     * Roles each linked, and ready, on shared-memory endpoints that differ: each is linked to a role of another
     * deployment, and a router over them would time every request out. The router refuses them at start and answers
     * them 503 when they come, or come back, so. UCX endpoints that differ are not: two addresses may still meet (NAT,
     * another address of the host).
     *
     * @return the prefill's KV endpoint mismatch, or {@code null}; {@code null} while either status is unknown
     */
    static RoleIdentity.Mismatch linkedElsewhere(RemoteStatus prefill, RemoteStatus decode) {
        if (!bothReady(prefill, decode)) {
            return null;
        }
        final RoleIdentity p = prefill.identity(), d = decode.identity();
        if (p == null || d == null || RoleIdentity.sameKvEndpoint(p.kv(), d.kv()) || p.kv().startsWith("ucx:")) {
            return null;
        }
        return new RoleIdentity.Mismatch(p.role(), KV_ENDPOINT, d.kv() + " (where decode listens)", p.kv());
    }

    /**
     * Roles each ready, but decode holds no KV link from this prefill's engine: its links come from other prefill
     * processes (of another router, or a process that replaced this one and is not linked yet). A request would be
     * refused at decode (503); the router answers it so at once, naming both. Known only when both roles report their
     * instance ids (a build before them reports none: then {@code null}).
     *
     * @return decode's mismatch, or {@code null}; {@code null} while either status is unknown, not up or not ready
     */
    static RoleIdentity.Mismatch notLinkedTo(RemoteStatus prefill, RemoteStatus decode) {
        if (!bothReady(prefill, decode)) {
            return null;
        }
        final long instance = prefill.status().instance();
        final List<Long> linked = decode.status().linked();
        if (instance == 0 || linked == null || linked.contains(instance)) {
            return null;
        }
        return new RoleIdentity.Mismatch(decode.status().role(), KV_PEER, "a link from prefill instance "
            + RoleStatus.hex(instance), "links from " + RoleStatus.hex(linked));
    }

    /** @return whether both statuses are known and say their role is ready (its KV link up) */
    private static boolean bothReady(RemoteStatus prefill, RemoteStatus decode) {
        return prefill != null && decode != null && prefill.ready() && decode.ready();
    }

    /** The mismatch of roles that match but have no KV link between them (checked only when nothing else differs). */
    static final String KV_LINK = "KV link";

    /** The mismatch of a prefill whose KV endpoint is not where decode listens: they cannot be linked to each other. */
    static final String KV_ENDPOINT = "KV endpoint";

    /** The mismatch of a decode whose prefill links all come from other prefill processes than the router's. */
    static final String KV_PEER = "engine instance";

    /**
     * @return whether the roles match in everything but a KV link that is not up, which may come up yet (preflight waits
     *         for it); never when their KV endpoints differ, which no wait mends
     */
    public boolean onlyUnlinked() {
        return !mismatches.isEmpty() && mismatches.stream().allMatch(x -> x.what().equals(KV_LINK) || x.what().equals(KV_PEER));
    }

    /**
     * @param strictBuild whether another build is a mismatch ({@code --strict-build})
     * @return how one role's status differs from what the router expects (a role down is one mismatch)
     */
    static List<RoleIdentity.Mismatch> mismatches(RemoteStatus s, RoleIdentity expected, long advertised, boolean strictBuild) {
        final String role = s.status().role();
        if (s.wrongUrl() != null) { // a miswired URL: no wait makes it the role asked for
            return List.of(new RoleIdentity.Mismatch(role, "role", role, s.wrongUrl() + " answers at its URL ("
                + s.status().down() + ")"));
        }
        if (!s.status().up()) {
            return List.of(new RoleIdentity.Mismatch(role, "reachable", "up", "down: " + s.status().down()));
        }
        if (s.identity() == null) {
            return List.of(new RoleIdentity.Mismatch(role, "identity", "reported", "not reported (another build?)"));
        }
        return s.identity().against(expected, advertised, strictBuild);
    }

    /** @return whether every role answered and matches */
    public boolean ok() {
        return mismatches.isEmpty();
    }


    /** @return the smallest largest-safe-context of the roles that reported one, or the advertised context */
    long smallestSafeContext() {
        long min = advertised;
        for (RemoteStatus s : List.of(prefill, decode)) {
            if (s.identity() != null) {
                min = Math.min(min, s.identity().maxSafeContext());
            }
        }
        return min;
    }

    /**
     * @return the table: each property for the router and each role, {@code ✗} on what does not match and {@code ≠} on a
     *         build that differs but is served, then a note per such build and the mismatches
     */
    public String table() {
        final StringBuilder b = new StringBuilder();
        final String fmt = "  %-22s %-34s %-34s %-34s%n";
        b.append(String.format(fmt, "", "router (expects)", "prefill", "decode"));
        final RoleIdentity p = prefill.identity(), d = decode.identity();
        row(b, fmt, "build", expected.build(), p == null ? null : p.build(), d == null ? null : d.build(), "build");
        row(b, fmt, "environment", expected.environment(), p == null ? null : p.environment(), d == null ? null : d.environment(), "environment");
        row(b, fmt, "model", expected.model(), p == null ? null : p.model(), d == null ? null : d.model(), "model");
        row(b, fmt, "layout", expected.layout(), p == null ? null : p.layout(), d == null ? null : d.layout(), "layout");
        // a pool too small shows as the context it can carry: the one mismatch marks both rows
        row(b, fmt, "pool pages", "-", p == null ? null : Long.toString(p.poolPages()), d == null ? null : Long.toString(d.poolPages()),
            "largest safe context");
        row(b, fmt, "largest safe context", advertised + " (advertised)", p == null ? null : Long.toString(p.maxSafeContext()),
            d == null ? null : Long.toString(d.maxSafeContext()), "largest safe context");
        row(b, fmt, KV_ENDPOINT, "-", p == null ? null : p.kv(), d == null ? null : d.kv(), KV_ENDPOINT);
        row(b, fmt, KV_LINK, "up", link(prefill), link(decode), KV_LINK);
        row(b, fmt, KV_PEER, "-", prefill.status().up() ? instance(prefill.status().instance()) : null, linked(decode), KV_PEER);
        row(b, fmt, "max connections", expected.maxConnections() + " (clients)", connections(p), connections(d), "max connections");
        final long allowed = Math.min(RemoteRole.requestsAllowed(p == null ? 0 : p.maxConnections()),
            RemoteRole.requestsAllowed(d == null ? 0 : d.maxConnections()));
        if (allowed < expected.maxConnections()) {
            b.append("  note: the router takes at most ").append(Math.max(1, allowed))
                .append(" requests in flight (the smaller role's --max-connections less ").append(RemoteRole.SPARE_CONNECTIONS)
                .append(") and answers more 503 roles_busy; raise the roles' --max-connections to serve up to ")
                .append(expected.maxConnections()).append('\n');
        }
        for (RoleIdentity r : new RoleIdentity[] {p, d}) {
            if (r != null && !r.build().equals(expected.build()) && !bad(r.role(), "build")) {
                b.append("  note: ").append(r.role()).append(" runs another build (").append(r.build()).append(", the router ")
                    .append(expected.build()).append("): served, as in a rolling upgrade; --strict-build refuses it\n");
            }
        }
        if (mismatches.isEmpty()) {
            b.append("  every role matches\n");
        }
        for (RoleIdentity.Mismatch m : mismatches) {
            b.append("  MISMATCH ").append(m).append('\n');
        }
        return b.toString();
    }

    private static String connections(RoleIdentity r) {
        return r == null ? null : r.maxConnections() <= 0 ? "not reported" : Long.toString(r.maxConnections());
    }

    private static String instance(long id) {
        return id == 0 ? "not reported" : RoleStatus.hex(id);
    }

    /** @return decode's cell of the instance row: the prefill engines it is linked from */
    private static String linked(RemoteStatus s) {
        if (!s.status().up()) {
            return null;
        }
        final List<Long> l = s.status().linked();
        return l == null ? "not reported" : "from " + RoleStatus.hex(l);
    }

    private static String link(RemoteStatus s) {
        return !s.status().up() ? null : s.ready() ? "up" : s.status().draining() ? "draining" : "down";
    }

    private void row(StringBuilder b, String fmt, String name, String router, String p, String d, String what) {
        b.append(String.format(fmt, name, router, cell(p, "prefill", what), cell(d, "decode", what)));
    }

    private String cell(String value, String role, String what) {
        if (value == null) {
            return "?";
        }
        if (bad(role, what)) {
            return value + "  ✗";
        }
        return what.equals("build") && !value.equals(expected.build()) ? value + "  ≠" : value;
    }

    private boolean bad(String role, String what) {
        return mismatches.stream().anyMatch(m -> m.role().equals(role) && m.what().equals(what));
    }

    public Preflight {
        Objects.requireNonNull(expected, "expected");
        Objects.requireNonNull(prefill, "prefill");
        Objects.requireNonNull(decode, "decode");
        mismatches = List.copyOf(mismatches);
    }
}
