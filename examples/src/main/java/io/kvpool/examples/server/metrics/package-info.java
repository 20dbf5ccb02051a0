/**
 * {@code /metrics}: {@link io.kvpool.examples.server.metrics.ServerMetrics} completes the router's registry with the
 * JVM's meters and both roles' (bound live for a role in this JVM, fed by its status for one elsewhere), or builds a
 * role process's own; either adds the HTTP front's connections and refusals.
 *
 * <p>Dependency rule: uses {@code router} (its counters), {@code role}, {@code config} and the HTTP front
 * ({@code io.kvpool.examples.http}); used by {@code remote}
 * (a role process's endpoint) and {@code server}.
 */
package io.kvpool.examples.server.metrics;
