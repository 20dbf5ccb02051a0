package io.kvpool.transfer;

import io.kvpool.KvPool;

import java.time.Duration;
import java.util.Arrays;
import java.util.EnumSet;
import java.util.Objects;

/**
 * The settings both engines' builders share: the pool, the identity, the build check, the heartbeat and the
 * clock. Internal: users see these methods on {@link TransferSender.Builder} and {@link TransferReceiver.Builder}.
 *
 * @param <B> the concrete builder, returned by every setter so that calls chain
 */
abstract class EndpointBuilder<B extends EndpointBuilder<B>> {
    final KvPool pool;
    final PeerIdentity identity;
    NanoClock clock = NanoClock.SYSTEM;
    boolean strictBuild;
    Heartbeat heartbeat = Heartbeat.DEFAULT;
    final EnumSet<TransferSafeguard> disabled = EnumSet.noneOf(TransferSafeguard.class);

    EndpointBuilder(KvPool pool, PeerIdentity identity) {
        this.pool = Objects.requireNonNull(pool, "pool");
        this.identity = Objects.requireNonNull(identity, "identity");
    }

    @SuppressWarnings("unchecked")
    private B self() {
        return (B) this;
    }

    /**
     * Adds safeguards to switch off, all of this side's or none ({@code unsafeDisable} on each builder).
     *
     * @param senderSide whether this is the sender's builder
     * @throws IllegalArgumentException if one is the other side's, naming the builder that takes it
     */
    final B disable(boolean senderSide, TransferSafeguard... safeguards) {
        for (TransferSafeguard s : safeguards) {
            if (s.isSenderSide() != senderSide) {
                throw new IllegalArgumentException(s + " is the " + (senderSide ? "receiver" : "sender") + "'s safeguard: switch it off on "
                    + (senderSide ? "TransferReceiver" : "TransferSender") + ".Builder");
            }
        }
        disabled.addAll(Arrays.asList(safeguards));
        return self();
    }

    /**
     * Whether a peer running another build is refused (default false: builds may differ during a rollout, and
     * each link names a differing build once in the log and in {@code peerBuilds()}). Protocol versions must
     * share one, and layout, model and environment must be equal, either way.
     *
     * @param on true to refuse a peer whose build differs
     * @return this builder
     */
    public B strictBuild(boolean on) {
        this.strictBuild = on;
        return self();
    }

    /**
     * Sets when this side pings a quiet link and fails a silent one; see {@link Heartbeat}. Links that speak
     * protocol version 1 or 2 are not pinged; a link of any version whose peer sends no HELLO for the idle time
     * plus the timeout fails.
     *
     * @param heartbeat the setting; {@link Heartbeat#DEFAULT} (a PING after 1 s of silence, the link failed
     *                  3 s later) by default, {@link Heartbeat#OFF} to leave failure detection to the transport
     * @return this builder
     * @throws NullPointerException if {@code heartbeat} is null
     */
    public B heartbeat(Heartbeat heartbeat) {
        this.heartbeat = Objects.requireNonNull(heartbeat, "heartbeat");
        return self();
    }

    /**
     * Sets the clock that deadlines are measured on.
     *
     * @param clock the clock; {@link NanoClock#SYSTEM} by default
     * @return this builder
     * @throws NullPointerException if {@code clock} is null
     */
    public B clock(NanoClock clock) {
        this.clock = Objects.requireNonNull(clock, "clock");
        return self();
    }

    /** @return {@code d}, checked to be positive (named {@code name} in the exception) */
    static Duration positive(String name, Duration d) {
        if (d == null || d.isNegative() || d.isZero()) {
            throw new IllegalArgumentException(name + " must be positive, was " + d);
        }
        return d;
    }
}
