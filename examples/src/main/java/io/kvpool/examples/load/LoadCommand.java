package io.kvpool.examples.load;

import io.kvpool.examples.server.KvServer;
import io.kvpool.examples.server.Subcommand;
import io.kvpool.examples.server.config.Cli;
import io.kvpool.examples.server.config.ServerConfig;

import java.io.PrintStream;
import java.net.URI;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;

/**
 * {@code load}: the bounded load generator ({@link LoadGenerator}) against a server at {@code --url}, or
 * against one it starts in this JVM (the default; any of {@code serve}'s options configure it). Prints
 * {@link LoadReport}; exits 0 when the run is clean, 1 when it found a leak, an unexpected answer or
 * unbalanced pools, or when no request that fits completed (it checked no KV), 2 on bad usage.
 */
public final class LoadCommand implements Subcommand {

    private static final List<Cli.Flag> FLAGS = List.of(
        new Cli.Flag("--url", "URL", "a running server [none: start one in this JVM on a free port]"),
        new Cli.Flag("--clients", "N", "concurrent clients, one virtual thread each [32]"),
        new Cli.Flag("--duration", "D", "stop sending after D: 30, 30s or 500ms [10s]"),
        new Cli.Flag("--requests", "N", "stop after N requests instead (overrides --duration)"),
        new Cli.Flag("--tenants", "N", "tenants, keys sk-tenant0 … [16]"),
        new Cli.Flag("--prompt-tokens", "MIN-MAX", "prompt of a normal request, log-uniform [8-256]"),
        new Cli.Flag("--max-tokens", "MIN-MAX", "max_tokens, uniform [0-32]"),
        new Cli.Flag("--stream-ratio", "P", "share of streamed requests [0.5]"),
        new Cli.Flag("--abort-ratio", "P", "share the client abandons once admitted or mid-stream [0.05]"),
        new Cli.Flag("--over-capacity-ratio", "P", "share of prompts larger than the server can take [0.02]"),
        new Cli.Flag("--over-capacity-tokens", "MIN-MAX", "their prompt [a started server: just over its smaller of prefill pool and "
            + "context; with --url: 4097-5120, over the default context]"),
        new Cli.Flag("--garbage-ratio", "P", "share of bad input (malformed JSON, max_tokens -1 or missing, prompt not text, no key, "
            + "a body over the limit) [0.01]"),
        new Cli.Flag("--seed", "N", "seed of the request mix (and of a started server's faults) [1]"),
        new Cli.Flag("--timeout-ms", "N", "longest wait for one response [60000]"),
        new Cli.Flag("--max-body-bytes", "N", "the server's body limit, for the over-limit bodies: passed to a started server; "
            + "with --url, the target's [1048576]"));

    private static final Options.Command COMMAND = Options.command("usage: KvServerMain load [options] [server options]     (./dev example load …)",
        """
            Drives a server over loopback with many concurrent clients, then reports throughput, latency
            percentiles, answers by status and reason, and leaks: other tenants' secret markers in responses,
            completions whose KV is not their prompt, and (for a server it started) the pools' accounting.
            The server options apply only without --url, to the server it starts; --port is 0 there.""",
        "load options (defaults in brackets):", FLAGS, ServerConfig.builder().port(0).build());

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
        return "bounded load generator: throughput, latency percentiles and leaks, against --url or a server of its own";
    }

    @Override
    public int run(String[] args, PrintStream out, PrintStream err) throws Exception {
        final Options o;
        final ServerConfig config; // null with --url
        final URI url;
        final Mix mix;
        final int clients;
        final long requests;
        final Duration duration;
        final Duration timeout;
        try {
            o = COMMAND.parse(args);
            if (o.help()) {
                out.print(usage());
                return 0;
            }
            if (o.has("--url") && !o.serverArgs().isEmpty()) {
                throw new IllegalArgumentException("server options " + o.serverArgs() + " need a server of our own: drop --url");
            }
            final List<String> serverArgs = new ArrayList<>(List.of("--port", "0"));
            if (o.has("--seed")) {
                serverArgs.addAll(List.of("--seed", o.text("--seed", "1"))); // the injected faults' seed too
            }
            if (o.has("--max-body-bytes")) {
                serverArgs.addAll(List.of("--max-body-bytes", o.text("--max-body-bytes", "")));
            }
            serverArgs.addAll(o.serverArgs());
            config = o.has("--url") ? null : ServerConfig.parse(serverArgs.toArray(new String[0]));
            url = o.has("--url") ? url(o.text("--url", "")) : null;
            mix = mix(o, config);
            clients = (int) o.number("--clients", 32, 1, 10_000);
            requests = o.number("--requests", 0, 0, Long.MAX_VALUE);
            duration = requests > 0 ? null : o.duration("--duration", Duration.ofSeconds(10));
            timeout = Duration.ofMillis(o.number("--timeout-ms", 60_000, 1, Integer.MAX_VALUE));
        } catch (IllegalArgumentException e) {
            err.println("error: " + e.getMessage());
            err.print(usage());
            return 2;
        }
        KvServer server = null;
        Runnable unhook = () -> { };
        try {
            final URI base;
            if (config == null) {
                base = url;
            } else {
                config.printUnsafeBanner(err); // prints only when a safeguard is off
                try {
                    server = KvServer.start(config);
                } catch (IllegalArgumentException | IllegalStateException | java.io.UncheckedIOException e) {
                    err.println("refusing to start: " + e.getMessage());
                    return 1;
                }
                unhook = server.closeOnExit(); // Ctrl-C leaves no pool file in /dev/shm
                base = server.baseUri();
                out.println("server " + base + ": " + config);
            }
            out.println("load: " + clients + " clients, " + (requests > 0 ? requests + " requests" : duration.toMillis() / 1000.0 + " s")
                + " against " + base);
            final LoadGenerator.Result r;
            try (CompletionClient client = new CompletionClient(base, timeout, mix.maxBodyBytes())) {
                r = LoadGenerator.run(client, mix, clients, requests, duration);
            }
            final PoolCheck pools = server != null ? PoolCheck.of(server, Duration.ofSeconds(30)) : PoolCheck.remote(base, Duration.ofSeconds(30));
            LoadReport.print(r, mix, pools, out);
            if (server != null) {
                out.println("server's own count: " + server.counters());
            }
            return LoadReport.clean(r, pools) ? 0 : 1;
        } finally {
            if (server != null) {
                server.close();
                unhook.run();
            }
        }
    }

    /** @throws IllegalArgumentException unless an {@code http://host:port/} URL whose port, if given, is in [1, 65535] */
    static URI url(String s) {
        final URI u;
        try {
            u = URI.create(s.endsWith("/") ? s : s + "/");
        } catch (IllegalArgumentException e) {
            throw new IllegalArgumentException("--url is not a URL: '" + s + "'");
        }
        if (!"http".equals(u.getScheme()) || u.getHost() == null) {
            throw new IllegalArgumentException("--url must be http://host:port/, was '" + s + "'");
        }
        if (u.getPort() == 0 || u.getPort() > 65_535) { // java.net.URI takes any digits; no socket has such a port
            throw new IllegalArgumentException("--url must be http://host:port/ with a port in [1, 65535], was '" + s + "'");
        }
        return u;
    }

    /** The mix from the options; over-capacity prompts default to just over what {@code config}'s server can take. */
    static Mix mix(Options o, ServerConfig config) {
        final int[] maxTokens = o.range("--max-tokens", 0, 32, 0, 1 << 20);
        final int limit = config == null ? 4096 : (int) Math.min(config.contextTokens(), (long) config.prefillPages() * config.layout().tokensPerPage());
        return new Mix((int) o.number("--tenants", 16, 1, Markers.MAX_TENANTS), o.range("--prompt-tokens", 8, 256, Mix.MIN_PROMPT_TOKENS, 1 << 20),
            maxTokens, o.ratio("--stream-ratio", 0.5), o.ratio("--abort-ratio", 0.05), o.ratio("--over-capacity-ratio", 0.02),
            o.range("--over-capacity-tokens", limit + 1, limit + Math.max(1, limit / 4), Mix.MIN_PROMPT_TOKENS, 1 << 24),
            o.ratio("--garbage-ratio", 0.01),
            config != null ? config.maxBodyBytes() : (int) o.number("--max-body-bytes", 1 << 20, 64, Integer.MAX_VALUE - 1),
            o.number("--seed", 1, Long.MIN_VALUE, Long.MAX_VALUE));
    }
}
