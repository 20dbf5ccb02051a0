package io.kvpool.examples.server.config;

import io.kvpool.KvLayout;
import io.kvpool.Safeguard;
import io.kvpool.examples.server.link.FaultPlan;
import io.kvpool.examples.server.link.LinkGate;
import io.kvpool.transfer.Heartbeat;
import io.kvpool.transfer.TransferSafeguard;

import java.nio.file.Path;
import java.time.Duration;
import java.util.List;
import java.util.Objects;
import java.util.Set;

/**
 * Everything the example server is started with: from a {@link #builder()} in code and tests, or from command-line
 * options with {@link #parse(String[])} ({@link ServerOptions} holds them, {@link #usage()} lists them). A few records,
 * each checked when built: where the server listens and its HTTP limits ({@link Listen}), what the pools hold
 * ({@link Capacity}), its deadlines ({@link Timing}), which roles this process runs ({@link Topology}) and the
 * safeguards switched off, for the incident replay only ({@link UnsafeSwitches}); the plain accessors
 * ({@link #port()}, {@link #heartbeat()} …) read through to them.
 *
 * @param listen      the HTTP server's address and limits
 * @param capacity    the pools and the advertised context
 * @param timing      deadlines and pauses
 * @param topology    which role(s) this process runs and where the others are ({@code --role} and friends; one JVM by default)
 * @param switches    the safeguards switched off ({@code --unsafe-…}; none by default)
 * @param device      where the pools live ({@code --device host|cuda}, default host)
 * @param faults      the transfer faults to inject ({@code --fault-rate}, {@code --seed}; none by default)
 * @param workDir     where the decode pool's file and the transfer socket go, or {@code null} for a fresh temp dir
 *                    ({@code --work-dir})
 * @param deployment  what each role announces and the router expects: environment, model, build
 *                    ({@code --environment}, {@code --model}, {@code --build-tag}, {@code --strict-build})
 * @param gate        the test hook holding prefill's page writes, or {@code null} (never set from the command line)
 */
public record ServerConfig(Listen listen, Capacity capacity, Timing timing, Topology topology, UnsafeSwitches switches, Device device,
                           FaultPlan faults, Path workDir, Deployment deployment, LinkGate gate) {

    /** Where the pools live. */
    public enum Device {
        /** Host memory (the default; no GPU needed). */
        HOST,
        /** GPU memory through kvpool-cuda. */
        CUDA
    }

    /** Pages one KV transfer descriptor carries: a prompt needing more can never be transferred. */
    public static final int MAX_PAGES_PER_TRANSFER = Capacity.MAX_PAGES_PER_TRANSFER;
    /** The environment both roles announce unless {@code --environment} names another. */
    public static final String DEFAULT_ENVIRONMENT = Deployment.DEFAULT_ENVIRONMENT;

    /** @throws IllegalArgumentException for roles, transport and device that do not go together */
    public ServerConfig {
        Objects.requireNonNull(listen, "listen");
        Objects.requireNonNull(capacity, "capacity");
        Objects.requireNonNull(timing, "timing");
        Objects.requireNonNull(topology, "topology");
        Objects.requireNonNull(switches, "switches");
        Objects.requireNonNull(device, "device");
        Objects.requireNonNull(faults, "faults");
        Objects.requireNonNull(deployment, "deployment");
        checkTopology(topology, device, workDir);
        if (capacity.clampContext() && topology.role() != Topology.Role.ROUTER) {
            // it changes what a router of role processes advertises; pools of this process refuse a context they cannot
            // hold whatever it says, so taking it here would only look like a setting that did nothing
            throw new IllegalArgumentException("--clamp-context is for --role router (a router of role processes); with --role "
                + topology.role().flag() + " the pools are built here and refuse a --context they cannot hold: lower --context, "
                + "or give them more --pages");
        }
    }

    private static void checkTopology(Topology t, Device device, Path workDir) {
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

    /** @return a builder with the defaults (those {@link #usage()} shows) */
    public static Builder builder() {
        return new Builder();
    }

    /** @return a builder holding this configuration */
    public Builder toBuilder() {
        final Builder b = new Builder();
        b.host = listen.host();
        b.port = listen.port();
        b.maxBodyBytes = listen.maxBodyBytes();
        b.maxConnections = listen.maxConnections();
        b.headerTimeout = listen.headerTimeout();
        b.idleTimeout = listen.idleTimeout();
        b.maxHeaderBytes = listen.maxHeaderBytes();
        b.stallTimeout = listen.stallTimeout();
        b.shutdownGrace = listen.shutdownGrace();
        b.contextTokens = capacity.contextTokens();
        b.prefillPages = capacity.prefillPages();
        b.decodePages = capacity.decodePages();
        b.tokensPerPage = capacity.tokensPerPage();
        b.layers = capacity.layers();
        b.kvHeads = capacity.kvHeads();
        b.headDim = capacity.headDim();
        b.clampContext = capacity.clampContext();
        b.requestTimeout = timing.requestTimeout();
        b.tokenDelay = timing.tokenDelay();
        b.heartbeat = timing.heartbeat();
        b.transferTimeout = timing.transferTimeout();
        b.reconnectDelay = timing.reconnectDelay();
        b.ucxKeepalive = timing.ucxKeepalive();
        b.kvConnectTimeout = timing.kvConnectTimeout();
        b.kvHeartbeat = timing.kvHeartbeat();
        b.kvHeartbeatTimeout = timing.kvHeartbeatTimeout();
        b.topology = topology;
        b.unsafe = switches;
        b.device = device;
        b.faults = faults;
        b.workDir = workDir;
        b.deployment = deployment;
        b.gate = gate;
        return b;
    }

    // ---- the plain accessors: each reads one value of the records above ----

    /** @return the address the HTTP server binds ({@code --host}, default 127.0.0.1) */
    public String host() {
        return listen.host();
    }

    /** @return the HTTP port; 0 picks a free one ({@code --port}, default 8080) */
    public int port() {
        return listen.port();
    }

    /** @return the largest request body accepted ({@code --max-body-bytes}, default 1 MiB); larger gets 413 */
    public int maxBodyBytes() {
        return listen.maxBodyBytes();
    }

    /** @return the most HTTP connections open at once ({@code --max-connections}, default 1024) */
    public int maxConnections() {
        return listen.maxConnections();
    }

    /** @return how long the whole request head may take to arrive ({@code --header-timeout-ms}, default 10 s) */
    public Duration headerTimeout() {
        return listen.headerTimeout();
    }

    /** @return how long a keep-alive connection with no request in progress stays open ({@code --idle-timeout-ms}, default 60 s) */
    public Duration idleTimeout() {
        return listen.idleTimeout();
    }

    /** @return the largest request header fields, the request line apart ({@code --max-header-bytes}, default 16 KiB) */
    public int maxHeaderBytes() {
        return listen.maxHeaderBytes();
    }

    /** @return how long a response may wait for a client that stopped reading before it is aborted ({@code --stall-timeout-ms}, default 10 s) */
    public Duration stallTimeout() {
        return listen.stallTimeout();
    }

    /**
     * @return how long {@link KvServer#shutdown} lets the requests in flight finish before it aborts the rest
     *         ({@code --shutdown-grace-ms}, default 10 s)
     */
    public Duration shutdownGrace() {
        return listen.shutdownGrace();
    }

    /** @return the advertised max context, prompt + max_tokens ({@code --context}, default 4096) */
    public long contextTokens() {
        return capacity.contextTokens();
    }

    /** @return pages of the prefill pool ({@code --prefill-pages} or {@code --pages}, default 512) */
    public int prefillPages() {
        return capacity.prefillPages();
    }

    /** @return pages of the decode pool ({@code --decode-pages} or {@code --pages}, default 1024) */
    public int decodePages() {
        return capacity.decodePages();
    }

    /** @return the KV layout of both pools: layers × kv heads × head dim × FP16, tokens per page */
    public KvLayout layout() {
        return capacity.layout();
    }

    /**
     * @return whether a router whose roles cannot carry its {@code --context} advertises the smallest role's largest
     *         safe context instead of refusing to start ({@code --clamp-context}; off by default)
     */
    public boolean clampContext() {
        return capacity.clampContext();
    }

    /** @return the deployment environment every role announces and the router expects ({@code --environment}, default "example") */
    public String environment() {
        return deployment.environment();
    }

    /** @return the model id every role announces and the router expects ({@code --model}, default "kvpool-echo@1") */
    public String model() {
        return deployment.model();
    }

    /** @return the build this process announces: the jar's, with {@code --build-tag} after a {@code +} */
    public String build() {
        return deployment.build();
    }

    /** @return whether a role or KV peer of another build is refused ({@code --strict-build}; off by default: served and shown) */
    public boolean strictBuild() {
        return deployment.strictBuild();
    }

    /**
     * @return how long a request may wait for its KV transfer ({@code --request-timeout-ms}, default 30 s); a router also
     *         takes a decode process that sends nothing for this long, between two of a stream's tokens, as lost
     */
    public Duration requestTimeout() {
        return timing.requestTimeout();
    }

    /** @return the pause after each generated token, standing in for a model step ({@code --token-delay-ms}, default 20 ms) */
    public Duration tokenDelay() {
        return timing.tokenDelay();
    }

    /** @return how often a streaming response that waits writes an SSE comment, noticing a gone client ({@code --heartbeat-ms}, default 200 ms) */
    public Duration heartbeat() {
        return timing.heartbeat();
    }

    /** @return the transfer's completion and drain deadlines ({@code --transfer-timeout-ms}, default 10 s) */
    public Duration transferTimeout() {
        return timing.transferTimeout();
    }

    /**
     * @return how often a UCX link's endpoints check their peer ({@code --ucx-keepalive-ms}, default 250 ms; UCX's own
     *         default is 20 s): a link torn down on the other side while the path was cut fails about this long after
     *         the path heals
     */
    public Duration ucxKeepalive() {
        return timing.ucxKeepalive();
    }

    /**
     * @return how long prefill's TCP connect to decode's UCX bootstrap listener may take ({@code --kv-connect-timeout-ms},
     *         default 300 ms): short, so that an attempt made while the path is cut gives up and the next one, after
     *         {@link #reconnectDelay()}, sends a fresh SYN as soon as the path heals
     */
    public Duration kvConnectTimeout() {
        return timing.kvConnectTimeout();
    }

    /**
     * @return the KV links' heartbeat ({@code --kv-heartbeat-ms}, default 1 s of silence before a PING, 0 for none;
     *         {@code --kv-heartbeat-timeout-ms}, default 3 s more before the link fails): a link whose peer went silent
     *         behind a cut path fails while the cut lasts, so prefill is already reconnecting when it heals
     */
    public Heartbeat kvHeartbeat() {
        return timing.kvHeartbeat().isZero() ? Heartbeat.OFF
            : Heartbeat.every(timing.kvHeartbeat(), timing.kvHeartbeatTimeout());
    }

    /** @return how long prefill waits before reconnecting a lost link ({@code --reconnect-ms}, default 200 ms) */
    public Duration reconnectDelay() {
        return timing.reconnectDelay();
    }

    /** @return the pool safeguards switched off ({@code --unsafe-…}; empty by default) */
    public Set<Safeguard> unsafePool() {
        return switches.pool();
    }

    /** @return the transfer safeguards switched off ({@code --unsafe-…}; empty by default) */
    public Set<TransferSafeguard> unsafeTransfer() {
        return switches.transfer();
    }

    /** @return whether over-capacity requests become one-token placeholders ({@code --unsafe-placeholder-on-overflow}) */
    public boolean unsafePlaceholderOnOverflow() {
        return switches.placeholderOnOverflow();
    }

    /** @return whether any safeguard is off */
    public boolean unsafe() {
        return switches.any();
    }

    /** @return the {@code --unsafe-…} switches in effect, as flags */
    public List<String> unsafeSwitches() {
        return switches.flags();
    }

    /** Prints {@link UnsafeSwitches#printBanner the banner} of a server with safeguards off; nothing when every one is on. */
    public void printUnsafeBanner(java.io.PrintStream err) {
        switches.printBanner(err);
    }

    @Override
    public String toString() {
        return "ServerConfig[" + host() + ":" + port() + ", context " + contextTokens() + " tokens, prefill " + prefillPages()
            + " pages, decode " + decodePages() + " pages of " + layout() + ", device " + device
            + (faults.active() ? ", faults " + faults : "") + (unsafe() ? ", UNSAFE " + unsafeSwitches() : "")
            + (topology.role() == Topology.Role.ALL ? "" : ", role " + topology.role().flag() + " over " + topology.transport()) + "]";
    }

    // ---- command line ----

    /** @return {@code serve}'s help: every option {@link #parse} accepts, with its default */
    public static String usage() {
        return ServerOptions.serve().usage();
    }

    /**
     * Parses command-line options ({@code --name value} or {@code --name=value}; see {@link #usage()}), applied in the
     * order given onto the {@link #builder()}'s defaults.
     *
     * @throws IllegalArgumentException naming the option and what is wrong with it
     */
    public static ServerConfig parse(String... args) {
        final Cli.Parsed p = ServerOptions.serve().parse(args);
        if (p.help()) {
            throw new IllegalArgumentException("--help asks for the usage, not a configuration");
        }
        return ServerOptions.apply(builder(), p.given()).build();
    }

    /** Builds a {@link ServerConfig}; every setter returns the builder. */
    public static final class Builder {
        private String host = "127.0.0.1";
        private int port = 8080;
        private int maxBodyBytes = 1 << 20;
        private int maxConnections = 1024;
        private Duration headerTimeout = Duration.ofSeconds(10);
        private Duration idleTimeout = Duration.ofSeconds(60);
        private int maxHeaderBytes = 16 * 1024;
        private Duration stallTimeout = Duration.ofSeconds(10);
        private Duration shutdownGrace = Duration.ofSeconds(10);
        private long contextTokens = 4096;
        private int prefillPages = 512;
        private int decodePages = 1024;
        private int tokensPerPage = 16;
        private int layers = 4;
        private int kvHeads = 2;
        private int headDim = 32;
        private boolean clampContext;
        private Duration requestTimeout = Duration.ofSeconds(30);
        private Duration tokenDelay = Duration.ofMillis(20);
        private Duration heartbeat = Duration.ofMillis(200);
        private Duration transferTimeout = Duration.ofSeconds(10);
        private Duration reconnectDelay = Duration.ofMillis(200);
        private Duration ucxKeepalive = Duration.ofMillis(250);
        private Duration kvConnectTimeout = Duration.ofMillis(300);
        private Duration kvHeartbeat = Heartbeat.DEFAULT.idle();
        private Duration kvHeartbeatTimeout = Heartbeat.DEFAULT.timeout();
        private Topology topology = Topology.DEFAULT;
        private UnsafeSwitches unsafe = UnsafeSwitches.NONE;
        private Device device = Device.HOST;
        private FaultPlan faults = FaultPlan.NONE;
        private Path workDir;
        private Deployment deployment = Deployment.DEFAULT;
        private LinkGate gate;

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

        /** Sets {@link ServerConfig#maxBodyBytes()}. */
        public Builder maxBodyBytes(int n) {
            this.maxBodyBytes = n;
            return this;
        }

        /** Sets {@link ServerConfig#maxConnections()}. */
        public Builder maxConnections(int n) {
            this.maxConnections = n;
            return this;
        }

        /** Sets {@link ServerConfig#headerTimeout()}. */
        public Builder headerTimeout(Duration d) {
            this.headerTimeout = d;
            return this;
        }

        /** Sets {@link ServerConfig#idleTimeout()}. */
        public Builder idleTimeout(Duration d) {
            this.idleTimeout = d;
            return this;
        }

        /** Sets {@link ServerConfig#maxHeaderBytes()}. */
        public Builder maxHeaderBytes(int n) {
            this.maxHeaderBytes = n;
            return this;
        }

        /** Sets {@link ServerConfig#stallTimeout()}. */
        public Builder stallTimeout(Duration d) {
            this.stallTimeout = d;
            return this;
        }

        /** Sets {@link ServerConfig#shutdownGrace()}. */
        public Builder shutdownGrace(Duration d) {
            this.shutdownGrace = d;
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

        /** Sets {@link ServerConfig#clampContext()}. */
        public Builder clampContext(boolean on) {
            this.clampContext = on;
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

        /** Sets the silence before a KV link's PING, {@link ServerConfig#kvHeartbeat()}; zero for none. */
        public Builder kvHeartbeat(Duration d) {
            this.kvHeartbeat = d;
            return this;
        }

        /** Sets the silence after a KV link's PING before it fails, {@link ServerConfig#kvHeartbeat()}. */
        public Builder kvHeartbeatTimeout(Duration d) {
            this.kvHeartbeatTimeout = d;
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

        /** Sets {@link ServerConfig#switches()} (incident replay only). */
        public Builder unsafe(UnsafeSwitches s) {
            this.unsafe = Objects.requireNonNull(s, "switches");
            return this;
        }

        /** @return the switches set so far */
        UnsafeSwitches unsafe() {
            return unsafe;
        }

        /** Turns pool safeguards off (incident replay only). */
        public Builder unsafeDisable(Safeguard... s) {
            return unsafe(unsafe.off(s));
        }

        /** Turns transfer safeguards off (incident replay only). */
        public Builder unsafeDisable(TransferSafeguard... s) {
            return unsafe(unsafe.off(s));
        }

        /** The incident's placeholder: see {@link UnsafeSwitches}. */
        public Builder unsafePlaceholderOnOverflow(boolean on) {
            return unsafe(new UnsafeSwitches(unsafe.pool(), unsafe.transfer(), on));
        }

        /** Sets {@link ServerConfig#faults()}. */
        public Builder faults(FaultPlan f) {
            this.faults = f;
            return this;
        }

        /** @return the fault plan set so far */
        FaultPlan faults() {
            return faults;
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
            this.deployment = new Deployment(name, deployment.model(), deployment.buildTag(), deployment.strictBuild());
            return this;
        }

        /** Sets {@link ServerConfig#model()}. */
        public Builder model(String id) {
            this.deployment = new Deployment(deployment.environment(), id, deployment.buildTag(), deployment.strictBuild());
            return this;
        }

        /** Sets the build tag of {@link ServerConfig#build()}. */
        public Builder buildTag(String tag) {
            this.deployment = new Deployment(deployment.environment(), deployment.model(), tag, deployment.strictBuild());
            return this;
        }

        /** Sets {@link ServerConfig#strictBuild()}. */
        public Builder strictBuild(boolean on) {
            this.deployment = new Deployment(deployment.environment(), deployment.model(), deployment.buildTag(), on);
            return this;
        }

        /** Sets {@link ServerConfig#topology()}. */
        public Builder topology(Topology t) {
            this.topology = t;
            return this;
        }

        /** @return the topology set so far */
        Topology topology() {
            return topology;
        }

        /** Sets the role of {@link ServerConfig#topology()}. */
        public Builder role(Topology.Role role) {
            this.topology = topology.withRole(role);
            return this;
        }

        /** @throws IllegalArgumentException naming the first bad value, with its range and the value */
        public ServerConfig build() {
            return new ServerConfig(new Listen(host, port, maxBodyBytes, maxConnections, headerTimeout, idleTimeout, maxHeaderBytes, stallTimeout, shutdownGrace),
                new Capacity(contextTokens, prefillPages, decodePages, tokensPerPage, layers, kvHeads, headDim, clampContext),
                new Timing(requestTimeout, tokenDelay, heartbeat, transferTimeout, reconnectDelay, ucxKeepalive, kvConnectTimeout, kvHeartbeat,
                    kvHeartbeatTimeout),
                topology, unsafe, device, faults, workDir, deployment, gate);
        }
    }
}
