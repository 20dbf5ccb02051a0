package io.kvpool.examples.replay;

import io.kvpool.examples.load.LoadReport;
import io.kvpool.examples.load.Mix;
import io.kvpool.examples.load.Options;
import io.kvpool.examples.load.Outcome;
import io.kvpool.examples.server.Subcommand;
import io.kvpool.examples.server.config.Cli;
import io.kvpool.examples.server.config.ServerConfig;

import java.io.PrintStream;
import java.util.ArrayList;
import java.util.List;
import java.util.Locale;

/**
 * {@code replay}: the incident replay ({@link Replay}) from the command line. Exits 0 when no response
 * held another tenant's marker, nothing unexpected was answered and the pools balanced; 1 otherwise
 * (which is what {@code --unsafe-incident} shows); 2 on bad usage.
 */
public final class ReplayCommand implements Subcommand {

    /** The incident's advertised context, tokens. */
    public static final long INCIDENT_CONTEXT = 1_048_576;
    /** The incident's prefill pool, tokens. */
    public static final long INCIDENT_PREFILL = 681_280;

    private static final List<Cli.Flag> FLAGS = List.of(
        new Cli.Flag("--requests", "N", "requests in all [600]"),
        new Cli.Flag("--clients", "N", "concurrent clients [16]"),
        new Cli.Flag("--tenants", "N", "tenants [8]"),
        new Cli.Flag("--seed", "N", "seed of the requests and of the injected faults [1]"),
        new Cli.Flag("--over-capacity-ratio", "P", "share of requests over the prefill pool, within the context [0.1]"),
        new Cli.Flag("--abort-ratio", "P", "share the client abandons once admitted or mid-stream [0.1]"),
        new Cli.Flag("--stream-ratio", "P", "share of streamed requests [0.5]"));

    /** The server the replay starts unless told otherwise: the incident's sizes divided by 512. */
    static final List<String> SERVER_DEFAULTS = List.of("--port", "0", "--context", "2048", "--prefill-pages", "83",
        "--decode-pages", "512", "--token-delay-ms", "1", "--heartbeat-ms", "20", "--reconnect-ms", "20", "--fault-rate", "0.02");

    private static final Options.Command COMMAND = Options.command("usage: KvServerMain replay [options] [server options]     (./dev example replay …)",
        """
            Replays the 2026 incident over HTTP against a server in this JVM: a prefill pool smaller than the
            advertised context (1,048,576 advertised, 681,280 held; here ÷512: 2,048 and 83 pages × 16 = 1,328),
            tenants whose prompts are their secret markers (SECRET-<tenant>-<request>), over-capacity requests
            (within the context, over the prefill pool), client disconnects and injected transfer faults; then a
            table: requests, completed, rejected/retry later/failed by reason, aborted, and the responses that
            contain another tenant's marker. The safe server refuses the configuration; the replay shows the
            refusal and runs with the context it names. --unsafe-incident reproduces the leak.
            The server options' defaults shown are the replay's own.""",
        "replay options (defaults in brackets):", FLAGS, ServerConfig.parse(SERVER_DEFAULTS.toArray(new String[0])));

    /** @return the command line {@link #run} parses, and its help */
    static Options.Command command() {
        return COMMAND;
    }

    /** @return the help, generated from the options {@link #run} parses */
    public static String usage() {
        return COMMAND.usage();
    }

    @Override
    public String summary() {
        return "the 2026 incident replayed: undersized prefill pool, many tenants, aborts, faults; counts foreign markers";
    }

    @Override
    public int run(String[] args, PrintStream out, PrintStream err) throws Exception {
        final Replay.Settings settings;
        try {
            final Options o = COMMAND.parse(args);
            if (o.help()) {
                out.print(usage());
                return 0;
            }
            settings = settings(o);
        } catch (IllegalArgumentException e) {
            err.println("error: " + e.getMessage());
            err.print(usage());
            return 2;
        }
        final ServerConfig c = settings.server();
        if (c.unsafe()) {
            c.printUnsafeBanner(err);
            out.println("UNSAFE replay: safeguards OFF " + c.unsafeSwitches());
        }
        final long prefillTokens = (long) c.prefillPages() * c.layout().tokensPerPage();
        out.printf(Locale.ROOT, "kvpool incident replay: advertised context %,d tokens, prefill pool %,d pages × %d = %,d tokens "
                + "(the incident: %,d and %,d, i.e. %.1f%% vs %.1f%% here), decode pool %,d pages%n", c.contextTokens(), c.prefillPages(),
            c.layout().tokensPerPage(), prefillTokens, INCIDENT_CONTEXT, INCIDENT_PREFILL, 100.0 * INCIDENT_PREFILL / INCIDENT_CONTEXT,
            100.0 * prefillTokens / c.contextTokens(), c.decodePages());
        out.printf(Locale.ROOT, "  %,d requests from %d clients; %s; transfer faults at rate %s%n", settings.requests(), settings.clients(),
            settings.mix(), c.faults().rate());
        final Replay.Result r;
        try {
            r = Replay.run(settings, out);
        } catch (IllegalArgumentException | IllegalStateException | java.io.UncheckedIOException e) {
            err.println("refusing to start: " + e.getMessage());
            return 1;
        }
        Replay.print(r, out);
        final long foreignKv = r.run().outcomes().stream().filter(Outcome::foreignKv).count();
        final long mismatches = r.run().kvMismatches();
        final boolean leak = r.foreignMarkers() > 0 || foreignKv > 0;
        final boolean nothing = LoadReport.nothingCompleted(r.run());
        final boolean clean = clean(r);
        out.println(clean ? "verdict: no response contained another tenant's marker or KV; every completion got its own prompt's KV; pools balanced"
            : leak ? "verdict: LEAK — " + r.foreignMarkers() + " responses contained another tenant's marker, " + foreignKv
            + " another tenant's KV" + (c.unsafe() ? " (the incident, reproduced with " + String.join(" ", c.unsafeSwitches()) + ")" : "")
            : mismatches > 0 ? "verdict: FAILURE — " + mismatches + " completions got KV that is not their prompt (see above)"
            : nothing ? "verdict: FAILURE — no request that fits completed: the run has no KV to check, and shows nothing about leaks"
            : "verdict: FAILURE — unexpected answers or unbalanced pools (see above)");
        return clean ? 0 : 1;
    }

    /**
     * @return whether a replay shows the server clean: no foreign marker or KV, every completion its own prompt's KV,
     *         no unexpected answer, the pools balanced, and some completion whose KV was checked
     */
    static boolean clean(Replay.Result r) {
        return r.foreignMarkers() == 0 && r.run().outcomes().stream().noneMatch(Outcome::foreignKv) && r.run().kvMismatches() == 0
            && r.count(Outcome.Kind.UNEXPECTED) == 0 && r.pools().ok() && !LoadReport.nothingCompleted(r.run());
    }

    /** The settings from the options: the replay's server defaults, then the server options given. */
    static Replay.Settings settings(Options o) {
        final long seed = o.number("--seed", 1, Long.MIN_VALUE, Long.MAX_VALUE);
        final List<String> serverArgs = new ArrayList<>(SERVER_DEFAULTS);
        serverArgs.addAll(List.of("--seed", Long.toString(seed)));
        serverArgs.addAll(o.serverArgs());
        final ServerConfig c = ServerConfig.parse(serverArgs.toArray(new String[0]));
        final int[] maxTokens = {0, 16};
        final long prefillTokens = (long) c.prefillPages() * c.layout().tokensPerPage();
        final int lo, hi;
        if (prefillTokens < c.contextTokens() - maxTokens[1]) { // the incident's request: over the pool, within the context
            lo = (int) prefillTokens + 1;
            hi = (int) c.contextTokens() - maxTokens[1];
        } else { // no such request exists for this configuration: over the context
            lo = (int) c.contextTokens() + 1;
            hi = lo + (int) c.contextTokens() / 4;
        }
        final Mix mix = new Mix((int) o.number("--tenants", 8, 1, io.kvpool.examples.load.Markers.MAX_TENANTS), new int[] {8, 192}, maxTokens, o.ratio("--stream-ratio", 0.5),
            o.ratio("--abort-ratio", 0.1), o.ratio("--over-capacity-ratio", 0.1), new int[] {lo, hi}, 0, c.maxBodyBytes(), seed);
        return new Replay.Settings(c, mix, (int) o.number("--clients", 16, 1, 10_000), o.number("--requests", 600, 1, 100_000_000));
    }
}
