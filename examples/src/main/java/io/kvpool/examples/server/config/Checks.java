package io.kvpool.examples.server.config;

import java.time.Duration;

/** The range checks of the configuration records: each message names the setting and carries the numbers. */
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

    /** @throws IllegalArgumentException unless {@code d} is zero or longer; the message gives it in milliseconds */
    static Duration nonNegative(String name, Duration d) {
        if (d == null || d.isNegative()) {
            throw new IllegalArgumentException(name + " must be ≥ 0, was " + (d == null ? "none" : d.toMillis() + " ms"));
        }
        return d;
    }
}
