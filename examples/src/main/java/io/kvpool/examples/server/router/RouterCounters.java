package io.kvpool.examples.server.router;

import io.micrometer.core.instrument.Counter;
import io.micrometer.core.instrument.Gauge;
import io.micrometer.core.instrument.MeterRegistry;
import io.micrometer.prometheusmetrics.PrometheusConfig;
import io.micrometer.prometheusmetrics.PrometheusMeterRegistry;

import java.util.Objects;
import java.util.concurrent.atomic.AtomicInteger;

/**
 * The router's counters, as Micrometer meters of the router's registry (the one {@code /metrics} serves,
 * {@link io.kvpool.examples.server.metrics.ServerMetrics}); readable and incremented from any thread. Names in the Prometheus registry:
 * <pre>
 *   kvpool_requests_total, kvpool_requests_completed_total, kvpool_requests_aborted_total,
 *   kvpool_requests_timed_out_total, kvpool_requests_in_flight (gauge),
 *   kvpool_requests_rejected_total{reason,role}, kvpool_requests_failed_total{reason}, kvpool_http_errors_total{status}
 * </pre>
 * The tagged ones appear with their first tag value.
 */
public final class RouterCounters {

    public static final String REJECTED = "kvpool.requests.rejected";
    public static final String FAILED = "kvpool.requests.failed";
    public static final String ERRORS = "kvpool.http.errors";

    public final Counter requests;
    public final Counter completed;
    public final Counter aborted;
    public final Counter timedOut;
    public final AtomicInteger inFlight = new AtomicInteger();
    private final MeterRegistry registry;

    /** Counters in a registry of their own: the server's, which {@link io.kvpool.examples.server.metrics.ServerMetrics} completes, serves and closes. */
    RouterCounters() {
        this(new PrometheusMeterRegistry(PrometheusConfig.DEFAULT));
    }

    /** Counters registered in {@code registry}. */
    RouterCounters(MeterRegistry registry) {
        this.registry = Objects.requireNonNull(registry, "registry");
        requests = Counter.builder("kvpool.requests").description("Completion requests the router received (authenticated)")
            .register(registry);
        completed = Counter.builder("kvpool.requests.completed").description("Completions answered in full").register(registry);
        aborted = Counter.builder("kvpool.requests.aborted")
            .description("Requests whose client went away; both roles were told to abort them").register(registry);
        timedOut = Counter.builder("kvpool.requests.timed.out")
            .description("Requests that waited longer than the request timeout").register(registry);
        Gauge.builder("kvpool.requests.in.flight", inFlight, AtomicInteger::get).description("Requests being served now")
            .register(registry);
    }

    /** @return the registry the counters are in */
    public MeterRegistry registry() {
        return registry;
    }

    /** A refusal before any KV moved, by role and reason. */
    void rejected(String role, String reason) {
        Counter.builder(REJECTED).description("Requests refused before any KV moved, by the role that refused (router, prefill, "
            + "decode) and reason").tags("role", role, "reason", reason).register(registry).increment();
    }

    /** A request that failed rather than was refused: a transfer that did not commit, a role lost or failed, a bug; by reason. */
    void failed(String reason) {
        Counter.builder(FAILED).description("Requests whose KV transfer did not commit, whose role was lost or failed, "
            + "or that failed for an unexpected error, by reason")
            .tag("reason", reason).register(registry).increment();
    }

    /** An error response, by status. */
    void error(int status) {
        Counter.builder(ERRORS).description("Error responses the server sent, by HTTP status").tag("status", Integer.toString(status))
            .register(registry).increment();
    }

    public long rejectedTotal() {
        return sum(REJECTED);
    }

    public long failedTotal() {
        return sum(FAILED);
    }

    private long sum(String name) {
        return (long) registry.find(name).counters().stream().mapToDouble(Counter::count).sum();
    }
}
