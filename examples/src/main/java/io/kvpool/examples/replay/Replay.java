package io.kvpool.examples.replay;

import io.kvpool.PoolCapacityException;
import io.kvpool.examples.load.CompletionClient;
import io.kvpool.examples.load.LoadGenerator;
import io.kvpool.examples.load.LoadReport;
import io.kvpool.examples.load.Mix;
import io.kvpool.examples.load.Outcome;
import io.kvpool.examples.load.PoolCheck;
import io.kvpool.examples.server.KvServer;
import io.kvpool.examples.server.config.ServerConfig;

import java.io.PrintStream;
import java.time.Duration;
import java.util.Locale;
import java.util.Map;
import java.util.Objects;
import java.util.TreeMap;

/**
 * The 2026 incident, replayed over HTTP against the example server in this JVM: a prefill pool smaller
 * than the advertised context (the incident's 681,280 of 1,048,576 tokens, scaled down), many tenants
 * whose prompts are made of their secret markers, over-capacity requests (within the advertised context,
 * over the prefill pool), clients that disconnect, and injected transfer faults. It counts the responses
 * that hold another tenant's marker.
 *
 * <h2>What the safe server does with the incident's configuration</h2>
 * It refuses to start: the prefill pool's {@link io.kvpool.ContextPolicy#FAIL} (the default) throws
 * {@link PoolCapacityException} naming both numbers and the largest safe context. The replay shows that
 * refusal, then does what it asks: it replays with the advertised context lowered to what the pool holds.
 * The incident's over-capacity requests are then over the advertised context too, and the router refuses
 * them with 400 {@code context_too_long} before any KV moves. (The pool's other policy,
 * {@code ContextPolicy.CLAMP}, is an explicit opt-in that clamps the same way with a warning; the example
 * server uses it only under {@code --unsafe-placeholder-on-overflow}, where the incident needs the
 * undersized pool to start.)
 *
 * <h2>With the incident's switches</h2>
 * {@code --unsafe-incident} starts the undersized pool as advertised; an over-capacity request becomes a
 * one-token placeholder while decode is told the full length, and with the length check, canary, checksum
 * and free-page fill off decode reads pages that still hold earlier tenants' KV: foreign markers appear.
 */
public final class Replay {

    /**
     * What to replay.
     *
     * @param server  the server as asked for (may be refused: see the class comment)
     * @param mix     the requests
     * @param clients concurrent clients
     * @param requests requests in all
     */
    public record Settings(ServerConfig server, Mix mix, int clients, long requests) {
        public Settings {
            Objects.requireNonNull(server, "server");
            Objects.requireNonNull(mix, "mix");
        }
    }

    /**
     * What happened.
     *
     * @param settings     what was asked
     * @param ran          the configuration the server actually ran with
     * @param refusal      why the server refused {@code settings.server()}, or {@code null} if it started as asked
     * @param run          every request's outcome
     * @param prefill      the prefill role's counters after the run ({@code placeholders}, {@code injected_faults} …)
     * @param server       the router's counters after the run ({@code requests}, {@code aborted} …)
     * @param pools        the pools after the run, at quiescence
     */
    public record Result(Settings settings, ServerConfig ran, String refusal, LoadGenerator.Result run, Map<String, Long> prefill,
                         Map<String, Long> server, PoolCheck pools) {

        public Result {
            prefill = Map.copyOf(prefill);
            server = Map.copyOf(server);
        }

        /** @return over-capacity requests the prefill role turned into one-token placeholders (0 unless unsafe) */
        public long placeholders() {
            return prefill.getOrDefault("placeholders", 0L);
        }

        /** @return responses that held another tenant's marker — 0 unless safeguards are off */
        public long foreignMarkers() {
            return run.leaked();
        }

        /** @return outcomes of this kind */
        public long count(Outcome.Kind kind) {
            return run.count(kind);
        }

        /** @return outcomes of this kind by {@code status reason}, sorted */
        public Map<String, Long> byReason(Outcome.Kind kind) {
            final Map<String, Long> m = new TreeMap<>();
            run.outcomes().stream().filter(o -> o.kind() == kind).forEach(o -> m.merge(o.statusAndReason(), 1L, Long::sum));
            return m;
        }
    }

    private Replay() {
    }

    /**
     * Starts the server (lowering the advertised context if it refuses the configuration, and saying so on
     * {@code out}), runs the requests, checks the pools at quiescence, closes the server.
     */
    public static Result run(Settings s, PrintStream out) throws InterruptedException {
        ServerConfig config = s.server();
        String refusal = null;
        KvServer server;
        try {
            server = KvServer.start(config);
        } catch (PoolCapacityException e) {
            refusal = e.getMessage();
            out.println("the safe server REFUSES this configuration: " + refusal);
            config = config.toBuilder().contextTokens(e.poolTokens()).build();
            out.printf(Locale.ROOT, "  → replaying with the advertised context lowered to %,d tokens, the largest safe context the refusal names;%n"
                + "    the incident's over-capacity requests are now over the context too and get 400 context_too_long%n", e.poolTokens());
            server = KvServer.start(config);
        }
        final Runnable unhook = server.closeOnExit(); // Ctrl-C leaves no pool file in /dev/shm
        try (KvServer running = server) {
            final LoadGenerator.Result r;
            try (CompletionClient client = new CompletionClient(running.baseUri(), Duration.ofSeconds(60), config.maxBodyBytes())) {
                r = LoadGenerator.run(client, s.mix(), s.clients(), s.requests(), null);
            }
            final PoolCheck pools = PoolCheck.of(running, Duration.ofSeconds(30));
            return new Result(s, config, refusal, r, running.roleStatus().get(0).counters(), running.counters(), pools);
        } finally {
            unhook.run(); // after the close
        }
    }

    /** Prints the table. */
    public static void print(Result r, PrintStream out) {
        final String rule = "+" + "-".repeat(62) + "+" + "-".repeat(10) + "+";
        out.println(rule);
        row(out, "requests", r.run().outcomes().size());
        row(out, "completed", r.count(Outcome.Kind.COMPLETED));
        reasons(out, r, Outcome.Kind.REJECTED, "rejected");
        reasons(out, r, Outcome.Kind.RETRY_LATER, "retry later");
        reasons(out, r, Outcome.Kind.FAILED, "failed");
        row(out, "aborted by the client (mid-request or mid-stream)", r.count(Outcome.Kind.ABORTED));
        row(out, "unexpected answers", r.count(Outcome.Kind.UNEXPECTED));
        row(out, "transfer faults injected", r.prefill().getOrDefault("injected_faults", 0L));
        out.println(rule);
        row(out, "over-capacity requests turned into placeholders", r.placeholders());
        row(out, "completions whose KV is not exactly their prompt", r.run().kvMismatches());
        row(out, "responses whose KV names another tenant", r.run().outcomes().stream().filter(Outcome::foreignKv).count());
        row(out, "RESPONSES CONTAINING ANOTHER TENANT'S MARKER", r.foreignMarkers());
        out.println(rule);
        LoadReport.examples(r.run().outcomes(), o -> o.leaked() || o.kind() == Outcome.Kind.UNEXPECTED, out);
        r.pools().lines().forEach(l -> out.println("pool " + l));
    }

    private static void reasons(PrintStream out, Result r, Outcome.Kind kind, String what) {
        final Map<String, Long> m = r.byReason(kind);
        if (m.isEmpty()) {
            row(out, what, 0);
        }
        m.forEach((reason, n) -> row(out, what + ": " + reason, n));
    }

    private static void row(PrintStream out, String name, long n) {
        out.printf(Locale.ROOT, "| %-60s | %8d |%n", name, n);
    }
}
