package io.kvpool.transfer;

import io.kvpool.transfer.spi.PeerLink;

/**
 * One peer of a {@link TransferReceiver} or {@link TransferSender}: its link and where the handshake
 * stands. Owned by the engine's thread.
 *
 * <pre>
 *   HANDSHAKE ──HELLO, identities compatible (a version in common)──▶ UP, speaking that version
 *       │        (version 4 and later: we send our INSTANCE; UP once the peer's INSTANCE arrived)
 *       │  HELLO with a mismatch: we send REFUSE ─▶ REFUSED
 *       │  REFUSE received                        ─▶ REFUSED
 *       │  any other frame first, malformed frame  ─▶ FAILED
 *       │  no HELLO, or no INSTANCE after it, for the heartbeat's idle + timeout (heartbeat on) ─▶ FAILED
 *       │  the engine closed, the receiver's tearDownPeer            ─▶ FAILED
 *   UP ──link failed, malformed frame, heartbeat unanswered, close, teardown──▶ FAILED   (REFUSE received ─▶ REFUSED)
 *    │
 *    │ receiver: a suspect write on a link that cannot revoke one registration (it sends CANCEL(link, retiring))
 *    │ sender: that CANCEL received
 *    ▼
 *   RETIRING ──receiver: no transfer in flight on it any more: torn down (proving its quarantines free)──▶ FAILED
 *       (sender: the receiver's teardown reaches it as a failed link ─▶ FAILED)
 *       (no new transfer starts on it; the ones in flight finish; link failed, malformed frame, heartbeat ─▶ FAILED,
 *        REFUSE received ─▶ REFUSED)
 * </pre>
 * Every change goes through one checked transition ({@code moveTo}); any other throws. A
 * {@link TransferReceiver} decides to retire a link; its {@link TransferSender} follows the receiver's notice.
 */
public final class Peer {

    /** Where a peer's link stands. */
    public enum State {
        /** HELLO sent; waiting for the peer's. */
        HANDSHAKE,
        /** Identities matched; transfers may use the link. */
        UP,
        /**
         * A link the receiver must tear down (a sender's write on it is unproven and the link cannot revoke one
         * registration) but that still carries the transfers in flight on it: no new transfer starts on it (open a
         * fresh link for new work), and once those ended the receiver tears it down ({@link #FAILED}). A sender's
         * peer is RETIRING once the receiver's notice (a CANCEL of reason RETIRING) arrived.
         */
        RETIRING,
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
    /** The layout version of our own HELLO (1 or 2): the peer's REFUSE answering it uses it. */
    int ownHelloFormat;
    boolean helloSent;
    /** The peer's HELLO passed on a link of version 4 and later: the link waits in HANDSHAKE for the peer's INSTANCE. */
    boolean helloAccepted;
    /** The peer engine's instance id ({@link #remoteInstance()}); 0 until its INSTANCE, and for good on older links. */
    long remoteInstance;
    boolean tornDown;
    /**
     * The receiver's clock reading before which its duty cycle does not ask the transport again for an unproven
     * teardown (0: ask now); see {@code TransferReceiver.PROOF_RECHECK_NANOS}.
     */
    long nextProofCheckNanos;
    /** Transfers with writes that may still report on this link (a sender's); a down link is polled while > 0. */
    int users;
    // heartbeat (links of version 3 and later, see Heartbeat), on the engine's thread:
    /** A frame arrived since the duty cycle last looked. */
    boolean heard;
    /** When the duty cycle last saw {@link #heard} (or the link came UP; in HANDSHAKE: when the link was added). */
    long lastHeardNanos;
    /** A PING went out at {@link #pingSentNanos} and nothing was heard since. */
    boolean pinging;
    long pingSentNanos;
    /** The last poll delivered as many events as it may: more wait, a frame may be among them. */
    boolean backlogged;
    /**
     * A sender's: the last protocol frame from this peer was an ABORT of an attempt an offer had taken (running or
     * ended), of request {@link #abortAnsweredRequest}. The receiver follows each ABORT with a CANCEL of the request,
     * which that ABORT has then answered already.
     */
    boolean abortAnswered;
    long abortAnsweredRequest;

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

    /**
     * The peer engine's instance id ({@code TransferSender.instance()} or {@code TransferReceiver.instance()} on its
     * side): which engine, of several of one identity, this link reaches.
     *
     * @return the id, known once the peer is UP on a link of version 4 and later; 0 before, and for a peer of older code
     */
    public long remoteInstance() {
        return remoteInstance;
    }

    /** {@return an instance id as 16 hex digits, as logs and messages print it} */
    static String hex(long instance) {
        return String.format("%016x", instance);
    }

    /**
     * {@return the protocol version the link speaks (the highest both HELLOs' ranges share), 0 before the peer's HELLO
     * passed} On a link of version 4 and later it is set while the link still waits for the peer's INSTANCE.
     */
    public int protocolVersion() {
        return version;
    }

    /** {@return whether the link is up and the handshake passed, and it takes new transfers (it is not RETIRING)} */
    public boolean isUp() {
        return state == State.UP && link.isUp();
    }

    /** {@return whether the link still carries frames: UP, or RETIRING with its transfers in flight} */
    boolean carries() {
        return (state == State.UP || state == State.RETIRING) && link.isUp();
    }

    /**
     * The one way a peer's state changes: checked against the diagram above.
     *
     * @throws IllegalStateException for a transition the diagram does not have
     */
    void moveTo(State to) {
        final boolean ok = switch (state) {
            case HANDSHAKE -> to == State.UP || to == State.REFUSED || to == State.FAILED;
            case UP -> to == State.RETIRING || to == State.FAILED || to == State.REFUSED;
            case RETIRING -> to == State.FAILED || to == State.REFUSED;
            case REFUSED, FAILED -> false;
        };
        if (!ok) {
            throw new IllegalStateException("peer " + id + ": no transition " + state + " → " + to);
        }
        state = to;
    }

    @Override
    public String toString() {
        return "peer " + id + " (" + link.describe() + ", " + state + (failure == null ? "" : ": " + failure) + ")";
    }
}
