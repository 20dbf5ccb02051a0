package io.kvpool.examples.server;

import io.kvpool.DType;
import io.kvpool.KvLayout;
import io.kvpool.Safeguard;
import io.kvpool.transfer.TransferSafeguard;

import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Collections;
import java.util.EnumSet;
import java.util.List;
import java.util.Locale;
import java.util.Objects;
import java.util.Set;

/**
 * Everything the example server is started with: from a {@link #builder()} in code and tests, or from
 * command-line flags with {@link #parse(String[])} ({@link #usage()} lists them). Immutable.
 *
 * <h2>Safeguard switches (for the incident replay only)</h2>
 * {@code --unsafe-<name>} turns one safeguard <em>off</em>: the pool's {@link Safeguard}s
 * ({@code generation-check}, {@code free-page-fill}, {@code admission-rejection}) on both pools, the
 * transfer's {@link TransferSafeguard}s ({@code drain-wait}, {@code quarantine-on-timeout},
 * {@code length-check}, {@code canary-check}, {@code checksum}) on the decode side. And
 * {@code --unsafe-placeholder-on-overflow} reproduces the 2026 incident's mechanism: the prefill pool may
 * be smaller than the advertised context (the startup check only warns), and a request it cannot hold is
 * not rejected but becomes a one-token placeholder transfer while decode is told the full length.
 * {@code --unsafe-incident} is all of the incident's: the placeholder, and free-page fill, length check,
 * canary check and checksum off. With any of them the server prints a loud warning at startup.
 */
public final class ServerConfig {

    /** Where the pools live. */
    public enum Device {
        /** Host memory (the default; no GPU needed). */
        HOST,
        /** GPU memory through kvpool-cuda (issue #4). */
        CUDA
    }

    /** The 2026 incident's pool-side switches. */
    public static final Set<Safeguard> INCIDENT_POOL = Collections.unmodifiableSet(EnumSet.of(Safeguard.FREE_PAGE_FILL));
    /** The 2026 incident's transfer-side switches. */
    public static final Set<TransferSafeguard> INCIDENT_TRANSFER = Collections.unmodifiableSet(
        EnumSet.of(TransferSafeguard.LENGTH_CHECK, TransferSafeguard.CANARY_CHECK, TransferSafeguard.CHECKSUM));

    private final String host;
    private final int port;
    private final long contextTokens;
    private final int prefillPages;
    private final int decodePages;
    private final int tokensPerPage;
    private final int layers;
    private final int kvHeads;
    private final int headDim;
    private final int maxBodyBytes;
    private final Duration requestTimeout;
    private final Duration tokenDelay;
    private final Duration heartbeat;
    private final Duration transferTimeout;
    private final Duration reconnectDelay;
    private final Duration ucxKeepalive;
    private final Duration kvConnectTimeout;
    private final Device device;
    private final Set<Safeguard> unsafePool;
    private final Set<TransferSafeguard> unsafeTransfer;
    private final boolean unsafePlaceholderOnOverflow;
    private final FaultPlan faults;
    private final LinkGate gate;
    private final Path workDir;
    private final Topology topology;
    private final String environment;
    private final boolean clampContext;

    private ServerConfig(Builder b) {
        host = Objects.requireNonNull(b.host, "host");
        port = range("port", b.port, 0, 65_535);
        contextTokens = range("context", b.contextTokens, 1, Integer.MAX_VALUE);
        prefillPages = range("prefill pages", b.prefillPages, 1, 1 << 24);
        decodePages = range("decode pages", b.decodePages, 1, 1 << 24);
        tokensPerPage = range("tokens per page", b.tokensPerPage, 1, 4096);
        layers = range("layers", b.layers, 1, 1024);
        kvHeads = range("kv heads", b.kvHeads, 1, 1024);
        headDim = range("head dim", b.headDim, 1, 65_536);
        maxBodyBytes = range("max body bytes", b.maxBodyBytes, 64, Integer.MAX_VALUE - 1);
        requestTimeout = positive("request timeout", b.requestTimeout);
        tokenDelay = nonNegative("token delay", b.tokenDelay);
        heartbeat = positive("heartbeat", b.heartbeat);
        transferTimeout = positive("transfer timeout", b.transferTimeout);
        reconnectDelay = positive("reconnect delay", b.reconnectDelay);
        ucxKeepalive = positive("UCX keepalive", b.ucxKeepalive);
        kvConnectTimeout = positive("KV connect timeout", b.kvConnectTimeout);
        if (ucxKeepalive.toMillis() < 10 || ucxKeepalive.compareTo(Duration.ofHours(1)) > 0) {
            throw new IllegalArgumentException("--ucx-keepalive-ms must be 10 ms to 1 hour, was " + ucxKeepalive.toMillis());
        }
        device = Objects.requireNonNull(b.device, "device");
        unsafePool = Collections.unmodifiableSet(b.unsafePool.isEmpty() ? EnumSet.noneOf(Safeguard.class) : EnumSet.copyOf(b.unsafePool));
        unsafeTransfer = Collections.unmodifiableSet(b.unsafeTransfer.isEmpty()
            ? EnumSet.noneOf(TransferSafeguard.class) : EnumSet.copyOf(b.unsafeTransfer));
        unsafePlaceholderOnOverflow = b.unsafePlaceholderOnOverflow;
        faults = Objects.requireNonNull(b.faults, "faults");
        gate = b.gate;
        workDir = b.workDir;
        topology = Objects.requireNonNull(b.topology, "topology");
        environment = Objects.requireNonNull(b.environment, "environment");
        if (!environment.matches("[A-Za-z0-9_.-]{1,64}")) {
            throw new IllegalArgumentException("--environment must be 1..64 of [A-Za-z0-9_.-], was '" + environment + "'");
        }
        clampContext = b.clampContext;
        EchoKv.requireFits(layout());
        checkDescriptor();
        checkTopology();
    }

    /** Pages one KV transfer descriptor carries: a prompt needing more can never be transferred. */
    public static final int MAX_PAGES_PER_TRANSFER = io.kvpool.transfer.wire.WireFormat.MAX_ARRAY;

    /**
     * The advertised context must fit one transfer descriptor: a prompt of up to {@link #contextTokens()} tokens
     * is admitted, and one that needs more than {@link #MAX_PAGES_PER_TRANSFER} pages could never move from prefill
     * to decode — refused here at startup, with both numbers and what to change, not answered 429 for ever.
     */
    private void checkDescriptor() {
        final long pages = layout().pagesFor(contextTokens);
        if (pages > MAX_PAGES_PER_TRANSFER) {
            final long carried = (long) MAX_PAGES_PER_TRANSFER * tokensPerPage;
            final long minTokensPerPage = (contextTokens + MAX_PAGES_PER_TRANSFER - 1) / MAX_PAGES_PER_TRANSFER;
            throw new IllegalArgumentException("the advertised context of " + contextTokens + " tokens needs " + pages
                + " pages of " + tokensPerPage + " token(s), but one KV transfer descriptor carries at most " + MAX_PAGES_PER_TRANSFER
                + " pages (" + carried + " tokens at " + tokensPerPage + " per page): a prompt that long could never move from "
                + "prefill to decode; lower --context to ≤ " + carried
                + (minTokensPerPage <= 4096 ? " or raise --tokens-per-page to ≥ " + minTokensPerPage : ""));
        }
    }

    private void checkTopology() {
        final Topology t = topology;
        if (t.role() == Topology.Role.ALL && t.transport() == Topology.Transport.UCX) {
            throw new IllegalArgumentException("--transport ucx needs the roles in separate processes (--role prefill, --role decode, "
                + "--role router); in one JVM prefill and decode always use the shared-memory transport");
        }
        if (device == Device.CUDA && t.role() == Topology.Role.ALL) {
            throw new IllegalArgumentException("--device cuda needs the roles in separate processes (--role decode, --role prefill, "
                + "--role router, the same --work-dir for both roles): between device pools KV moves by CUDA IPC, and a process "
                + "cannot open its own CUDA IPC handle, so prefill and decode cannot share a JVM");
        }
        if (device == Device.CUDA && t.transport() == Topology.Transport.UCX) {
            throw new IllegalArgumentException("--device cuda moves KV between the roles by CUDA IPC (one node, over --work-dir's "
                + "socket); --transport ucx is for host pools");
        }
        if (t.isRoleProcess() && (t.transport() == Topology.Transport.SHM || device == Device.CUDA) && workDir == null) {
            throw new IllegalArgumentException("--role " + t.role().flag() + (device == Device.CUDA ? " with --device cuda" : " with --transport shm")
                + " needs --work-dir DIR, the same directory for both roles: decode creates the transfer socket (and, on the host, "
                + "the pool file) there, prefill connects to them");
        }
        if (t.role() == Topology.Role.PREFILL && t.transport() == Topology.Transport.UCX && t.kvPort() == 0) {
            throw new IllegalArgumentException("--role prefill needs decode's actual --kv-address port, was " + t.kvAddress());
        }
    }

    private static int range(String name, long v, long min, long max) {
        if (v < min || v > max) {
            throw new IllegalArgumentException(name + " must be in [" + min + ", " + max + "], was " + v);
        }
        return (int) v;
    }

    private static Duration positive(String name, Duration d) {
        if (d == null || d.isNegative() || d.isZero()) {
            throw new IllegalArgumentException(name + " must be positive, was " + d);
        }
        return d;
    }

    private static Duration nonNegative(String name, Duration d) {
        if (d == null || d.isNegative()) {
            throw new IllegalArgumentException(name + " must be ≥ 0, was " + d);
        }
        return d;
    }

    /** @return a builder with the defaults (those of {@link #usage()}) */
    public static Builder builder() {
        return new Builder();
    }

    /** @return a builder holding this configuration */
    public Builder toBuilder() {
        final Builder b = new Builder();
        b.host = host;
        b.port = port;
        b.contextTokens = contextTokens;
        b.prefillPages = prefillPages;
        b.decodePages = decodePages;
        b.tokensPerPage = tokensPerPage;
        b.layers = layers;
        b.kvHeads = kvHeads;
        b.headDim = headDim;
        b.maxBodyBytes = maxBodyBytes;
        b.requestTimeout = requestTimeout;
        b.tokenDelay = tokenDelay;
        b.heartbeat = heartbeat;
        b.transferTimeout = transferTimeout;
        b.reconnectDelay = reconnectDelay;
        b.ucxKeepalive = ucxKeepalive;
        b.kvConnectTimeout = kvConnectTimeout;
        b.device = device;
        b.unsafePool = unsafePool.isEmpty() ? EnumSet.noneOf(Safeguard.class) : EnumSet.copyOf(unsafePool);
        b.unsafeTransfer = unsafeTransfer.isEmpty() ? EnumSet.noneOf(TransferSafeguard.class) : EnumSet.copyOf(unsafeTransfer);
        b.unsafePlaceholderOnOverflow = unsafePlaceholderOnOverflow;
        b.faults = faults;
        b.gate = gate;
        b.workDir = workDir;
        b.topology = topology;
        b.environment = environment;
        b.clampContext = clampContext;
        return b;
    }

    // ---- properties ----

    /** @return the address the HTTP server binds ({@code --host}, default 127.0.0.1) */
    public String host() {
        return host;
    }

    /** @return the HTTP port; 0 picks a free one ({@code --port}, default 8080) */
    public int port() {
        return port;
    }

    /** @return the advertised max context, prompt + max_tokens ({@code --context}, default 4096) */
    public long contextTokens() {
        return contextTokens;
    }

    /** @return pages of the prefill pool ({@code --prefill-pages} or {@code --pages}, default 512) */
    public int prefillPages() {
        return prefillPages;
    }

    /** @return pages of the decode pool ({@code --decode-pages} or {@code --pages}, default 1024) */
    public int decodePages() {
        return decodePages;
    }

    /** @return the KV layout of both pools: layers × kv heads × head dim × FP16, tokens per page */
    public KvLayout layout() {
        return new KvLayout(layers, kvHeads, headDim, DType.FP16, tokensPerPage);
    }

    /** @return the largest request body accepted ({@code --max-body-bytes}, default 1 MiB); larger gets 413 */
    public int maxBodyBytes() {
        return maxBodyBytes;
    }

    /** @return how long a request may wait for its KV transfer ({@code --request-timeout-ms}, default 30 s) */
    public Duration requestTimeout() {
        return requestTimeout;
    }

    /** @return the pause after each generated token, standing in for a model step ({@code --token-delay-ms}, default 20 ms) */
    public Duration tokenDelay() {
        return tokenDelay;
    }

    /** @return how often a streaming response that waits writes an SSE comment, noticing a gone client ({@code --heartbeat-ms}, default 200 ms) */
    public Duration heartbeat() {
        return heartbeat;
    }

    /** @return the transfer's completion and drain deadlines ({@code --transfer-timeout-ms}, default 10 s) */
    public Duration transferTimeout() {
        return transferTimeout;
    }

    /**
     * @return how often a UCX link's endpoints check their peer ({@code --ucx-keepalive-ms}, default 250 ms; UCX's own
     *         default is 20 s): a link torn down on the other side while the path was cut fails about this long after
     *         the path heals
     */
    public Duration ucxKeepalive() {
        return ucxKeepalive;
    }

    /**
     * @return how long prefill's TCP connect to decode's UCX bootstrap listener may take ({@code --kv-connect-timeout-ms},
     *         default 300 ms): short, so that an attempt made while the path is cut gives up and the next one, after
     *         {@link #reconnectDelay()}, sends a fresh SYN as soon as the path heals
     */
    public Duration kvConnectTimeout() {
        return kvConnectTimeout;
    }

    /** @return how long prefill waits before reconnecting a lost link ({@code --reconnect-ms}, default 200 ms) */
    public Duration reconnectDelay() {
        return reconnectDelay;
    }

    /** @return where the pools live ({@code --device host|cuda}, default host) */
    public Device device() {
        return device;
    }

    /** @return the pool safeguards switched off ({@code --unsafe-…}; empty by default) */
    public Set<Safeguard> unsafePool() {
        return unsafePool;
    }

    /** @return the transfer safeguards switched off ({@code --unsafe-…}; empty by default) */
    public Set<TransferSafeguard> unsafeTransfer() {
        return unsafeTransfer;
    }

    /** @return whether over-capacity requests become one-token placeholders ({@code --unsafe-placeholder-on-overflow}) */
    public boolean unsafePlaceholderOnOverflow() {
        return unsafePlaceholderOnOverflow;
    }

    /** @return whether any safeguard is off */
    public boolean unsafe() {
        return !unsafePool.isEmpty() || !unsafeTransfer.isEmpty() || unsafePlaceholderOnOverflow;
    }

    /** @return the {@code --unsafe-…} switches in effect, as flags */
    public List<String> unsafeSwitches() {
        final List<String> out = new ArrayList<>();
        unsafePool.forEach(s -> out.add(flag(s.name())));
        unsafeTransfer.forEach(s -> out.add(flag(s.name())));
        if (unsafePlaceholderOnOverflow) {
            out.add("--unsafe-placeholder-on-overflow");
        }
        return out;
    }

    /**
     * Prints the loud banner a server started with safeguards off must show (serve, replay and load all
     * call it); prints nothing when every safeguard is on.
     */
    public void printUnsafeBanner(java.io.PrintStream err) {
        if (!unsafe()) {
            return;
        }
        final String line = "!".repeat(100);
        err.println(line);
        err.println("!!! UNSAFE: safeguards switched OFF: " + String.join(" ", unsafeSwitches()));
        err.println("!!! This server can answer one tenant with another tenant's data (the 2026 incident).");
        err.println("!!! For the incident replay only. Never run it like this for anything else.");
        err.println(line);
    }

    /** @return the transfer faults to inject ({@code --fault-rate}, {@code --seed}; none by default) */
    public FaultPlan faults() {
        return faults;
    }

    /** @return the test hook holding prefill's page writes, or {@code null} (never set from the command line) */
    public LinkGate gate() {
        return gate;
    }

    /** @return where the decode pool's file and the transfer socket go, or {@code null} for a fresh temp dir ({@code --work-dir}) */
    public Path workDir() {
        return workDir;
    }

    /** @return which role(s) this process runs and where the others are ({@code --role} and friends; one JVM by default) */
    public Topology topology() {
        return topology;
    }

    /** @return the deployment environment each role announces and the router expects ({@code --environment}, default "example") */
    public String environment() {
        return environment;
    }

    /**
     * @return whether a router whose roles cannot carry its {@code --context} advertises the smallest role's largest
     *         safe context instead of refusing to start ({@code --clamp-context}; off by default)
     */
    public boolean clampContext() {
        return clampContext;
    }

    private static String flag(String enumName) {
        return "--unsafe-" + enumName.toLowerCase(Locale.ROOT).replace('_', '-');
    }

    @Override
    public String toString() {
        return "ServerConfig[" + host + ":" + port + ", context " + contextTokens + " tokens, prefill " + prefillPages
            + " pages, decode " + decodePages + " pages of " + layout() + ", device " + device
            + (faults.active() ? ", faults " + faults : "") + (unsafe() ? ", UNSAFE " + unsafeSwitches() : "")
            + (topology.role() == Topology.Role.ALL ? "" : ", role " + topology.role().flag() + " over " + topology.transport()) + "]";
    }

    // ---- command line ----

    /** @return the flags {@link #parse} accepts, with their defaults */
    public static String usage() {
        return OPTIONS + Topology.usage() + UNSAFE_OPTIONS;
    }

    private static final String OPTIONS = """
            options (defaults in brackets):
              --host ADDR                 address to bind [127.0.0.1]
              --port N                    HTTP port, 0 for any free one [8080]
              --context TOKENS            advertised max context, prompt + max_tokens [4096]
              --pages N                   pages of each role's pool (sets both below)
              --prefill-pages N           pages of the prefill pool [512]
              --decode-pages N            pages of the decode pool [1024]
              --tokens-per-page N         [16]
              --layers N / --kv-heads N / --head-dim N    KV layout, FP16 [4 / 2 / 32]
              --max-body-bytes N          larger request bodies get 413 [1048576]
              --request-timeout-ms N      longest wait for a request's KV transfer [30000]
              --token-delay-ms N          pause per generated token, a stand-in for a model step [20]
              --heartbeat-ms N            SSE keep-alive while a stream waits; notices gone clients [200]
              --transfer-timeout-ms N     transfer completion and drain deadlines [10000]
              --reconnect-ms N            prefill's wait before reconnecting a lost link [200]
              --ucx-keepalive-ms N        (ucx) how often a link checks its peer; a link torn down on the other
                                          side while the path was cut fails this long after it heals [250]
              --kv-connect-timeout-ms N   (ucx, prefill) TCP connect timeout of each attempt to reach decode's
                                          bootstrap listener; short, so an attempt retries soon after a heal [300]
              --device host|cuda          where the pools live [host]; cuda: device 0, separate role processes,
                                          KV by CUDA IPC over --work-dir's socket
              --fault-rate P              probability per page-write batch of an injected fault [0]
              --seed N                    seed of the injected faults [1]
              --work-dir DIR              where the decode pool file and transfer socket go [a new temp dir]
              --environment NAME          the deployment environment the roles announce and the router expects [example]
              --clamp-context             (router) advertise the smallest role's largest safe context instead of
                                          refusing to start when a role cannot carry --context
            """;

    private static final String UNSAFE_OPTIONS = """
            safeguard switches, for the incident replay only (each turns one safeguard OFF):
              --unsafe-generation-check --unsafe-free-page-fill --unsafe-admission-rejection
              --unsafe-drain-wait --unsafe-quarantine-on-timeout --unsafe-length-check
              --unsafe-canary-check --unsafe-checksum
              --unsafe-placeholder-on-overflow   an over-capacity request becomes a one-token placeholder
                                                 transfer while decode is told the full length
              --unsafe-incident                  all of the 2026 incident's: the placeholder, free-page fill,
                                                 length check, canary check and checksum
            """;

    /**
     * Parses command-line flags ({@code --name value} or {@code --name=value}; see {@link #usage()}).
     *
     * @throws IllegalArgumentException naming the flag and what is wrong with it
     */
    public static ServerConfig parse(String... args) {
        final Builder b = builder();
        for (int i = 0; i < args.length; i++) {
            String name = args[i];
            String value = null;
            final int eq = name.indexOf('=');
            if (name.startsWith("--") && eq > 0) {
                value = name.substring(eq + 1);
                name = name.substring(0, eq);
            }
            if (!name.startsWith("--")) {
                throw new IllegalArgumentException("unexpected argument '" + name + "' (flags start with --)");
            }
            if (name.equals("--clamp-context")) {
                if (value != null) {
                    throw new IllegalArgumentException(name + " takes no value");
                }
                b.clampContext(true);
                continue;
            }
            if (name.startsWith("--unsafe-")) {
                if (value != null) {
                    throw new IllegalArgumentException(name + " takes no value");
                }
                unsafe(b, name);
                continue;
            }
            if (value == null) {
                if (i + 1 >= args.length) {
                    throw new IllegalArgumentException(name + " needs a value");
                }
                value = args[++i];
            }
            switch (name) {
                case "--host" -> b.host(value);
                case "--port" -> b.port(integer(name, value));
                case "--context" -> b.contextTokens(number(name, value));
                case "--pages" -> b.pages(integer(name, value));
                case "--prefill-pages" -> b.prefillPages(integer(name, value));
                case "--decode-pages" -> b.decodePages(integer(name, value));
                case "--tokens-per-page" -> b.tokensPerPage(integer(name, value));
                case "--layers" -> b.layers(integer(name, value));
                case "--kv-heads" -> b.kvHeads(integer(name, value));
                case "--head-dim" -> b.headDim(integer(name, value));
                case "--max-body-bytes" -> b.maxBodyBytes(integer(name, value));
                case "--request-timeout-ms" -> b.requestTimeout(Duration.ofMillis(number(name, value)));
                case "--token-delay-ms" -> b.tokenDelay(Duration.ofMillis(number(name, value)));
                case "--heartbeat-ms" -> b.heartbeat(Duration.ofMillis(number(name, value)));
                case "--transfer-timeout-ms" -> b.transferTimeout(Duration.ofMillis(number(name, value)));
                case "--reconnect-ms" -> b.reconnectDelay(Duration.ofMillis(number(name, value)));
                case "--ucx-keepalive-ms" -> b.ucxKeepalive(Duration.ofMillis(number(name, value)));
                case "--kv-connect-timeout-ms" -> b.kvConnectTimeout(Duration.ofMillis(number(name, value)));
                case "--device" -> b.device(switch (value) {
                    case "host" -> Device.HOST;
                    case "cuda" -> Device.CUDA;
                    default -> throw new IllegalArgumentException("--device is host or cuda, was '" + value + "'");
                });
                case "--fault-rate" -> {
                    try {
                        b.faults(new FaultPlan(Double.parseDouble(value), b.faults.seed()));
                    } catch (NumberFormatException e) {
                        throw new IllegalArgumentException("--fault-rate needs a number in [0, 1], was '" + value + "'");
                    }
                }
                case "--seed" -> b.faults(new FaultPlan(b.faults.rate(), number(name, value)));
                case "--work-dir" -> b.workDir(Path.of(value));
                case "--environment" -> b.environment(value);
                default -> {
                    final Topology t = b.topology.parse(name, value);
                    if (t == null) {
                        throw new IllegalArgumentException("unknown option " + name);
                    }
                    b.topology(t);
                }
            }
        }
        return b.build();
    }

    private static void unsafe(Builder b, String flag) {
        final String n = flag.substring("--unsafe-".length()).toUpperCase(Locale.ROOT).replace('-', '_');
        switch (n) {
            case "PLACEHOLDER_ON_OVERFLOW" -> b.unsafePlaceholderOnOverflow(true);
            case "INCIDENT" -> {
                b.unsafePlaceholderOnOverflow(true);
                INCIDENT_POOL.forEach(b::unsafeDisable);
                INCIDENT_TRANSFER.forEach(b::unsafeDisable);
            }
            default -> {
                for (Safeguard s : Safeguard.values()) {
                    if (s.name().equals(n)) {
                        b.unsafeDisable(s);
                        return;
                    }
                }
                for (TransferSafeguard s : TransferSafeguard.values()) {
                    if (s.name().equals(n)) {
                        b.unsafeDisable(s);
                        return;
                    }
                }
                throw new IllegalArgumentException("unknown safeguard switch " + flag);
            }
        }
    }

    private static long number(String name, String value) {
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

    /** Builds a {@link ServerConfig}; every setter returns the builder. */
    public static final class Builder {
        private String host = "127.0.0.1";
        private int port = 8080;
        private long contextTokens = 4096;
        private int prefillPages = 512;
        private int decodePages = 1024;
        private int tokensPerPage = 16;
        private int layers = 4;
        private int kvHeads = 2;
        private int headDim = 32;
        private int maxBodyBytes = 1 << 20;
        private Duration requestTimeout = Duration.ofSeconds(30);
        private Duration tokenDelay = Duration.ofMillis(20);
        private Duration heartbeat = Duration.ofMillis(200);
        private Duration transferTimeout = Duration.ofSeconds(10);
        private Duration reconnectDelay = Duration.ofMillis(200);
        private Duration ucxKeepalive = Duration.ofMillis(250);
        private Duration kvConnectTimeout = Duration.ofMillis(300);
        private Device device = Device.HOST;
        private EnumSet<Safeguard> unsafePool = EnumSet.noneOf(Safeguard.class);
        private EnumSet<TransferSafeguard> unsafeTransfer = EnumSet.noneOf(TransferSafeguard.class);
        private boolean unsafePlaceholderOnOverflow;
        private FaultPlan faults = FaultPlan.NONE;
        private LinkGate gate;
        private Path workDir;
        private String environment = RoleParts.ENVIRONMENT;
        private boolean clampContext;
        private Topology topology = Topology.DEFAULT;

        private Builder() {
        }

        /** Sets {@link ServerConfig#host()}. */
        public Builder host(String host) {
            this.host = host;
            return this;
        }

        /** Sets {@link ServerConfig#port()}. */
        public Builder port(int port) {
            this.port = port;
            return this;
        }

        /** Sets {@link ServerConfig#contextTokens()}. */
        public Builder contextTokens(long tokens) {
            this.contextTokens = tokens;
            return this;
        }

        /** Sets both pools' pages. */
        public Builder pages(int pages) {
            this.prefillPages = pages;
            this.decodePages = pages;
            return this;
        }

        /** Sets {@link ServerConfig#prefillPages()}. */
        public Builder prefillPages(int pages) {
            this.prefillPages = pages;
            return this;
        }

        /** Sets {@link ServerConfig#decodePages()}. */
        public Builder decodePages(int pages) {
            this.decodePages = pages;
            return this;
        }

        /** Sets {@link ServerConfig#layout()}. */
        public Builder tokensPerPage(int n) {
            this.tokensPerPage = n;
            return this;
        }

        /** Sets {@link ServerConfig#layout()}. */
        public Builder layers(int n) {
            this.layers = n;
            return this;
        }

        /** Sets {@link ServerConfig#layout()}. */
        public Builder kvHeads(int n) {
            this.kvHeads = n;
            return this;
        }

        /** Sets {@link ServerConfig#layout()}. */
        public Builder headDim(int n) {
            this.headDim = n;
            return this;
        }

        /** Sets {@link ServerConfig#maxBodyBytes()}. */
        public Builder maxBodyBytes(int n) {
            this.maxBodyBytes = n;
            return this;
        }

        /** Sets {@link ServerConfig#requestTimeout()}. */
        public Builder requestTimeout(Duration d) {
            this.requestTimeout = d;
            return this;
        }

        /** Sets {@link ServerConfig#tokenDelay()}. */
        public Builder tokenDelay(Duration d) {
            this.tokenDelay = d;
            return this;
        }

        /** Sets {@link ServerConfig#heartbeat()}. */
        public Builder heartbeat(Duration d) {
            this.heartbeat = d;
            return this;
        }

        /** Sets {@link ServerConfig#transferTimeout()}. */
        public Builder transferTimeout(Duration d) {
            this.transferTimeout = d;
            return this;
        }

        /** Sets {@link ServerConfig#kvConnectTimeout()}. */
        public Builder kvConnectTimeout(Duration d) {
            this.kvConnectTimeout = d;
            return this;
        }

        /** Sets {@link ServerConfig#ucxKeepalive()}. */
        public Builder ucxKeepalive(Duration d) {
            this.ucxKeepalive = d;
            return this;
        }

        /** Sets {@link ServerConfig#reconnectDelay()}. */
        public Builder reconnectDelay(Duration d) {
            this.reconnectDelay = d;
            return this;
        }

        /** Sets {@link ServerConfig#device()}. */
        public Builder device(Device d) {
            this.device = d;
            return this;
        }

        /** Turns pool safeguards off (incident replay only). */
        public Builder unsafeDisable(Safeguard... s) {
            unsafePool.addAll(List.of(s));
            return this;
        }

        /** Turns transfer safeguards off (incident replay only). */
        public Builder unsafeDisable(TransferSafeguard... s) {
            unsafeTransfer.addAll(List.of(s));
            return this;
        }

        /** The incident's placeholder: see {@link ServerConfig}. */
        public Builder unsafePlaceholderOnOverflow(boolean on) {
            this.unsafePlaceholderOnOverflow = on;
            return this;
        }

        /** Sets {@link ServerConfig#faults()}. */
        public Builder faults(FaultPlan f) {
            this.faults = f;
            return this;
        }

        /** <b>Test hook</b>: holds prefill's page writes while the gate is closed. */
        public Builder gate(LinkGate gate) {
            this.gate = gate;
            return this;
        }

        /** Sets {@link ServerConfig#workDir()}. */
        public Builder workDir(Path dir) {
            this.workDir = dir;
            return this;
        }

        /** Sets {@link ServerConfig#environment()}. */
        public Builder environment(String name) {
            this.environment = name;
            return this;
        }

        /** Sets {@link ServerConfig#clampContext()}. */
        public Builder clampContext(boolean on) {
            this.clampContext = on;
            return this;
        }

        /** Sets {@link ServerConfig#topology()}. */
        public Builder topology(Topology t) {
            this.topology = t;
            return this;
        }

        /** Sets the role of {@link ServerConfig#topology()}. */
        public Builder role(Topology.Role role) {
            this.topology = topology.withRole(role);
            return this;
        }

        /** @throws IllegalArgumentException naming the first bad value */
        public ServerConfig build() {
            return new ServerConfig(this);
        }
    }
}
