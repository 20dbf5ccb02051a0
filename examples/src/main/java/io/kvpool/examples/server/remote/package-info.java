/**
 * The router ↔ role-process plumbing, both ends of it. The router's end:
 * {@link io.kvpool.examples.server.remote.RemoteRoles} (a {@link io.kvpool.examples.server.role.PrefillService} and
 * {@link io.kvpool.examples.server.role.DecodeService} over HTTP, with health probes and abort delivery) and
 * {@link io.kvpool.examples.server.remote.Preflight} (do the roles match the router?). The role's end:
 * {@link io.kvpool.examples.server.remote.RoleEndpoint} and its prefill and decode endpoints, which
 * {@link io.kvpool.examples.server.RoleServer} serves. The JSON between them is {@code RoleJson}.
 *
 * <p>Dependency rule: uses {@code metrics}, {@code api}, {@code role}, {@code config}, {@code echo}, {@code link},
 * {@code http} and {@code ui}; only {@code server} uses it.
 */
package io.kvpool.examples.server.remote;
