package io.kvpool.examples.server.role;

import io.kvpool.examples.ui.PoolView;

import java.util.Collections;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Objects;

/**
 * What a role reports about itself for {@code /metrics} and the live page. A role in this JVM builds it
 * from its pool and engine; a role in another process sends the same fields as JSON
 * ({@link io.kvpool.examples.server.remote.RoleJson}), and a router that cannot reach it reports it {@linkplain #unreachable unreachable}.
 * The router turns these numbers into meters of its own registry ({@link io.kvpool.examples.server.metrics.ServerMetrics}).
 *
 * @param role     "prefill" or "decode"
 * @param pool     its pool's page map and counters (an empty map of 0 pages when unreachable)
 * @param counters the role's own counters by name (transfers, aborts ...), each only ever growing
 * @param gauges   the role's gauges now by name ({@link #ACTIVE_TRANSFERS}, {@link #LINK_UP}, {@link #HELD_SEQUENCES},
 *                 {@link #PAGES_IN_FLIGHT}, {@link #DRAINING})
 * @param down     why the router could not read the role's status, or {@code null} when it did
 * @param instance the instance id of the role's transfer engine ({@code TransferSender.instance()} or
 *                 {@code TransferReceiver.instance()}): which engine, of several, the other role's links reach; 0 when
 *                 not reported (unreachable, or an older role)
 * @param linked   the instance ids of the other role's engines whose KV links to this role are up (decode: its prefill
 *                 links'), in no order; {@code null} when not reported
 */
public record RoleStatus(String role, PoolView pool, Map<String, Long> counters, Map<String, Long> gauges, String down,
                         long instance, List<Long> linked) {

    /** Gauge: transfers the role's engine has not finished. */
    public static final String ACTIVE_TRANSFERS = "active_transfers";
    /** Gauge: 1 while the role's KV link to the other role is up, else 0. */
    public static final String LINK_UP = "link_up";
    /** Gauge (decode only): committed sequences decode holds. */
    public static final String HELD_SEQUENCES = "held_sequences";
    /** Gauge (prefill only): pages it is writing to decode now, posted and not yet terminal. */
    public static final String PAGES_IN_FLIGHT = "pages_in_flight";
    /** Gauge (decode only): 1 while the process is stopping and finishes what it promised, taking no new request. */
    public static final String DRAINING = "draining";

    /** @return whether the role said it is stopping ({@link #DRAINING}) */
    public boolean draining() {
        return gauges.getOrDefault(DRAINING, 0L) == 1L;
    }

    public RoleStatus {
        Objects.requireNonNull(role, "role");
        Objects.requireNonNull(pool, "pool");
        counters = Collections.unmodifiableMap(new LinkedHashMap<>(counters));
        gauges = Collections.unmodifiableMap(new LinkedHashMap<>(gauges));
        linked = linked == null ? null : List.copyOf(linked);
    }

    /** A status read from a role that is up, with no instance ids. */
    public RoleStatus(String role, PoolView pool, Map<String, Long> counters, Map<String, Long> gauges) {
        this(role, pool, counters, gauges, null);
    }

    /** A status with no instance ids; {@code down} as in the record. */
    public RoleStatus(String role, PoolView pool, Map<String, Long> counters, Map<String, Long> gauges, String down) {
        this(role, pool, counters, gauges, down, 0, null);
    }

    /**
     * @param instance the role's engine instance id (0: none)
     * @param linked   the other role's engine instance ids whose links to this role are up, or {@code null}
     * @return this status with those instance ids
     */
    public RoleStatus withInstances(long instance, List<Long> linked) {
        return new RoleStatus(role, pool, counters, gauges, down, instance, linked);
    }

    /** {@return an engine instance id as the statuses and messages write it: 16 lower-case hex digits} */
    public static String hex(long instance) {
        return String.format("%016x", instance);
    }

    /** {@return engine instance ids as {@link #hex(long)} writes each, in a list: {@code [a1b2…, 0000…]}} */
    public static String hex(List<Long> instances) {
        return instances.stream().map(RoleStatus::hex).toList().toString();
    }

    /**
     * Reads an engine instance id as {@link #hex} writes it.
     *
     * @throws IllegalArgumentException if {@code s} is not 16 hex digits, or is all zeros (0 stands for "none")
     */
    public static long parseInstance(String s) {
        if (s.length() != 16 || !s.chars().allMatch(ch -> ch >= '0' && ch <= '9' || ch >= 'a' && ch <= 'f' || ch >= 'A' && ch <= 'F')) {
            throw new IllegalArgumentException("an instance id is 16 hex digits, not '" + (s.length() > 32 ? s.substring(0, 32)
                + "…' (" + s.length() + " characters)" : s + "'"));
        }
        final long id = Long.parseUnsignedLong(s, 16);
        if (id == 0) {
            throw new IllegalArgumentException("instance id 0 stands for none");
        }
        return id;
    }

    /** @return the status of a role the router cannot reach: no pages, no counters, no gauges, and why */
    public static RoleStatus unreachable(String role, String why) {
        return new RoleStatus(role, new PoolView(role, 0, "", Map.of()), Map.of(), Map.of(), Objects.requireNonNull(why, "why"));
    }

    /** @return whether the status was read from the role ({@link #down()} is {@code null}) */
    public boolean up() {
        return down == null;
    }
}
