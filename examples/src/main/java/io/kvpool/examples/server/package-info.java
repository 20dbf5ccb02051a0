/**
 * The example server's entry points and what a user starts from: {@link io.kvpool.examples.server.KvServerMain}
 * (the subcommands {@code serve}, {@code preflight}, {@code load}, {@code replay}), {@link io.kvpool.examples.server.KvServer}
 * (router, and both roles in this JVM or reached over HTTP) and {@link io.kvpool.examples.server.RoleServer} (one role
 * in its own process). The configuration they take is {@link io.kvpool.examples.server.config}.
 *
 * <p>Dependency rule: the sub-packages below are layered; each uses only the ones it points to (and none uses this
 * package). {@code LayoutTest} checks it on every main source file (imports and fully qualified names; comments do not
 * count).
 *
 * <pre>
 *                        server  (entry points: KvServerMain, KvServer, RoleServer, the subcommands)
 *                          │  may use every package below, http and ui
 *                          ▼
 *   remote  router ↔ role processes: clients (RemoteRoles) and endpoints (RoleEndpoint …), preflight
 *     │
 *     ▼
 *   metrics  Prometheus registry of the router and the roles (ServerMetrics)
 *     │
 *     ▼
 *   router  the completions API over the two roles (Router, CompletionsHandler, RouterCounters)
 *     │
 *     ▼
 *   api     the HTTP API's shared pieces: ApiError, Auth, Http, Json          ──▶ http
 *     │
 *     ▼
 *   role    prefill and decode: the services the router calls, the roles, their assembly  ──▶ ui (PoolView)
 *     │
 *     ▼
 *   config  ServerConfig, its records and the command line (Cli, ServerOptions)
 *     │
 *     ▼
 *   echo    the echo model: tokenizer, KV pages, decoder
 *     │
 *     ▼
 *   link    the KV link between the roles: faults, gates, page access, device backend
 * </pre>
 *
 * An arrow also allows skipping layers, as each package-info says (for example remote uses link, router uses echo);
 * never upwards. Outside {@code server}: {@code http} and {@code ui} use nothing of it; {@code load} and {@code replay}
 * use this package and {@code config}, and this package's {@code KvServerMain} names their subcommands (the one
 * exception, listed in {@code LayoutTest}).
 */
package io.kvpool.examples.server;
