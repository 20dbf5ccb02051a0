package io.kvpool.transfer;

import io.kvpool.transfer.spi.ForwardingPeerLink;
import io.kvpool.transfer.spi.PeerLink;

/**
 * A {@link ForwardingPeerLink} for tests: they override what they watch or change (frames sent, frames and failures
 * arriving, whether it is up) and reach the link underneath as {@link #in}.
 */
class ForwardingLink extends ForwardingPeerLink {
    final PeerLink in;

    ForwardingLink(PeerLink in) {
        super(in);
        this.in = in;
    }
}
