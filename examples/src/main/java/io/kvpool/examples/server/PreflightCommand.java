package io.kvpool.examples.server;

import com.fasterxml.jackson.databind.ObjectMapper;
import io.kvpool.examples.server.api.Json;
import io.kvpool.examples.server.config.Cli;
import io.kvpool.examples.server.config.ServerConfig;
import io.kvpool.examples.server.config.ServerOptions;
import io.kvpool.examples.server.remote.Preflight;
import io.kvpool.examples.server.remote.RemoteStatus;
import io.kvpool.examples.server.remote.RoleClient;
import io.kvpool.examples.server.role.DecodeRole;
import io.kvpool.examples.server.role.PrefillRole;

import java.io.PrintStream;
import java.util.Set;

/**
 * {@code preflight}: checks a running deployment before a router is put in front of it (or while one is) — each
 * role's build, environment, model, KV layout, and pool against the context the router advertises, and the KV link
 * between the roles ({@link Preflight}). Prints a table; exits 0 when everything matches, 1 with the table of what does not, 2 on bad
 * usage.
 */
final class PreflightCommand implements Subcommand {

    /** How long roles that match but have no KV link between them get to link before that counts as a mismatch. */
    static final java.time.Duration LINK_WAIT = java.time.Duration.ofSeconds(5);

    private static final Cli CLI = ServerOptions.addTo(new Cli(
        "usage: KvServerMain preflight --prefill-url URL --decode-url URL [serve options]   (./dev example preflight …)", """
            Reads each role's GET /internal/status and checks its build, environment, model and KV layout against
            what a router with these options expects, and its largest safe context (pool, one transfer descriptor)
            against --context, and that the roles are linked to each other: prefill's KV endpoint must be where
            decode listens, and the link up (waiting up to 5 s for one that is not up yet), from this prefill's engine
            (by the instance ids the roles report). Exits 0 when everything matches, 1 with a table of what does not, 2 on bad usage.
            The options that matter: --context, --tokens-per-page, --layers, --kv-heads, --head-dim, --environment."""),
        ServerConfig.builder().build(), Set.of());

    /** @return the help, generated from the options {@link #run} parses */
    static String usage() {
        return CLI.usage();
    }

    @Override
    public String summary() {
        return "check a running deployment: each role's build, environment, model, layout and pool vs --context";
    }

    @Override
    public int run(String[] args, PrintStream out, PrintStream err) {
        final ServerConfig cfg;
        try {
            final Cli.Parsed p = CLI.parse(args);
            if (p.help()) {
                out.print(usage());
                return 0;
            }
            cfg = ServerOptions.apply(ServerConfig.builder(), p.given()).build();
        } catch (IllegalArgumentException e) {
            err.println("error: " + e.getMessage());
            err.print(usage());
            return 2;
        }
        final ObjectMapper json = Json.strict(); // the router's parser: a status it refuses is a role it never serves
        Preflight f;
        try (RoleClient p = new RoleClient(PrefillRole.ROLE, cfg.topology().prefillUrl(), json);
             RoleClient d = new RoleClient(DecodeRole.ROLE, cfg.topology().decodeUrl(), json)) {
            final long end = System.nanoTime() + LINK_WAIT.toNanos();
            while (true) {
                f = Preflight.check(cfg, RemoteStatus.read(p, PrefillRole.ROLE), RemoteStatus.read(d, DecodeRole.ROLE));
                // roles that match but are not linked may have just started: give their link a moment
                if (!f.onlyUnlinked() || System.nanoTime() - end >= 0) {
                    break;
                }
                try {
                    Thread.sleep(100);
                } catch (InterruptedException e) {
                    Thread.currentThread().interrupt();
                    break;
                }
            }
        }
        out.println("kvpool preflight: prefill at " + cfg.topology().prefillUrl() + ", decode at " + cfg.topology().decodeUrl()
            + ", advertised context " + cfg.contextTokens() + " tokens");
        out.print(f.table());
        out.println(f.ok() ? "OK" : "FAILED: " + f.mismatches().size() + " mismatch(es)");
        return f.ok() ? 0 : 1;
    }
}
