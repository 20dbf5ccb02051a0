package io.kvpool.examples.server;

import io.kvpool.examples.server.config.ServerConfig;

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
        oneLinePerLogRecord();
        final int status = run(args, System.out, System.err);
        if (status != 0) {
            System.exit(status);
        }
    }

    /** The JDK's default log format spreads each record over two lines; one line per record greps and tails well. */
    static final String LOG_FORMAT = "%1$tF %1$tT.%1$tL %4$s %3$s: %5$s%6$s%n";

    /** Sets {@link #LOG_FORMAT} for java.util.logging (the backend of kvpool's System.Logger) unless one is set already. */
    static void oneLinePerLogRecord() {
        if (System.getProperty("java.util.logging.SimpleFormatter.format") == null) {
            System.setProperty("java.util.logging.SimpleFormatter.format", LOG_FORMAT);
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
