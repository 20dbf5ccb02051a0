package io.kvpool.examples.server;

import io.kvpool.examples.ui.PoolView;

import java.util.LinkedHashMap;
import java.util.Map;
import java.util.Objects;

/**
 * What a role reports about itself for {@code /metrics} and the live page. A role in this JVM builds it
 * from its pool and engine; a role in another process would send the same fields.
 *
 * @param role       "prefill" or "decode"
 * @param pool       its pool's page map and counters
 * @param counters   the role's own counters by name (transfers, aborts ...)
 * @param prometheus the role's metrics in the Prometheus text format, labelled with its role
 */
public record RoleStatus(String role, PoolView pool, Map<String, Long> counters, String prometheus) {
    public RoleStatus {
        Objects.requireNonNull(role, "role");
        Objects.requireNonNull(pool, "pool");
        counters = java.util.Collections.unmodifiableMap(new LinkedHashMap<>(counters));
        Objects.requireNonNull(prometheus, "prometheus");
    }
}
