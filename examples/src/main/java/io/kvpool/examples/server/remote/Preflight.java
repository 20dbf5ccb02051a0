package io.kvpool.examples.server.remote;

import io.kvpool.examples.server.config.ServerConfig;

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
            m.addAll(mismatches(s, expected, cfg.contextTokens()));
        }
        return new Preflight(expected, cfg.contextTokens(), prefill, decode, List.copyOf(m));
    }

    /** @return how one role's status differs from what the router expects (a role down is one mismatch) */
    static List<RoleIdentity.Mismatch> mismatches(RemoteStatus s, RoleIdentity expected, long advertised) {
        final String role = s.status().role();
        if (!s.status().up()) {
            return List.of(new RoleIdentity.Mismatch(role, "reachable", "up", "down: " + s.status().down()));
        }
        if (s.identity() == null) {
            return List.of(new RoleIdentity.Mismatch(role, "identity", "reported", "not reported (another build?)"));
        }
        return s.identity().against(expected, advertised);
    }

    /** @return whether every role answered and matches */
    public boolean ok() {
        return mismatches.isEmpty();
    }

    /** @return whether every role answered (a role down is checked when it comes back) */
    boolean reachable() {
        return prefill.status().up() && decode.status().up();
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

    /** @return the table: each property for the router and each role, a mark on what does not match, then the mismatches */
    public String table() {
        final StringBuilder b = new StringBuilder();
        final String fmt = "  %-22s %-34s %-34s %-34s%n";
        b.append(String.format(fmt, "", "router (expects)", "prefill", "decode"));
        final RoleIdentity p = prefill.identity(), d = decode.identity();
        row(b, fmt, "build", expected.build(), p == null ? null : p.build(), d == null ? null : d.build(), "build");
        row(b, fmt, "environment", expected.environment(), p == null ? null : p.environment(), d == null ? null : d.environment(), "environment");
        row(b, fmt, "model", expected.model(), p == null ? null : p.model(), d == null ? null : d.model(), "model");
        row(b, fmt, "layout", expected.layout(), p == null ? null : p.layout(), d == null ? null : d.layout(), "layout");
        row(b, fmt, "pool pages", "-", p == null ? null : Long.toString(p.poolPages()), d == null ? null : Long.toString(d.poolPages()), "pool");
        row(b, fmt, "largest safe context", advertised + " (advertised)", p == null ? null : Long.toString(p.maxSafeContext()),
            d == null ? null : Long.toString(d.maxSafeContext()), "largest safe context");
        if (mismatches.isEmpty()) {
            b.append("  every role matches\n");
        }
        for (RoleIdentity.Mismatch m : mismatches) {
            b.append("  MISMATCH ").append(m).append('\n');
        }
        return b.toString();
    }

    private void row(StringBuilder b, String fmt, String name, String router, String p, String d, String what) {
        b.append(String.format(fmt, name, router, cell(p, "prefill", what), cell(d, "decode", what)));
    }

    private String cell(String value, String role, String what) {
        if (value == null) {
            return "?";
        }
        final boolean bad = mismatches.stream().anyMatch(m -> m.role().equals(role) && m.what().equals(what));
        return bad ? value + "  ✗" : value;
    }

    public Preflight {
        Objects.requireNonNull(expected, "expected");
        Objects.requireNonNull(prefill, "prefill");
        Objects.requireNonNull(decode, "decode");
        mismatches = List.copyOf(mismatches);
    }
}
