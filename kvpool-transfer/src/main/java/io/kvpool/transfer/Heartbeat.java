package io.kvpool.transfer;

import java.time.Duration;
import java.util.Objects;

/**
 * When an engine checks that the peer of a link is still there: its keepalive.
 *
 * <pre>
 *   frame heard ──────────────▶ quiet ──idle passed, nothing heard──▶ PING sent ──timeout passed, nothing heard──▶ link FAILED
 *        ▲                        │                                       │
 *        └──── any frame heard ───┴───────────── any frame heard ─────────┘
 * </pre>
 *
 * On a link that speaks protocol version 3 or later, an engine that has heard no frame from the peer for
 * {@link #idle()} sends a PING; if it then hears no frame for {@link #timeout()} more, it fails the link with a
 * reason that names both numbers, as if the transport had reported the link lost (the receiver then tears it
 * down, the sender's application reconnects). Any frame counts, not only the PONG that answers the PING. The
 * peer answers from its duty cycle, so a peer whose engine thread stopped falls silent as a lost one does.
 *
 * <p>Why a protocol heartbeat when transports have keepalives: a transport can hold a connection "up" whose other
 * side is long gone. UCX over TCP reports an endpoint failed only on a socket error, and an idle connection
 * across a partition sees none: after the partition heals it learns of the peer's teardown at TCP's next
 * backed-off retransmission, seconds later. A heartbeat fails such a link while the partition lasts, so the
 * application's reconnect loop is already running when the path comes back.
 *
 * <p>The timeout counts from the PING, not from the last frame heard, and of a gap in the engine's own duty
 * cycle (a GC pause, a frozen host, one step of a test clock) only a quarter of the timeout counts toward it, so
 * a stall on this side cannot fail a link whose peer had no chance to answer, while a duty cycle that is merely
 * slow still fails a silent link, later. Every engine answers PINGs, also one built with {@link #OFF}.
 * Links of versions 1 and 2 carry no heartbeat. Immutable.
 */
public final class Heartbeat {

    /** The longest idle time or timeout, 365 days: far from the {@code long} nanoseconds' limit, so their sum cannot overflow. */
    public static final Duration LONGEST = Duration.ofDays(365);

    /** No PINGs sent: a link fails only when its transport says so. */
    public static final Heartbeat OFF = new Heartbeat(0, 0);

    /** The engines' default: a PING after 1 s of silence, the link failed 3 s after it went unanswered. */
    public static final Heartbeat DEFAULT = every(Duration.ofSeconds(1), Duration.ofSeconds(3));

    private final long idleNanos;
    private final long timeoutNanos;

    private Heartbeat(long idleNanos, long timeoutNanos) {
        this.idleNanos = idleNanos;
        this.timeoutNanos = timeoutNanos;
    }

    /**
     * A heartbeat that pings a link quiet for {@code idle} and fails it when nothing arrives within {@code timeout}
     * of that PING. A peer found gone is then known {@code idle + timeout} after its last frame, plus up to three
     * duty cycles (one to note the frame, one to send the PING, one to see the timeout pass), while those cycles
     * are shorter than a quarter of the timeout (of a longer one, only that quarter counts).
     *
     * @param idle    silence before a PING, &gt; 0
     * @param timeout silence after the PING before the link fails, &gt; 0; allow for the peer's longest pause (GC,
     *                a busy duty cycle) and the round trip
     * @return the setting
     * @throws IllegalArgumentException if either is null, zero, negative or longer than 365 days
     */
    public static Heartbeat every(Duration idle, Duration timeout) {
        return new Heartbeat(positive("idle", idle).toNanos(), positive("timeout", timeout).toNanos());
    }

    private static Duration positive(String name, Duration d) {
        if (d == null || d.isNegative() || d.isZero()) {
            throw new IllegalArgumentException("heartbeat " + name + " must be positive, was " + d);
        }
        if (d.compareTo(LONGEST) > 0) {
            throw new IllegalArgumentException("heartbeat " + name + " must be at most " + LONGEST.toDays() + " days, was " + d);
        }
        return d;
    }

    /** {@return whether PINGs are sent} */
    public boolean isOn() {
        return idleNanos > 0;
    }

    /** {@return the silence before a PING; zero when {@link #OFF}} */
    public Duration idle() {
        return Duration.ofNanos(idleNanos);
    }

    /** {@return the silence after a PING before the link fails; zero when {@link #OFF}} */
    public Duration timeout() {
        return Duration.ofNanos(timeoutNanos);
    }

    long idleNanos() {
        return idleNanos;
    }

    long timeoutNanos() {
        return timeoutNanos;
    }

    /**
     * Internal. The most of one gap in an engine's duty cycle that counts toward a wait: a quarter of the timeout.
     * A longer gap (a GC pause, a frozen host, a stepped test clock) may have kept the peer from answering too.
     */
    long stallAllowanceNanos() {
        return timeoutNanos / 4;
    }

    @Override
    public boolean equals(Object o) {
        return o instanceof Heartbeat h && h.idleNanos == idleNanos && h.timeoutNanos == timeoutNanos;
    }

    @Override
    public int hashCode() {
        return Objects.hash(idleNanos, timeoutNanos);
    }

    @Override
    public String toString() {
        return isOn() ? "Heartbeat[idle " + idle().toMillis() + " ms, timeout " + timeout().toMillis() + " ms]" : "Heartbeat[OFF]";
    }
}
