package io.kvpool.examples.load;

import java.time.Duration;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;

/**
 * The command line of {@code load} and {@code replay}: their own flags ({@code --name value} or
 * {@code --name=value}), and everything else handed on to the server they start
 * ({@link io.kvpool.examples.server.ServerConfig#parse}), {@code --unsafe-…} switches included.
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

    /**
     * @param ownFlags the flags this command takes itself (each with a value)
     * @throws IllegalArgumentException for an argument that is not a flag, or a flag without its value
     */
    public static Options parse(String[] args, Set<String> ownFlags) {
        final Map<String, String> own = new LinkedHashMap<>();
        final List<String> server = new ArrayList<>();
        boolean help = false;
        for (int i = 0; i < args.length; i++) {
            final String a = args[i];
            if (a.equals("--help") || a.equals("-h")) {
                help = true;
                continue;
            }
            if (!a.startsWith("--")) {
                throw new IllegalArgumentException("unexpected argument '" + a + "' (flags start with --)");
            }
            final int eq = a.indexOf('=');
            final String name = eq > 0 ? a.substring(0, eq) : a;
            if (name.startsWith("--unsafe-")) {
                server.add(a); // a switch: no value
                continue;
            }
            final String value;
            if (eq > 0) {
                value = a.substring(eq + 1);
            } else if (i + 1 < args.length) {
                value = args[++i];
            } else {
                throw new IllegalArgumentException(name + " needs a value");
            }
            if (ownFlags.contains(name)) {
                own.put(name, value);
            } else {
                server.add(name);
                server.add(value);
            }
        }
        return new Options(own, server, help);
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

    /** @throws IllegalArgumentException unless {@code N} seconds, {@code Ns} or {@code Nms} */
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
            return d;
        } catch (NumberFormatException e) {
            throw new IllegalArgumentException(flag + " needs seconds (30, 30s) or milliseconds (500ms), was '" + v + "'");
        }
    }
}
