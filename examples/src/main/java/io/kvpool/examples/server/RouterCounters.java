package io.kvpool.examples.server;

import java.util.Map;
import java.util.TreeMap;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.LongAdder;

/** The router's counters, readable from any thread. */
final class RouterCounters {

    final LongAdder requests = new LongAdder();
    final LongAdder completed = new LongAdder();
    final LongAdder aborted = new LongAdder();
    final LongAdder timedOut = new LongAdder();
    final AtomicInteger inFlight = new AtomicInteger();
    private final ConcurrentHashMap<String, LongAdder> rejected = new ConcurrentHashMap<>();
    private final ConcurrentHashMap<String, LongAdder> failed = new ConcurrentHashMap<>();
    private final ConcurrentHashMap<Integer, LongAdder> errors = new ConcurrentHashMap<>();

    /** A refusal before any KV moved, by {@code role/reason}. */
    void rejected(String role, String reason) {
        rejected.computeIfAbsent(role + "/" + reason, k -> new LongAdder()).increment();
    }

    /** A transfer that did not commit, by failure reason. */
    void failed(String reason) {
        failed.computeIfAbsent(reason, k -> new LongAdder()).increment();
    }

    /** An error response, by status. */
    void error(int status) {
        errors.computeIfAbsent(status, k -> new LongAdder()).increment();
    }

    /** @return refusals by {@code role/reason}, sorted */
    Map<String, Long> rejected() {
        return sums(rejected);
    }

    /** @return failed transfers by reason, sorted */
    Map<String, Long> failed() {
        return sums(failed);
    }

    /** @return error responses by status, sorted */
    Map<Integer, Long> errors() {
        return sums(errors);
    }

    long rejectedTotal() {
        return rejected.values().stream().mapToLong(LongAdder::sum).sum();
    }

    long failedTotal() {
        return failed.values().stream().mapToLong(LongAdder::sum).sum();
    }

    private static <K extends Comparable<K>> Map<K, Long> sums(ConcurrentHashMap<K, LongAdder> m) {
        final Map<K, Long> out = new TreeMap<>();
        m.forEach((k, v) -> out.put(k, v.sum()));
        return out;
    }
}
