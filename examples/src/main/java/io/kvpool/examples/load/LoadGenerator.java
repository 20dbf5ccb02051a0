package io.kvpool.examples.load;

import java.time.Duration;
import java.util.ArrayList;
import java.util.Comparator;
import java.util.List;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.atomic.AtomicLong;

/**
 * Runs {@code clients} concurrent clients, each a virtual thread with a {@link CompletionClient#session()} of its
 * own, sending one request after another (closed loop: a client waits for its answer before the next), taking
 * the next index from a shared counter, until {@code requests} were taken or {@code duration} is up; requests
 * in flight then finish.
 */
public final class LoadGenerator {

    /**
     * What a run produced.
     *
     * @param outcomes     every request's outcome, by index
     * @param elapsedNanos from the first send to the last answer
     * @param clients      concurrent clients
     */
    public record Result(List<Outcome> outcomes, long elapsedNanos, int clients) {
        public Result {
            outcomes = List.copyOf(outcomes);
        }

        /** @return the outcomes of this kind */
        public long count(Outcome.Kind kind) {
            return outcomes.stream().filter(o -> o.kind() == kind).count();
        }

        /** @return responses that held another tenant's marker */
        public long leaked() {
            return outcomes.stream().filter(Outcome::leaked).count();
        }

        /** @return completions whose KV was not exactly their prompt */
        public long kvMismatches() {
            return outcomes.stream().filter(Outcome::kvMismatch).count();
        }

        /** @return elapsed seconds */
        public double seconds() {
            return elapsedNanos / 1e9;
        }
    }

    private LoadGenerator() {
    }

    /**
     * @param requests stop taking new requests after this many (≤ 0: no count limit)
     * @param duration stop taking new requests after this long ({@code null}: no time limit)
     * @throws IllegalArgumentException if neither bound is given, or {@code clients < 1}
     */
    public static Result run(CompletionClient client, Mix mix, int clients, long requests, Duration duration) throws InterruptedException {
        if (clients < 1) {
            throw new IllegalArgumentException("clients must be ≥ 1, was " + clients);
        }
        if (requests <= 0 && duration == null) {
            throw new IllegalArgumentException("a run needs a bound: a request count or a duration");
        }
        final AtomicLong next = new AtomicLong();
        final long start = System.nanoTime();
        final long end = duration == null ? Long.MAX_VALUE : start + duration.toNanos();
        final List<Future<List<Outcome>>> parts = new ArrayList<>();
        try (ExecutorService threads = Executors.newVirtualThreadPerTaskExecutor()) {
            for (int c = 0; c < clients; c++) {
                parts.add(threads.submit(() -> {
                    final List<Outcome> mine = new ArrayList<>();
                    try (CompletionClient.Session session = client.session()) { // connections of its own
                        while (duration == null || System.nanoTime() - end < 0) {
                            final long i = next.getAndIncrement();
                            if (requests > 0 && i >= requests) {
                                break;
                            }
                            mine.add(session.send(mix.shot(i)));
                        }
                    }
                    return mine;
                }));
            }
        } // waits for every client
        final List<Outcome> all = new ArrayList<>();
        for (Future<List<Outcome>> f : parts) {
            try {
                all.addAll(f.get());
            } catch (java.util.concurrent.ExecutionException e) {
                throw new IllegalStateException("a client failed: " + e.getCause(), e.getCause());
            }
        }
        all.sort(Comparator.comparingLong(o -> o.shot().index()));
        return new Result(all, System.nanoTime() - start, clients);
    }
}
