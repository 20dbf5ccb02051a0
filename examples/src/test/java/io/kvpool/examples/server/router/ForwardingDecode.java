package io.kvpool.examples.server.router;

import io.kvpool.examples.server.role.DecodeCall;
import io.kvpool.examples.server.role.DecodeService;
import io.kvpool.examples.server.role.Rejection;
import io.kvpool.examples.server.role.RoleStatus;

/**
 * A decode that forwards every call to another, for tests that change one of them. Its {@link #close} does nothing:
 * the decode it forwards to belongs to whoever made it.
 */
class ForwardingDecode implements DecodeService {
    final DecodeService d;

    ForwardingDecode(DecodeService d) {
        this.d = d;
    }

    @Override
    public DecodeCall start(long requestId, String tenant, int promptTokens, int maxNewTokens, long prefillInstance) {
        return d.start(requestId, tenant, promptTokens, maxNewTokens, prefillInstance);
    }

    @Override
    public Rejection reserve(long requestId, String tenant, int promptTokens, int maxNewTokens, long prefillInstance)
        throws InterruptedException {
        return d.reserve(requestId, tenant, promptTokens, maxNewTokens, prefillInstance);
    }

    @Override
    public void unreserve(long requestId, String why, long prefillInstance) {
        d.unreserve(requestId, why, prefillInstance);
    }

    @Override
    public boolean ready() {
        return d.ready();
    }

    @Override
    public String unavailable() throws InterruptedException {
        return d.unavailable();
    }

    @Override
    public String unavailable(long untilNanos) throws InterruptedException {
        return d.unavailable(untilNanos);
    }

    @Override
    public RoleStatus status() {
        return d.status();
    }

    @Override
    public int activeTransfers() {
        return d.activeTransfers();
    }

    @Override
    public void close() {
    }
}
