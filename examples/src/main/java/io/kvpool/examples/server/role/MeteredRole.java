package io.kvpool.examples.server.role;

import io.micrometer.core.instrument.MeterRegistry;
import io.micrometer.core.instrument.Tags;

/**
 * A role whose pool and transfer engine live in this JVM ({@link PrefillRole}, {@link DecodeRole}): it binds
 * them to a registry with the library's binders ({@link io.kvpool.micrometer.KvPoolMeterBinder} and the
 * engine's), so that {@code /metrics} reads them live. A role in another process has none of this: the router
 * reads its numbers from its status ({@link io.kvpool.examples.server.metrics.ServerMetrics}).
 */
public interface MeteredRole {

    /** @return "prefill" or "decode" */
    String roleName();

    /** @return the role's status now (its counters and gauges feed {@code kvpool_role_*}) */
    RoleStatus status();

    /**
     * Binds the role's pool and transfer engine.
     *
     * @param registry the registry
     * @param tags     tags that tell this role's meters from the other's ({@code role=…})
     */
    void bindMeters(MeterRegistry registry, Tags tags);
}
