package io.kvpool.examples.ui;

import java.util.Collections;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Objects;

/**
 * Everything the live page shows at one moment: each pool's view and the server's counters by name, in one
 * style: snake_case, the Prometheus name less {@code kvpool_} and {@code _total} ({@code requests_completed},
 * {@code requests_rejected}, a role's events prefixed by the role: {@code decode_transfers_committed}).
 *
 * @param pools    one view per pool, in display order
 * @param counters server-wide counters by name, in display order
 */
public record LiveState(List<PoolView> pools, Map<String, Long> counters) {
    public LiveState {
        pools = List.copyOf(pools);
        counters = orderedCopy(counters, "server");
    }

    /** An unmodifiable copy that keeps the iteration order and refuses null names and values. */
    static Map<String, Long> orderedCopy(Map<String, Long> counters, String owner) {
        Objects.requireNonNull(counters, "counters");
        final Map<String, Long> copy = new LinkedHashMap<>(counters.size() * 2);
        counters.forEach((name, value) -> {
            if (name == null || value == null) {
                throw new NullPointerException(owner + " counter " + name + " = " + value + ": names and values must not be null");
            }
            copy.put(name, value);
        });
        return Collections.unmodifiableMap(copy);
    }
}
