package io.kvpool.examples.server.router;

import io.kvpool.examples.server.role.PrefillService;
import io.kvpool.examples.server.role.Rejection;
import io.kvpool.examples.server.role.RoleStatus;

import java.util.List;

/**
 * A prefill that forwards every call to another, for tests that change one of them. Its {@link #close} does nothing:
 * the prefill it forwards to belongs to whoever made it.
 */
class ForwardingPrefill implements PrefillService {
    final PrefillService p;

    ForwardingPrefill(PrefillService p) {
        this.p = p;
    }

    @Override
    public Rejection prefill(long requestId, String tenant, List<byte[]> tokens) {
        return p.prefill(requestId, tenant, tokens);
    }

    @Override
    public long instance() {
        return p.instance();
    }

    @Override
    public void abort(long requestId, String why) {
        p.abort(requestId, why);
    }

    @Override
    public String unavailable() throws InterruptedException {
        return p.unavailable();
    }

    @Override
    public String unavailable(long untilNanos) throws InterruptedException {
        return p.unavailable(untilNanos);
    }

    @Override
    public RoleStatus status() {
        return p.status();
    }

    @Override
    public int activeTransfers() {
        return p.activeTransfers();
    }

    @Override
    public void close() {
    }
}
