package io.kvpool.examples.server;

import io.kvpool.examples.ui.PoolView;

import java.util.LinkedHashMap;
import java.util.Map;
import java.util.Objects;

/**
 * What a role reports about itself for {@code /metrics} and the live page. A role in this JVM builds it
 * from its pool and engine; a role in another process sends the same fields as JSON
 * ({@link RoleJson}), and a router that cannot reach it reports it {@linkplain #unreachable unreachable}.
 *
 * @param role       "prefill" or "decode"
 * @param pool       its pool's page map and counters (an empty map of 0 pages when unreachable)
 * @param counters   the role's own counters by name (transfers, aborts ...)
 * @param prometheus the role's metrics in the Prometheus text format, labelled with its role
 * @param down       why the router could not read the role's status, or {@code null} when it did
 */
public record RoleStatus(String role, PoolView pool, Map<String, Long> counters, String prometheus, String down) {
    public RoleStatus {
        Objects.requireNonNull(role, "role");
        Objects.requireNonNull(pool, "pool");
        counters = java.util.Collections.unmodifiableMap(new LinkedHashMap<>(counters));
        Objects.requireNonNull(prometheus, "prometheus");
    }

    /** A status read from a role that is up. */
    public RoleStatus(String role, PoolView pool, Map<String, Long> counters, String prometheus) {
        this(role, pool, counters, prometheus, null);
    }

    /** @return the status of a role the router cannot reach: no pages, no counters, and why */
    public static RoleStatus unreachable(String role, String why) {
        return new RoleStatus(role, new PoolView(role, 0, "", Map.of()), Map.of(), "", Objects.requireNonNull(why, "why"));
    }

    /** @return whether the status was read from the role ({@link #down()} is {@code null}) */
    public boolean up() {
        return down == null;
    }
}
