package io.kvpool.examples.load;

import java.io.PrintStream;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.TreeMap;
import java.util.function.Predicate;

/** The load generator's report: throughput, latency percentiles, answers by status and reason, leaks. */
public final class LoadReport {

    private LoadReport() {
    }

    /**
     * @return whether the run is clean: no foreign marker, no completion with someone else's KV, nothing unexpected, pools
     *         clean, and some completion to check (see {@link #nothingCompleted})
     */
    public static boolean clean(LoadGenerator.Result r, PoolCheck pools) {
        return noLeakNorFailure(r, pools) && !nothingCompleted(r);
    }

    /** @return whether no response held another tenant's marker or KV, nothing was unexpected, and the pools are clean */
    private static boolean noLeakNorFailure(LoadGenerator.Result r, PoolCheck pools) {
        return r.leaked() == 0 && foreignKv(r) == 0 && r.kvMismatches() == 0 && r.count(Outcome.Kind.UNEXPECTED) == 0
            && (pools == null || pools.ok());
    }

    /** @return the completions whose KV, as the server reports it, was read from another tenant's pages */
    static long foreignKv(LoadGenerator.Result r) {
        return r.outcomes().stream().filter(Outcome::foreignKv).count();
    }

    /**
     * @return whether no request was sent at all, or requests that fit and were meant to finish (not aborted by the
     *         client on purpose) were sent and none of them completed (every one refused, failed or timed out): such a
     *         run has no KV to check, so it shows nothing about leaks, whatever else it saw. A run of aborts only is
     *         judged by its pools
     */
    public static boolean nothingCompleted(LoadGenerator.Result r) {
        return r.outcomes().isEmpty() || r.count(Outcome.Kind.COMPLETED) == 0
            && r.outcomes().stream().anyMatch(o -> o.shot().kind() == Shot.Kind.NORMAL && !o.shot().aborts());
    }

    /** Prints the report; {@code pools} is {@code null} when they could not be checked. */
    public static void print(LoadGenerator.Result r, Mix mix, PoolCheck pools, PrintStream out) {
        final List<Outcome> all = r.outcomes();
        final double s = r.seconds();
        final List<Outcome> completed = all.stream().filter(o -> o.kind() == Outcome.Kind.COMPLETED).toList();
        final long generated = completed.stream().mapToLong(Outcome::completionTokens).sum();
        final long prompt = completed.stream().mapToLong(o -> o.shot().promptTokens()).sum();
        out.printf(Locale.ROOT, "load: %,d requests in %.1f s from %d concurrent clients%n  %s%n", all.size(), s, r.clients(), mix);
        out.printf(Locale.ROOT, "throughput   %,.1f requests/s, %,.1f completions/s, %,.0f generated tokens/s, %,.0f prompt tokens/s (completions)%n",
            all.size() / s, completed.size() / s, generated / s, prompt / s);
        out.printf("latency (ms)                   %9s %9s %9s %9s %9s%n", "p50", "p90", "p99", "max", "n");
        out.println("  time to first token, stream  " + latencies(completed, o -> o.shot().stream(), true).row());
        out.println("  total, streamed              " + latencies(completed, o -> o.shot().stream(), false).row());
        out.println("  total, not streamed          " + latencies(completed, o -> !o.shot().stream(), false).row());
        out.println("  refusals (4xx, 429, 503)     " + latencies(all, o -> o.kind() == Outcome.Kind.REJECTED
            || o.kind() == Outcome.Kind.RETRY_LATER || o.kind() == Outcome.Kind.GARBAGE_REFUSED, false).row());
        out.println("answers");
        final Map<String, Long> by = new TreeMap<>();
        for (Outcome o : all) {
            by.merge(String.format("%-16s %s", o.kind().name().toLowerCase(Locale.ROOT), o.statusAndReason()), 1L, Long::sum);
        }
        by.forEach((k, v) -> out.printf("  %-54s %,9d%n", k, v));
        out.println("leaks");
        out.printf("  %-54s %,9d%n", "responses holding another tenant's marker", r.leaked());
        out.printf("  %-54s %,9d%n", "completions whose KV names another tenant", foreignKv(r));
        out.printf("  %-54s %,9d%n", "completions whose KV is not exactly their prompt", r.kvMismatches());
        out.printf("  %-54s %,9d%n", "unexpected answers", r.count(Outcome.Kind.UNEXPECTED));
        examples(all, o -> o.leaked() || o.foreignKv() || o.kvMismatch() || o.kind() == Outcome.Kind.UNEXPECTED, out);
        if (pools == null) {
            out.println("  pools: not checked");
        } else {
            pools.lines().forEach(l -> out.println("  pool " + l));
        }
        out.println(clean(r, pools) ? "verdict: clean — no leak, every answer as expected, pools balanced"
            : noLeakNorFailure(r, pools)
            ? "verdict: NOTHING COMPLETED — no request that fits got its completion, so the run checked no KV"
            : "verdict: LEAK OR FAILURE — see above");
    }

    static Percentiles latencies(List<Outcome> os, Predicate<Outcome> which, boolean ttft) {
        return new Percentiles(os.stream().filter(which).filter(o -> !ttft || o.ttftNanos() >= 0)
            .mapToLong(o -> ttft ? o.ttftNanos() : o.totalNanos()).toArray());
    }

    /** Prints up to three examples of outcomes that match. */
    public static void examples(List<Outcome> os, Predicate<Outcome> which, PrintStream out) {
        os.stream().filter(which).limit(3).forEach(o -> out.println("    e.g. request " + o.shot().index() + " of " + o.shot().tenant()
            + " (" + o.shot().kind().name().toLowerCase(Locale.ROOT) + ", " + o.shot().promptTokens() + " prompt tokens): "
            + o.statusAndReason() + (o.leaked() ? ", holds " + o.foreignMarkers() : "")
            + (o.foreignKv() ? ", its KV names " + o.kvTenants() : "") + (o.detail() == null ? "" : " — " + shorten(o.detail()))));
    }

    private static String shorten(String s) {
        return s.length() <= 160 ? s : s.substring(0, 160) + "…";
    }
}
