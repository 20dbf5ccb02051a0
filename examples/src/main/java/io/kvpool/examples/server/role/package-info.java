/**
 * The two roles and what the router sees of them. The seam is {@link io.kvpool.examples.server.role.PrefillService}
 * and {@link io.kvpool.examples.server.role.DecodeService} (with {@link io.kvpool.examples.server.role.DecodeCall},
 * {@link io.kvpool.examples.server.role.Rejection}, {@link io.kvpool.examples.server.role.RoleStatus} and the
 * exceptions a role may throw), behind which a role runs in this JVM ({@link io.kvpool.examples.server.role.PrefillRole},
 * {@link io.kvpool.examples.server.role.DecodeRole}) or in another process ({@code remote}). The roles are assembled
 * by {@link io.kvpool.examples.server.role.InJvmRoles} (both here) and {@link io.kvpool.examples.server.role.SeparateRoles}
 * (one per process), from the pools and engines of {@link io.kvpool.examples.server.role.RoleParts}.
 *
 * <p>Dependency rule: uses {@code config}, {@code echo}, {@code link}, and {@code ui} for the pool view a status
 * carries; nothing of the router, the HTTP API or the remote plumbing.
 */
package io.kvpool.examples.server.role;
