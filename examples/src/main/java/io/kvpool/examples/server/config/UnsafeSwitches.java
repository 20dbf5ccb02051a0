package io.kvpool.examples.server.config;

import io.kvpool.Safeguard;
import io.kvpool.transfer.TransferSafeguard;

import java.io.PrintStream;
import java.util.ArrayList;
import java.util.Collections;
import java.util.EnumSet;
import java.util.List;
import java.util.Locale;
import java.util.Set;

/**
 * The safeguards switched off, for the incident replay only; every {@code --unsafe-…} switch is named here and
 * nowhere else ({@link #switches()}).
 *
 * <p>{@code --unsafe-<name>} turns one safeguard off: the pool's {@link Safeguard}s ({@code generation-check},
 * {@code pool-identity-check}, {@code free-page-fill}, {@code admission-rejection}, {@code shared-page-read-only}) on
 * both pools, the transfer's {@link TransferSafeguard}s
 * ({@code drain-wait}, {@code quarantine-on-timeout}, {@code length-check}, {@code canary-check}, {@code checksum}) on the
 * decode side, and {@code source-hold} and {@code drained-after-writes-end} on the prefill side. {@code --unsafe-placeholder-on-overflow} reproduces the 2026 incident's mechanism: the prefill pool may be
 * smaller than the advertised context (the startup check only warns), and a request it cannot hold is not rejected but
 * becomes a one-token placeholder transfer while decode is told the full length. {@code --unsafe-incident} is
 * {@link #INCIDENT}. With any of them the server prints {@link #printBanner a loud banner} at startup.
 *
 * @param pool                  the pool safeguards switched off
 * @param transfer              the transfer safeguards switched off
 * @param placeholderOnOverflow whether an over-capacity request becomes a one-token placeholder transfer
 */
public record UnsafeSwitches(Set<Safeguard> pool, Set<TransferSafeguard> transfer, boolean placeholderOnOverflow) {

    /** Every safeguard on: the default. */
    public static final UnsafeSwitches NONE = new UnsafeSwitches(Set.of(), Set.of(), false);

    /** All of the 2026 incident's: the placeholder, and free-page fill, length check, canary check and checksum off. */
    public static final UnsafeSwitches INCIDENT = new UnsafeSwitches(EnumSet.of(Safeguard.FREE_PAGE_FILL),
        EnumSet.of(TransferSafeguard.LENGTH_CHECK, TransferSafeguard.CANARY_CHECK, TransferSafeguard.CHECKSUM), true);

    private static final String PREFIX = "--unsafe-";

    /** One command-line switch: its flag, its help line, and what it turns off. */
    public record Switch(String flag, String description, UnsafeSwitches turnsOff) {
    }

    /** Copies both sets (unmodifiable, in enum order). */
    public UnsafeSwitches {
        pool = Collections.unmodifiableSet(pool.isEmpty() ? EnumSet.noneOf(Safeguard.class) : EnumSet.copyOf(pool));
        transfer = Collections.unmodifiableSet(transfer.isEmpty() ? EnumSet.noneOf(TransferSafeguard.class) : EnumSet.copyOf(transfer));
    }

    /** @return every switch the command line takes: one per safeguard, the placeholder, and the incident's */
    public static List<Switch> switches() {
        final List<Switch> out = new ArrayList<>();
        for (Safeguard s : Safeguard.values()) {
            out.add(new Switch(flag(s.name()), "the pools' " + name(s.name()) + " OFF", NONE.off(s)));
        }
        for (TransferSafeguard s : TransferSafeguard.values()) {
            out.add(new Switch(flag(s.name()), "the transfer's " + name(s.name()) + " OFF ("
                + (s.isSenderSide() ? "prefill" : "decode") + " side)", NONE.off(s)));
        }
        out.add(new Switch(PREFIX + "placeholder-on-overflow", "an over-capacity request becomes a one-token placeholder transfer "
            + "while decode is told the full length; a prefill pool smaller than --context only warns", NONE.withPlaceholder()));
        out.add(new Switch(PREFIX + "incident", "all of the 2026 incident's: the placeholder, free-page fill, length check, "
            + "canary check and checksum", INCIDENT));
        return out;
    }

    /** @return these switches and {@code s}'s pool safeguard off */
    public UnsafeSwitches off(Safeguard... s) {
        final EnumSet<Safeguard> p = EnumSet.noneOf(Safeguard.class);
        p.addAll(pool);
        p.addAll(List.of(s));
        return new UnsafeSwitches(p, transfer, placeholderOnOverflow);
    }

    /** @return these switches and {@code s}'s transfer safeguard off */
    public UnsafeSwitches off(TransferSafeguard... s) {
        final EnumSet<TransferSafeguard> t = EnumSet.noneOf(TransferSafeguard.class);
        t.addAll(transfer);
        t.addAll(List.of(s));
        return new UnsafeSwitches(pool, t, placeholderOnOverflow);
    }

    /** @return these switches with over-capacity requests turned into placeholders */
    public UnsafeSwitches withPlaceholder() {
        return new UnsafeSwitches(pool, transfer, true);
    }

    /** @return these switches and {@code other}'s */
    public UnsafeSwitches and(UnsafeSwitches other) {
        return off(other.pool.toArray(new Safeguard[0])).off(other.transfer.toArray(new TransferSafeguard[0]))
            .placeholder(placeholderOnOverflow || other.placeholderOnOverflow);
    }

    private UnsafeSwitches placeholder(boolean on) {
        return new UnsafeSwitches(pool, transfer, on);
    }

    /** @return whether any safeguard is off */
    public boolean any() {
        return !pool.isEmpty() || !transfer.isEmpty() || placeholderOnOverflow;
    }

    /** @return the switches in effect as flags, pool safeguards first, {@code --unsafe-incident} spelt out */
    public List<String> flags() {
        final List<String> out = new ArrayList<>();
        pool.forEach(s -> out.add(flag(s.name())));
        transfer.forEach(s -> out.add(flag(s.name())));
        if (placeholderOnOverflow) {
            out.add(PREFIX + "placeholder-on-overflow");
        }
        return out;
    }

    /**
     * Prints the loud banner a server started with safeguards off must show (serve, replay and load all call it);
     * prints nothing when every safeguard is on.
     */
    public void printBanner(PrintStream err) {
        if (!any()) {
            return;
        }
        final String line = "!".repeat(100);
        err.println(line);
        err.println("!!! UNSAFE: safeguards switched OFF: " + String.join(" ", flags()));
        err.println("!!! This server can answer one tenant with another tenant's data (the 2026 incident).");
        err.println("!!! For the incident replay only. Never run it like this for anything else.");
        err.println(line);
    }

    private static String flag(String enumName) {
        return PREFIX + name(enumName);
    }

    private static String name(String enumName) {
        return enumName.toLowerCase(Locale.ROOT).replace('_', '-');
    }
}
