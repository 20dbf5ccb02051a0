package io.kvpool.examples.server.config;

import java.time.Duration;

/** The range checks of the configuration records: each message names the option and carries the numbers. */
final class Checks {

    private Checks() {
    }

    /** @throws IllegalArgumentException {@code "<name> must be in [min, max], was v"} */
    static int range(String name, long v, long min, long max) {
        if (v < min || v > max) {
            throw new IllegalArgumentException(name + " must be in [" + min + ", " + max + "], was " + v);
        }
        return (int) v;
    }

    /** @throws IllegalArgumentException unless {@code d} is longer than zero; the message gives it in milliseconds */
    static Duration positive(String name, Duration d) {
        if (d == null || d.isNegative() || d.isZero()) {
            throw new IllegalArgumentException(name + " must be positive, was " + (d == null ? "none" : d.toMillis() + " ms"));
        }
        return d;
    }

    /**
     * The longest duration an option takes: a year, far beyond any deadline or pause, and far below the 292 years a
     * {@code long} of nanoseconds holds, into which every duration is turned somewhere (a deadline, a scheduled task).
     */
    static final Duration LONGEST = Duration.ofDays(365);

    /** @throws IllegalArgumentException {@code "<option> must be at most 365 days (31536000000 ms), was <ms>"} */
    static Duration atMostAYear(String option, Duration d) {
        if (d != null && d.compareTo(LONGEST) > 0) {
            throw new IllegalArgumentException(option + " must be at most " + LONGEST.toDays() + " days (" + LONGEST.toMillis()
                + " ms), was " + millis(d));
        }
        return d;
    }

    /** @return {@code d} in milliseconds, or as {@link Duration#toString()} where that overflows a {@code long} */
    private static String millis(Duration d) {
        try {
            return Long.toString(d.toMillis());
        } catch (ArithmeticException e) {
            return d.toString();
        }
    }

    /** @throws IllegalArgumentException unless {@code d} is zero or longer; the message gives it in milliseconds */
    static Duration nonNegative(String name, Duration d) {
        if (d == null || d.isNegative()) {
            throw new IllegalArgumentException(name + " must be ≥ 0, was " + (d == null ? "none" : d.toMillis() + " ms"));
        }
        return d;
    }
}
