package io.kvpool.examples.server;

import java.io.PrintStream;
import java.util.Arrays;
import java.util.LinkedHashMap;
import java.util.Map;

/**
 * The example's command line: {@code KvServerMain [subcommand] [options]}, {@code serve} when the first
 * argument is not a subcommand's name. {@code ./dev example [options]} runs it.
 */
public final class KvServerMain {

    private KvServerMain() {
    }

    /** The subcommands by name. Add one line per subcommand (each lives in its own class). */
    static Map<String, Subcommand> subcommands() {
        final Map<String, Subcommand> m = new LinkedHashMap<>();
        m.put("serve", new ServeCommand());
        m.put("replay", new io.kvpool.examples.replay.ReplayCommand());
        m.put("load", new io.kvpool.examples.load.LoadCommand());
        m.put("preflight", new PreflightCommand());
        return m;
    }

    public static void main(String[] args) throws Exception {
        final int status = run(args, System.out, System.err);
        if (status != 0) {
            System.exit(status);
        }
    }

    /** @return the exit status */
    static int run(String[] args, PrintStream out, PrintStream err) throws Exception {
        final Map<String, Subcommand> commands = subcommands();
        if (args.length > 0 && (args[0].equals("help") || args[0].equals("--help") || args[0].equals("-h"))) {
            usage(out, commands);
            return 0;
        }
        if (args.length > 0 && !args[0].startsWith("-")) {
            final Subcommand c = commands.get(args[0]);
            if (c == null) {
                err.println("unknown subcommand '" + args[0] + "'");
                usage(err, commands);
                return 2;
            }
            return c.run(Arrays.copyOfRange(args, 1, args.length), out, err);
        }
        return commands.get("serve").run(args, out, err);
    }

    private static void usage(PrintStream out, Map<String, Subcommand> commands) {
        out.println("usage: KvServerMain [subcommand] [options]   (./dev example [subcommand] [options])");
        commands.forEach((name, c) -> out.printf("  %-10s %s%n", name, c.summary()));
        out.println("'serve' is the default; '<subcommand> --help' lists a subcommand's options. serve's:");
        out.print(ServerConfig.usage());
    }
}
