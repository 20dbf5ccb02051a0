package io.kvpool.examples.server;

import io.kvpool.PoolCapacityException;
import io.kvpool.examples.server.config.Cli;
import io.kvpool.examples.server.config.ServerConfig;
import io.kvpool.examples.server.config.ServerOptions;
import io.kvpool.examples.server.config.Topology;

import java.io.PrintStream;

/** {@code serve}: starts the server and runs until interrupted (Ctrl-C closes it cleanly). */
final class ServeCommand implements Subcommand {

    /** After a pool's capacity refusal: the library's message names its API; this is what the server's flags can do. */
    private static final String CAPACITY_HINT =
        "  this server: lower --context, or give the pools more pages (--pages, --prefill-pages, --decode-pages)";

    private static final Cli CLI = ServerOptions.serve();

    @Override
    public String summary() {
        return "run the server: router, prefill and decode in one JVM on host memory (the default), or one --role of them";
    }

    @Override
    public int run(String[] args, PrintStream out, PrintStream err) throws Exception {
        final ServerConfig config;
        try {
            final Cli.Parsed p = CLI.parse(args);
            if (p.help()) {
                out.print(CLI.usage());
                return 0;
            }
            config = ServerOptions.apply(ServerConfig.builder(), p.given()).build();
        } catch (IllegalArgumentException e) {
            err.println("error: " + e.getMessage());
            err.print(CLI.usage());
            return 2;
        }
        config.printUnsafeBanner(err); // prints only when a safeguard is off
        if (config.topology().isRoleProcess()) {
            return serveRole(config, out, err);
        }
        final KvServer server;
        try {
            server = KvServer.start(config);
        } catch (PoolCapacityException e) {
            err.println("refusing to start: " + e.getMessage());
            err.println(CAPACITY_HINT);
            return 1;
        } catch (IllegalArgumentException | IllegalStateException | java.io.UncheckedIOException e) {
            err.println("refusing to start: " + e.getMessage());
            return 1;
        }
        Runtime.getRuntime().addShutdownHook(new Thread(() -> server.shutdown(config.shutdownGrace()), "kvpool-shutdown"));
        banner(server, out);
        server.awaitClose();
        return 0;
    }

    /** {@code --role prefill|decode}: the role's own process, serving the router's internal calls. */
    private static int serveRole(ServerConfig config, PrintStream out, PrintStream err) throws InterruptedException {
        final String exposed = RoleServer.exposureWarning(config.host());
        if (exposed != null) {
            err.println(exposed); // before anything starts: a role that fails to start was still asked to listen there
            err.flush();
        }
        final RoleServer role;
        try {
            role = RoleServer.start(config);
        } catch (RuntimeException e) { // capacity, configuration, port, work directory, UCX unavailable ...
            err.println("refusing to start: " + e.getMessage());
            if (e instanceof PoolCapacityException) {
                err.println(CAPACITY_HINT);
            }
            return 1;
        }
        Runtime.getRuntime().addShutdownHook(new Thread(() -> role.shutdown(config.shutdownGrace()), "kvpool-shutdown"));
        final Topology.Role r = config.topology().role();
        // the first line is what scripts and tests read: the role, its URL, its KV link
        out.println("kvpool " + r.flag() + " role on " + role.baseUri() + " (KV " + role.kvLink() + ")");
        out.println("  " + (r == Topology.Role.PREFILL ? "prefill pool " + config.prefillPages() : "decode pool " + config.decodePages())
            + " pages of " + config.layout() + ", advertised context " + config.contextTokens() + " tokens");
        out.println("  the router reaches it with --" + r.flag() + "-url " + role.baseUri() + "; its metrics: " + role.baseUri() + "metrics");
        out.println("  Ctrl-C stops it.");
        out.flush();
        role.awaitClose();
        return 0;
    }

    static void banner(KvServer server, PrintStream out) {
        final ServerConfig c = server.config();
        final Topology t = c.topology();
        out.println("kvpool example server on " + server.baseUri() + (t.role() == Topology.Role.ROUTER
            ? "  (router; prefill at " + t.prefillUrl() + ", decode at " + t.decodeUrl() + ")"
            : "  (router + prefill + decode in one JVM, host memory, KV over the shared-memory transfer protocol)"));
        out.println("  advertised context " + c.contextTokens() + " tokens" + (t.role() == Topology.Role.ROUTER
            ? " (give the roles the same --context)"
            : "; prefill pool " + c.prefillPages() + " pages, decode pool " + c.decodePages() + " pages of " + c.layout()));
        out.println("  live page:   " + server.baseUri());
        out.println("  metrics:     " + server.baseUri() + "metrics");
        out.println("  completion:  curl -s " + server.baseUri() + "v1/completions -H 'Authorization: Bearer sk-alice' \\");
        out.println("                 -d '{\"prompt\":\"Hello from alice\",\"max_tokens\":8}'");
        out.println("  Ctrl-C stops it.");
    }
}
