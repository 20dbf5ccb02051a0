/**
 * The example server's load generator ({@code ./dev example load}, {@link io.kvpool.examples.load.LoadCommand})
 * and the client pieces the incident replay shares with it.
 *
 * <pre>
 *   Mix (seed, index) ─▶ Shot ─▶ CompletionClient (java.net.http, HTTP/1.1) ─▶ Outcome
 *        LoadGenerator: N virtual threads, closed loop, bounded by a count or a duration
 *        LoadReport:    throughput, Percentiles (TTFT, total), answers by status and reason, leaks
 *        PoolCheck:     at quiescence every page FREE (verifyAccounting in this JVM, or /metrics)
 * </pre>
 *
 * <p>Leaks are looked for in every answer: each prompt is made of its tenant's secret {@link
 * io.kvpool.examples.load.Markers markers}, so another tenant's marker in a response, or a completion
 * whose KV ({@code kvpool.kv_text}) is not exactly its prompt, is data that crossed tenants.
 */
package io.kvpool.examples.load;
