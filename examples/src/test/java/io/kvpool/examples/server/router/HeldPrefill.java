package io.kvpool.examples.server.router;

import io.kvpool.examples.server.role.PrefillService;
import io.kvpool.examples.server.role.Rejection;

import java.util.List;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.atomic.AtomicInteger;

/** A prefill role whose first {@code held} calls wait inside prefill() until {@link #release}; counts the aborts it is told. */
class HeldPrefill extends ForwardingPrefill {
    /** Counted down by each held call as it enters. */
    final CountDownLatch entered;
    final CountDownLatch release = new CountDownLatch(1);
    final AtomicInteger aborts = new AtomicInteger();
    private final AtomicInteger calls = new AtomicInteger();
    private final int held;

    /** Holds the first call. */
    HeldPrefill(PrefillService p) {
        this(p, 1);
    }

    /** Holds the first {@code held} calls; later ones go through at once. */
    HeldPrefill(PrefillService p, int held) {
        super(p);
        this.held = held;
        this.entered = new CountDownLatch(held);
    }

    @Override
    public Rejection prefill(long requestId, String tenant, List<byte[]> tokens) {
        if (calls.incrementAndGet() <= held) {
            entered.countDown();
            try {
                release.await();
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
            }
        }
        return super.prefill(requestId, tenant, tokens);
    }

    @Override
    public void abort(long requestId, String why) {
        aborts.incrementAndGet();
        super.abort(requestId, why);
    }
}
