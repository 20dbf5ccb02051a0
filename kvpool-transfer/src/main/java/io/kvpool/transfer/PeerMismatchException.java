package io.kvpool.transfer;

import java.util.List;

/** A peer's identity differs from ours; the link is refused. The message names both sides' values. */
public final class PeerMismatchException extends TransferException {
    private static final long serialVersionUID = 1L;

    private final transient PeerIdentity local;
    private final transient PeerIdentity remote;
    private final List<String> mismatches;

    /**
     * Creates the exception; its message lists every mismatch.
     *
     * @param local      our identity
     * @param remote     the peer's
     * @param mismatches one line per differing field (see {@link PeerIdentity#mismatches})
     */
    public PeerMismatchException(PeerIdentity local, PeerIdentity remote, List<String> mismatches) {
        super("peer refused, " + mismatches.size() + " mismatch(es): " + String.join("; ", mismatches));
        this.local = local;
        this.remote = remote;
        this.mismatches = List.copyOf(mismatches);
    }

    /** {@return our identity} */
    public PeerIdentity local() {
        return local;
    }

    /** {@return the peer's identity} */
    public PeerIdentity remote() {
        return remote;
    }

    /** {@return one line per differing field} */
    public List<String> mismatches() {
        return mismatches;
    }
}
