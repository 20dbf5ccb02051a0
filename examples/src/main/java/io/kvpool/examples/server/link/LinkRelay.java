package io.kvpool.examples.server.link;

import io.kvpool.transfer.spi.LinkListener;
import io.kvpool.transfer.spi.PeerLink;

import java.nio.ByteBuffer;

/**
 * Passes a wrapped link's events on to the engine as events of the wrapper (the engine knows its peers
 * by link identity), optionally rewriting a write's status. Used on the link's owner thread only.
 */
final class LinkRelay implements LinkListener {

    /** Rewrites the terminal status of a write; identity by default. */
    interface StatusRewrite {
        int status(long token, int status);
    }

    private final PeerLink self;
    private final StatusRewrite rewrite;
    private LinkListener target;

    LinkRelay(PeerLink self, StatusRewrite rewrite) {
        this.self = self;
        this.rewrite = rewrite;
    }

    /** @return this relay, delivering to {@code target} until the next call */
    LinkRelay to(LinkListener target) {
        this.target = target;
        return this;
    }

    @Override
    public void onFrame(PeerLink link, ByteBuffer frame) {
        target.onFrame(self, frame);
    }

    @Override
    public void onWriteDone(PeerLink link, long token, int status) {
        target.onWriteDone(self, token, rewrite.status(token, status));
    }

    @Override
    public void onFlushDone(PeerLink link, long token, boolean ok) {
        target.onFlushDone(self, token, ok);
    }

    @Override
    public void onLinkFailed(PeerLink link, String reason) {
        target.onLinkFailed(self, reason);
    }
}
