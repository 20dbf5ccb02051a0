/**
 * The router: {@link io.kvpool.examples.server.router.Router} runs one completion over a
 * {@link io.kvpool.examples.server.role.PrefillService} and a {@link io.kvpool.examples.server.role.DecodeService},
 * wherever they run; {@link io.kvpool.examples.server.router.CompletionsHandler} is {@code POST /v1/completions} on it
 * (streaming or not), and {@link io.kvpool.examples.server.router.RouterCounters} counts what it answered.
 *
 * <p>Dependency rule: uses {@code api}, {@code role} (the services only, never how a role runs), {@code config},
 * {@code echo} and {@code http}; knows nothing of {@code remote} or {@code metrics}.
 */
package io.kvpool.examples.server.router;
