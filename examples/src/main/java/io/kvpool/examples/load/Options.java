package io.kvpool.examples.load;

import io.kvpool.examples.server.config.Cli;
import io.kvpool.examples.server.config.ServerConfig;
import io.kvpool.examples.server.config.ServerOptions;

import java.time.Duration;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.LinkedHashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;

/**
 * The command line of {@code load} and {@code replay}: their own options, and the server's ({@link ServerOptions}),
 * which go to the server they start, {@code --unsafe-…} switches included. Both kinds are parsed, and the help
 * written, by one picocli {@link Cli} ({@link #command}); an option neither kind has is refused.
 */
public final class Options {

    private final Map<String, String> own = new LinkedHashMap<>();
    private final List<String> server = new ArrayList<>();
    private final boolean help;

    private Options(Map<String, String> own, List<String> server, boolean help) {
        this.own.putAll(own);
        this.server.addAll(server);
        this.help = help;
    }

    /** A command's command line: its own options, then the server's it does not take itself. */
    public static final class Command {
        private final Cli cli;
        private final Set<String> own;

        private Command(Cli cli, Set<String> own) {
            this.cli = cli;
            this.own = own;
        }

        /**
         * @throws IllegalArgumentException for an option neither the command nor the server has, a missing value or a
         *                                  stray argument (picocli's words)
         */
        public Options parse(String[] args) {
            final Cli.Parsed p = cli.parse(args);
            final Map<String, String> mine = new LinkedHashMap<>();
            final List<String> server = new ArrayList<>();
            for (Cli.Given g : p.given()) {
                if (own.contains(g.name())) {
                    mine.put(g.name(), g.value()); // the last one given wins
                } else {
                    server.add(g.name());
                    if (g.value() != null) {
                        server.add(g.value());
                    }
                }
            }
            return new Options(mine, server, p.help());
        }

        /** @return the help, generated from the same options {@link #parse} takes */
        public String usage() {
            return cli.usage();
        }

        /** @return the command line itself */
        public Cli cli() {
            return cli;
        }
    }

    /**
     * @param synopsis       the help's first line
     * @param description    what the command does
     * @param heading        the heading of the command's own options
     * @param ownFlags       the command's own options (each with a value); a server option of the same name is left out
     * @param serverDefaults the server configuration the command starts unless told otherwise: its values are the
     *                       defaults the help shows for the server's options
     */
    public static Command command(String synopsis, String description, String heading, List<Cli.Flag> ownFlags, ServerConfig serverDefaults) {
        final Set<String> names = new LinkedHashSet<>();
        ownFlags.forEach(f -> names.add(f.name()));
        return new Command(ServerOptions.addTo(new Cli(synopsis, description).section(heading, ownFlags), serverDefaults, names), names);
    }

    /**
     * Parses with own options described by their names only.
     *
     * @param ownFlags the flags this command takes itself (each with a value)
     * @throws IllegalArgumentException for an argument that is not an option, an unknown option, or one without its value
     */
    public static Options parse(String[] args, Set<String> ownFlags) {
        final List<Cli.Flag> flags = ownFlags.stream().sorted().map(f -> new Cli.Flag(f, "VALUE", "")).toList();
        return command("usage: [options] [server options]", "", "options:", flags, ServerConfig.builder().build()).parse(args);
    }

    /** @return whether {@code --help} was given */
    public boolean help() {
        return help;
    }

    /** @return the arguments for the server, in the order given */
    public List<String> serverArgs() {
        return List.copyOf(server);
    }

    /** @return whether the flag was given */
    public boolean has(String flag) {
        return own.containsKey(flag);
    }

    /** @return the flag's value, or {@code otherwise} */
    public String text(String flag, String otherwise) {
        return own.getOrDefault(flag, otherwise);
    }

    /** @throws IllegalArgumentException unless a whole number in [min, max] */
    public long number(String flag, long otherwise, long min, long max) {
        final String v = own.get(flag);
        if (v == null) {
            return otherwise;
        }
        final long n;
        try {
            n = Long.parseLong(v.replace("_", ""));
        } catch (NumberFormatException e) {
            throw new IllegalArgumentException(flag + " needs a whole number, was '" + v + "'");
        }
        if (n < min || n > max) {
            throw new IllegalArgumentException(flag + " must be in [" + min + ", " + max + "], was " + n);
        }
        return n;
    }

    /** @throws IllegalArgumentException unless a number in [0, 1] */
    public double ratio(String flag, double otherwise) {
        final String v = own.get(flag);
        if (v == null) {
            return otherwise;
        }
        final double d;
        try {
            d = Double.parseDouble(v);
        } catch (NumberFormatException e) {
            throw new IllegalArgumentException(flag + " needs a number in [0, 1], was '" + v + "'");
        }
        if (!(d >= 0 && d <= 1)) {
            throw new IllegalArgumentException(flag + " must be in [0, 1], was " + v);
        }
        return d;
    }

    /** A range {@code MIN-MAX} (or one number {@code N} for N-N). @return {min, max} */
    public int[] range(String flag, int min, int max, int lowest, int highest) {
        final String v = own.get(flag);
        if (v == null) {
            return new int[] {min, max};
        }
        final String[] p = v.split("-", 2);
        try {
            final int lo = Integer.parseInt(p[0].strip());
            final int hi = p.length == 1 ? lo : Integer.parseInt(p[1].strip());
            if (lo < lowest || hi > highest || lo > hi) {
                throw new IllegalArgumentException(flag + " must be MIN-MAX with " + lowest + " ≤ MIN ≤ MAX ≤ " + highest + ", was " + v);
            }
            return new int[] {lo, hi};
        } catch (NumberFormatException e) {
            throw new IllegalArgumentException(flag + " needs MIN-MAX (whole numbers), was '" + v + "'");
        }
    }

    /** The longest duration a flag takes: a year, far beyond any run, and far below what a {@code long} of nanoseconds holds. */
    static final Duration MAX_DURATION = Duration.ofDays(365);

    /** @throws IllegalArgumentException unless {@code N} seconds, {@code Ns} or {@code Nms}, positive and at most a year */
    public Duration duration(String flag, Duration otherwise) {
        final String v = own.get(flag);
        if (v == null) {
            return otherwise;
        }
        try {
            final Duration d = v.endsWith("ms") ? Duration.ofMillis(Long.parseLong(v.substring(0, v.length() - 2)))
                : Duration.ofSeconds(Long.parseLong(v.endsWith("s") ? v.substring(0, v.length() - 1) : v));
            if (d.isNegative() || d.isZero()) {
                throw new IllegalArgumentException(flag + " must be positive, was " + v);
            }
            if (d.compareTo(MAX_DURATION) > 0) { // later arithmetic in nanoseconds would overflow
                throw new IllegalArgumentException(flag + " must be at most " + MAX_DURATION.toDays() + " days, was " + v);
            }
            return d;
        } catch (NumberFormatException e) {
            throw new IllegalArgumentException(flag + " needs seconds (30, 30s) or milliseconds (500ms), was '" + v + "'");
        }
    }
}
