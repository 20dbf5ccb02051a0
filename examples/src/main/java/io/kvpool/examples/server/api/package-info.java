/**
 * What the router's front and the role processes' endpoints share of the HTTP API:
 * {@link io.kvpool.examples.server.api.ApiError} (the documented error shape, and how a role's refusal maps to a
 * status), {@link io.kvpool.examples.server.api.Auth} (bearer tokens), {@link io.kvpool.examples.server.api.Http}
 * (answering an {@link io.kvpool.examples.http.HttpCall} with JSON, and the front's limits) and
 * {@link io.kvpool.examples.server.api.Json} (the strict JSON reader).
 *
 * <p>Dependency rule: uses {@code role} (the refusals it maps), {@code config} and {@code http}; used by
 * {@code router}, {@code remote} and {@code server}.
 */
package io.kvpool.examples.server.api;
