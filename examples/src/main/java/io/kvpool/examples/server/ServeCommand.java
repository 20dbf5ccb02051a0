package io.kvpool.examples.server;

import io.kvpool.PoolCapacityException;

import java.io.PrintStream;

/** {@code serve}: starts the server and runs until interrupted (Ctrl-C closes it cleanly). */
final class ServeCommand implements Subcommand {

    @Override
    public String summary() {
        return "run the server: router, prefill and decode in one JVM on host memory (the default)";
    }

    @Override
    public int run(String[] args, PrintStream out, PrintStream err) throws Exception {
        if (args.length > 0 && (args[0].equals("--help") || args[0].equals("-h"))) {
            out.println("usage: KvServerMain serve [options]");
            out.print(ServerConfig.usage());
            return 0;
        }
        final ServerConfig config;
        try {
            config = ServerConfig.parse(args);
        } catch (IllegalArgumentException e) {
            err.println("error: " + e.getMessage());
            err.print(ServerConfig.usage());
            return 2;
        }
        if (config.unsafe()) {
            warnUnsafe(config, err);
        }
        final KvServer server;
        try {
            server = KvServer.start(config);
        } catch (PoolCapacityException e) {
            err.println("refusing to start: " + e.getMessage());
            return 1;
        } catch (IllegalArgumentException | IllegalStateException | java.io.UncheckedIOException e) {
            err.println("refusing to start: " + e.getMessage());
            return 1;
        }
        Runtime.getRuntime().addShutdownHook(new Thread(server::close, "kvpool-shutdown"));
        banner(server, out);
        server.awaitClose();
        return 0;
    }

    static void warnUnsafe(ServerConfig config, PrintStream err) {
        final String line = "!".repeat(100);
        err.println(line);
        err.println("!!! UNSAFE: safeguards switched OFF: " + String.join(" ", config.unsafeSwitches()));
        err.println("!!! This server can answer one tenant with another tenant's data (the 2026 incident).");
        err.println("!!! For the incident replay only. Never run it like this for anything else.");
        err.println(line);
    }

    static void banner(KvServer server, PrintStream out) {
        final ServerConfig c = server.config();
        out.println("kvpool example server on " + server.baseUri()
            + "  (router + prefill + decode in one JVM, host memory, KV over the shared-memory transfer protocol)");
        out.println("  advertised context " + c.contextTokens() + " tokens; prefill pool " + c.prefillPages() + " pages, decode pool "
            + c.decodePages() + " pages of " + c.layout());
        out.println("  live page:   " + server.baseUri());
        out.println("  metrics:     " + server.baseUri() + "metrics");
        out.println("  completion:  curl -s " + server.baseUri() + "v1/completions -H 'Authorization: Bearer sk-alice' \\");
        out.println("                 -d '{\"prompt\":\"Hello from alice\",\"max_tokens\":8}'");
        out.println("  Ctrl-C stops it.");
    }
}
