package io.kvpool.transfer;

import io.kvpool.transfer.spi.PeerLink;

/**
 * One peer of a {@link TransferReceiver} or {@link TransferSender}: its link and where the handshake
 * stands. Owned by the engine's thread.
 *
 * <pre>
 *   HANDSHAKE ──HELLO, identities compatible (a version in common)──▶ UP, speaking that version
 *       │  HELLO with a mismatch: we send REFUSE ─▶ REFUSED
 *       │  REFUSE received                        ─▶ REFUSED
 *       │  any other frame first, malformed frame  ─▶ FAILED
 *   UP ──link failed, malformed frame, close──▶ FAILED
 * </pre>
 */
public final class Peer {

    /** Where a peer's link stands. */
    public enum State {
        /** HELLO sent; waiting for the peer's. */
        HANDSHAKE,
        /** Identities matched; transfers may use the link. */
        UP,
        /** One side refused the other's identity; {@link #failure()} names both sides' values. */
        REFUSED,
        /** The link failed or carried a malformed frame; {@link #failure()} says which. */
        FAILED
    }

    final int id;
    final PeerLink link;
    State state = State.HANDSHAKE;
    String failure;
    PeerIdentity remote;
    /** The version the link speaks once UP: the highest both ranges share; 0 before. */
    int version;
    /** The layout version of the peer's HELLO frame (1 or 2): our HELLO answering it, and a REFUSE, use it. */
    int helloFormat;
    boolean helloSent;
    boolean tornDown;
    /** Transfers with writes that may still report on this link (a sender's); a down link is polled while > 0. */
    int users;

    Peer(int id, PeerLink link) {
        this.id = id;
        this.link = link;
    }

    /** {@return the id the engine gave this peer} */
    public int id() {
        return id;
    }

    /** {@return the link} */
    public PeerLink link() {
        return link;
    }

    /** {@return where the handshake stands} */
    public State state() {
        return state;
    }

    /** {@return why the peer is REFUSED or FAILED, or {@code null}} */
    public String failure() {
        return failure;
    }

    /** {@return the peer's identity once its HELLO arrived, else {@code null}} */
    public PeerIdentity remote() {
        return remote;
    }

    /** {@return the protocol version the link speaks (the highest both HELLOs' ranges share), 0 before it is UP} */
    public int protocolVersion() {
        return version;
    }

    /** {@return whether the link is up and the handshake passed} */
    public boolean isUp() {
        return state == State.UP && link.isUp();
    }

    @Override
    public String toString() {
        return "peer " + id + " (" + link.describe() + ", " + state + (failure == null ? "" : ": " + failure) + ")";
    }
}
