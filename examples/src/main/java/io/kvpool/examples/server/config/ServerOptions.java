package io.kvpool.examples.server.config;

import io.kvpool.examples.server.link.FaultPlan;

import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.function.BiConsumer;
import java.util.function.Function;

/**
 * The server's command-line options: for each its section, name, value label and help text, the default the help shows
 * (read from a {@link ServerConfig}, so the help shows the defaults the builder really has), and what it sets on a
 * {@link ServerConfig.Builder}. {@code serve}, {@code preflight}, {@code load} and {@code replay} all parse and document
 * the server's options from this one table ({@link #addTo}).
 */
public final class ServerOptions {

    /** The heading of the general options. */
    public static final String GENERAL = "server options (defaults in brackets):";
    /** The heading of the HTTP limits. */
    public static final String HTTP = "HTTP limits (defaults in brackets):";
    /** The heading of the options for roles in separate processes. */
    public static final String ROLES = "running the roles as separate processes (see docs/example-server.md):";
    /** The heading of the unsafe switches. */
    public static final String UNSAFE = "safeguard switches, for the incident replay only (each turns safeguards OFF):";

    /**
     * One option.
     *
     * @param section its section's heading
     * @param name    e.g. {@code --port}
     * @param label   its value in the help; {@code null} for a switch
     * @param help    its help text, without the default
     * @param shown   the default to show, read from the defaults; {@code null} to show none
     * @param apply   sets it on a builder: the builder and the value ({@code null} for a switch)
     */
    private record Option(String section, String name, String label, String help, Function<ServerConfig, String> shown,
                          BiConsumer<ServerConfig.Builder, String> apply) {
    }

    private static final List<Option> ALL = options();

    private ServerOptions() {
    }

    private static List<Option> options() {
        final List<Option> o = new ArrayList<>();
        general(o);
        http(o);
        o.add(new Option(ROLES, "--role", "all|router|prefill|decode", "what this process runs; all: router, prefill and decode in one JVM",
            c -> c.topology().role().flag(), topology("--role")));
        o.add(new Option(ROLES, "--prefill-url", "URL", "(router) the prefill role's internal endpoints",
            c -> c.topology().prefillUrl().toString(), topology("--prefill-url")));
        o.add(new Option(ROLES, "--decode-url", "URL", "(router) the decode role's internal endpoints",
            c -> c.topology().decodeUrl().toString(), topology("--decode-url")));
        o.add(new Option(ROLES, "--transport", "shm|ucx", "(prefill, decode) how KV moves between them; shm needs the same --work-dir "
            + "on both (decode creates the pool file and socket there)", c -> c.topology().transport().name().toLowerCase(java.util.Locale.ROOT),
            topology("--transport")));
        o.add(new Option(ROLES, "--kv-address", "HOST:PORT", "(prefill, decode with ucx) decode's UCX bootstrap listener",
            c -> c.topology().kvAddress(), topology("--kv-address")));
        for (UnsafeSwitches.Switch s : UnsafeSwitches.switches()) {
            o.add(new Option(UNSAFE, s.flag(), null, s.description(), null, (b, v) -> b.unsafe(b.unsafe().and(s.turnsOff()))));
        }
        return List.copyOf(o);
    }

    private static void general(List<Option> o) {
        o.add(new Option(GENERAL, "--host", "ADDR", "address to bind", ServerConfig::host, ServerConfig.Builder::host));
        o.add(new Option(GENERAL, "--port", "N", "HTTP port, 0 for any free one", c -> "" + c.port(),
            (b, v) -> b.port(integer("--port", v))));
        o.add(new Option(GENERAL, "--context", "TOKENS", "advertised max context, prompt + max_tokens", c -> "" + c.contextTokens(),
            (b, v) -> b.contextTokens(number("--context", v))));
        o.add(new Option(GENERAL, "--pages", "N", "pages of each role's pool (sets both below)", null,
            (b, v) -> b.pages(integer("--pages", v))));
        o.add(new Option(GENERAL, "--prefill-pages", "N", "pages of the prefill pool", c -> "" + c.prefillPages(),
            (b, v) -> b.prefillPages(integer("--prefill-pages", v))));
        o.add(new Option(GENERAL, "--decode-pages", "N", "pages of the decode pool", c -> "" + c.decodePages(),
            (b, v) -> b.decodePages(integer("--decode-pages", v))));
        o.add(new Option(GENERAL, "--tokens-per-page", "N", "tokens per page of both pools", c -> "" + c.layout().tokensPerPage(),
            (b, v) -> b.tokensPerPage(integer("--tokens-per-page", v))));
        o.add(new Option(GENERAL, "--layers", "N", "KV layout: layers (FP16 throughout)", c -> "" + c.layout().layers(),
            (b, v) -> b.layers(integer("--layers", v))));
        o.add(new Option(GENERAL, "--kv-heads", "N", "KV layout: KV heads", c -> "" + c.layout().kvHeads(),
            (b, v) -> b.kvHeads(integer("--kv-heads", v))));
        o.add(new Option(GENERAL, "--head-dim", "N", "KV layout: head dimension", c -> "" + c.layout().headDim(),
            (b, v) -> b.headDim(integer("--head-dim", v))));
        o.add(new Option(GENERAL, "--request-timeout-ms", "N", "longest wait for a request's KV transfer; a router also "
            + "takes a remote decode that sends nothing for this long (between two tokens) as lost", c -> ms(c.requestTimeout()),
            (b, v) -> b.requestTimeout(millis("--request-timeout-ms", v))));
        o.add(new Option(GENERAL, "--token-delay-ms", "N", "pause per generated token, a stand-in for a model step", c -> ms(c.tokenDelay()),
            (b, v) -> b.tokenDelay(millis("--token-delay-ms", v))));
        o.add(new Option(GENERAL, "--heartbeat-ms", "N", "how often a stream waiting for its KV sends an SSE comment (keeps proxies from timing it out)", c -> ms(c.heartbeat()),
            (b, v) -> b.heartbeat(millis("--heartbeat-ms", v))));
        o.add(new Option(GENERAL, "--transfer-timeout-ms", "N", "transfer completion and drain deadlines", c -> ms(c.transferTimeout()),
            (b, v) -> b.transferTimeout(millis("--transfer-timeout-ms", v))));
        o.add(new Option(GENERAL, "--reconnect-ms", "N", "prefill's wait before reconnecting a lost link", c -> ms(c.reconnectDelay()),
            (b, v) -> b.reconnectDelay(millis("--reconnect-ms", v))));
        o.add(new Option(GENERAL, "--ucx-keepalive-ms", "N", "(ucx) how often a link checks its peer; a link torn down on the other "
            + "side while the path was cut fails this long after it heals", c -> ms(c.ucxKeepalive()),
            (b, v) -> b.ucxKeepalive(millis("--ucx-keepalive-ms", v))));
        o.add(new Option(GENERAL, "--kv-heartbeat-ms", "N", "KV links: silence before a PING to the peer; 0: none (then a link "
            + "whose peer went silent behind a cut path fails only when the transport notices)", c -> ms(c.timing().kvHeartbeat()),
            (b, v) -> b.kvHeartbeat(millis("--kv-heartbeat-ms", v))));
        o.add(new Option(GENERAL, "--kv-heartbeat-timeout-ms", "N", "KV links: silence after a PING before the link fails and "
            + "prefill reconnects", c -> ms(c.timing().kvHeartbeatTimeout()),
            (b, v) -> b.kvHeartbeatTimeout(millis("--kv-heartbeat-timeout-ms", v))));
        o.add(new Option(GENERAL, "--kv-connect-timeout-ms", "N", "(ucx, prefill) TCP connect timeout of each attempt to reach decode's "
            + "bootstrap listener; short, so an attempt retries soon after a heal", c -> ms(c.kvConnectTimeout()),
            (b, v) -> b.kvConnectTimeout(millis("--kv-connect-timeout-ms", v))));
        o.add(new Option(GENERAL, "--device", "host|cuda", "where the pools live; cuda: device 0, separate role processes, KV by CUDA IPC "
            + "over --work-dir's socket", c -> c.device().name().toLowerCase(java.util.Locale.ROOT), (b, v) -> b.device(switch (v) {
                case "host" -> ServerConfig.Device.HOST;
                case "cuda" -> ServerConfig.Device.CUDA;
                default -> throw new IllegalArgumentException("--device is host or cuda, was '" + v + "'");
            })));
        o.add(new Option(GENERAL, "--fault-rate", "P", "probability per page-write batch of an injected transfer fault",
            c -> "" + c.faults().rate(), (b, v) -> {
                final double rate;
                try {
                    rate = Double.parseDouble(v);
                } catch (NumberFormatException e) {
                    throw new IllegalArgumentException("--fault-rate needs a number in [0, 1], was '" + v + "'");
                }
                b.faults(new FaultPlan(rate, b.faults().seed()));
            }));
        o.add(new Option(GENERAL, "--seed", "N", "seed of the injected faults", c -> "" + c.faults().seed(),
            (b, v) -> b.faults(new FaultPlan(b.faults().rate(), number("--seed", v)))));
        o.add(new Option(GENERAL, "--work-dir", "DIR", "where the decode pool file and transfer socket go",
            c -> c.workDir() == null ? "a new temp dir" : c.workDir().toString(), (b, v) -> b.workDir(Path.of(v))));
        o.add(new Option(GENERAL, "--environment", "NAME", "the deployment environment the roles announce and the router expects",
            ServerConfig::environment, ServerConfig.Builder::environment));
        o.add(new Option(GENERAL, "--model", "ID", "the model id the roles announce and the router expects", ServerConfig::model,
            ServerConfig.Builder::model));
        o.add(new Option(GENERAL, "--build-tag", "TAG", "a deployment's name for this build (an image tag, a commit), announced after "
            + "the jar's version (none by default)", null, ServerConfig.Builder::buildTag));
        o.add(new Option(GENERAL, "--strict-build", null, "refuse a role or KV peer of another build (by default it is served, "
            + "logged once and shown by kvpool_peer_info and preflight)", null, (b, v) -> b.strictBuild(true)));
        o.add(new Option(GENERAL, "--clamp-context", null, "(router) advertise the smallest role's largest safe context instead of "
            + "refusing to start when a role cannot carry --context", null, (b, v) -> b.clampContext(true)));
    }

    private static void http(List<Option> o) {
        o.add(new Option(HTTP, "--max-body-bytes", "N", "larger request bodies get 413", c -> "" + c.maxBodyBytes(),
            (b, v) -> b.maxBodyBytes(integer("--max-body-bytes", v))));
        o.add(new Option(HTTP, "--max-connections", "N", "most connections open at once, 1..1000000", c -> "" + c.maxConnections(),
            (b, v) -> b.maxConnections(integer("--max-connections", v))));
        o.add(new Option(HTTP, "--max-header-bytes", "N", "largest request header fields, 1024..1048576 (431 beyond)",
            c -> "" + c.maxHeaderBytes(), (b, v) -> b.maxHeaderBytes(integer("--max-header-bytes", v))));
        o.add(new Option(HTTP, "--header-timeout-ms", "N", "the whole request head must arrive within this", c -> ms(c.headerTimeout()),
            (b, v) -> b.headerTimeout(millis("--header-timeout-ms", v))));
        o.add(new Option(HTTP, "--idle-timeout-ms", "N", "a keep-alive connection with no request in progress closes after this",
            c -> ms(c.idleTimeout()), (b, v) -> b.idleTimeout(millis("--idle-timeout-ms", v))));
        o.add(new Option(HTTP, "--stall-timeout-ms", "N", "a response whose client stops reading for this long is aborted (an answer's end gets this plus its queued bytes at 64 KiB/s)",
            c -> ms(c.stallTimeout()), (b, v) -> b.stallTimeout(millis("--stall-timeout-ms", v))));
        o.add(new Option(HTTP, "--shutdown-grace-ms", "N", "on SIGTERM or Ctrl-C, how long requests in flight may finish "
            + "before the rest are aborted (new ones get 503 server_draining)", c -> ms(c.shutdownGrace()),
            (b, v) -> b.shutdownGrace(millis("--shutdown-grace-ms", v))));
    }

    private static BiConsumer<ServerConfig.Builder, String> topology(String name) {
        return (b, v) -> b.topology(b.topology().parse(name, v));
    }

    /** @return {@code serve}'s command line: the server's options, their defaults the builder's */
    public static Cli serve() {
        return Serve.CLI;
    }

    /** Built on first use: its defaults are the {@link ServerConfig#builder()}'s, which reads {@link #ALL}. */
    private static final class Serve {
        static final Cli CLI = addTo(new Cli("usage: KvServerMain serve [options]   (./dev example [options])",
            "Runs the example server: router, prefill and decode in one JVM on host memory (the default), or one --role of them."),
            ServerConfig.builder().build(), Set.of());
    }

    /**
     * Adds the server's options to {@code cli}, in its sections, except those named in {@code except} (a command's own
     * options of the same name).
     *
     * @param defaults the configuration whose values the help shows as the defaults
     * @return {@code cli} with the server's sections
     */
    public static Cli addTo(Cli cli, ServerConfig defaults, Set<String> except) {
        final Map<String, List<Cli.Flag>> sections = new LinkedHashMap<>();
        for (Option o : ALL) {
            if (except.contains(o.name())) {
                continue;
            }
            final String shown = o.shown() == null ? null : o.shown().apply(defaults);
            final Cli.Flag f = new Cli.Flag(o.name(), o.label(), o.help() + (shown == null ? "" : " [" + shown + "]"));
            sections.computeIfAbsent(o.section(), k -> new ArrayList<>()).add(f);
        }
        Cli out = cli;
        for (Map.Entry<String, List<Cli.Flag>> s : sections.entrySet()) {
            out = out.section(s.getKey(), s.getValue());
        }
        return out;
    }

    /** @return the names of every server option */
    public static Set<String> names() {
        final Set<String> out = new java.util.LinkedHashSet<>();
        ALL.forEach(o -> out.add(o.name()));
        return out;
    }

    /**
     * Applies the server options given, in order, to {@code b}: a later one wins over an earlier one it overlaps
     * ({@code --pages} and {@code --prefill-pages}, or one given twice). Options that are not the server's are skipped.
     *
     * @return {@code b}
     * @throws IllegalArgumentException naming the option and what is wrong with its value
     */
    public static ServerConfig.Builder apply(ServerConfig.Builder b, List<Cli.Given> given) {
        final Map<String, Option> byName = new LinkedHashMap<>();
        ALL.forEach(o -> byName.put(o.name(), o));
        for (Cli.Given g : given) {
            final Option o = byName.get(g.name());
            if (o != null) {
                o.apply().accept(b, g.value());
            }
        }
        return b;
    }

    private static String ms(Duration d) {
        return Long.toString(d.toMillis());
    }

    private static Duration millis(String name, String value) {
        return Duration.ofMillis(number(name, value));
    }

    /** @throws IllegalArgumentException {@code "<name> needs a whole number, was '<value>'"}; {@code _} may group digits */
    static long number(String name, String value) {
        try {
            return Long.parseLong(value.replace("_", ""));
        } catch (NumberFormatException e) {
            throw new IllegalArgumentException(name + " needs a whole number, was '" + value + "'");
        }
    }

    private static int integer(String name, String value) {
        final long v = number(name, value);
        if (v < Integer.MIN_VALUE || v > Integer.MAX_VALUE) {
            throw new IllegalArgumentException(name + " is out of range: " + value);
        }
        return (int) v;
    }
}
