package io.kvpool.examples.ui;

import java.util.List;
import java.util.Map;

/**
 * Everything the live page shows at one moment: each pool's view and the server's counters
 * (requests, completed, rejected, aborted, transfers ... by name).
 *
 * @param pools    one view per pool, in display order
 * @param counters server-wide counters by name, in display order
 */
public record LiveState(List<PoolView> pools, Map<String, Long> counters) {
    public LiveState {
        pools = List.copyOf(pools);
        counters = java.util.Collections.unmodifiableMap(new java.util.LinkedHashMap<>(counters));
    }
}
