package io.kvpool.examples.server.router;

import io.kvpool.examples.server.Await;
import io.kvpool.examples.server.ServerTests;
import io.kvpool.examples.server.config.ServerConfig;
import io.kvpool.examples.server.role.InJvmRoles;
import io.kvpool.examples.server.role.PrefillService;
import io.kvpool.examples.server.role.Rejection;
import io.kvpool.examples.server.role.RoleLostException;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

import java.time.Duration;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * A client that leaves while its request is still ahead of decode's call (decode reserving, prefill computing) is acted
 * on when it leaves: the call in progress is cut, both roles are told at once, and the request ends as the client's
 * leaving, not as a fault of the role it was waiting for.
 */
@Timeout(value = 60, unit = TimeUnit.SECONDS)
class ClientLeavesEarlyTest {

    /** A sink whose client the test makes leave; its hooks run as the HTTP front runs them, on threads of their own. */
    private static final class LeavingSink implements Router.Sink {
        private final List<Runnable> hooks = new CopyOnWriteArrayList<>();
        private volatile boolean gone;

        void leave() {
            gone = true;
            hooks.forEach(h -> Thread.ofVirtual().start(h));
        }

        @Override
        public boolean clientGone() {
            return gone;
        }

        @Override
        public void onClientGone(Runnable action) {
            if (gone) {
                Thread.ofVirtual().start(action);
            } else {
                hooks.add(action);
            }
        }

        @Override
        public void admitted(long requestId) {
        }

        @Override
        public void heartbeat() {
        }

        @Override
        public void token(String text) {
        }
    }

    /** A prefill that computes for 30 s, interruptibly, and then fails as a remote role's interrupted call does. */
    private static final class SlowPrefill extends ForwardingPrefill {
        final CountDownLatch entered = new CountDownLatch(1);
        final AtomicInteger aborts = new AtomicInteger();
        final AtomicInteger slow = new AtomicInteger(1);

        SlowPrefill(PrefillService p) {
            super(p);
        }

        @Override
        public Rejection prefill(long requestId, String tenant, List<byte[]> tokens) {
            if (slow.getAndDecrement() > 0) {
                entered.countDown();
                try {
                    Thread.sleep(30_000);
                } catch (InterruptedException e) {
                    Thread.currentThread().interrupt();
                    throw new RoleLostException("prefill: interrupted while waiting", e);
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

    @Test
    void aClientLeavingWhilePrefillComputesEndsItsRequestAndTellsBothRolesAtOnce() throws Exception {
        final ServerConfig cfg = ServerTests.small().build();
        try (InJvmRoles roles = InJvmRoles.start(cfg, Duration.ofSeconds(10))) {
            final SlowPrefill prefill = new SlowPrefill(roles.prefill());
            final Router router = new Router(cfg, prefill, roles.decode());
            final LeavingSink sink = new LeavingSink();
            final CompletableFuture<Object> result = CompletableFuture.supplyAsync(() -> {
                Object ended;
                try {
                    ended = router.complete("alice", new Router.Request("a client that leaves", 3, false), sink);
                } catch (Exception e) {
                    ended = e;
                }
                // a pooled thread serves the next request with what this one left on it
                return Thread.currentThread().isInterrupted() ? new AssertionError("the client's interrupt outlived its request") : ended;
            }, task -> Thread.ofPlatform().daemon().start(task));
            assertTrue(prefill.entered.await(10, TimeUnit.SECONDS), "the request never reached prefill");
            assertTrue(roles.decodePool().snapshot().reserved() > 0, "decode reserved the request's pages");
            final long leftAt = System.nanoTime();
            sink.leave();
            final Object r = result.get(5, TimeUnit.SECONDS);
            final long ms = (System.nanoTime() - leftAt) / 1_000_000;
            assertTrue(r instanceof Router.ClientGone, () -> "ended as the client's leaving, not a role's fault: " + r);
            assertTrue(ms < 2_000, "the request ended " + ms + " ms after its client left, not when prefill answered (30 s)");
            assertEquals(1, prefill.aborts.get(), "prefill was told to abort the request");
            Await.until(() -> roles.decodePool().snapshot().reserved() == 0 && roles.decodePool().snapshot().openSequences() == 0,
                Duration.ofSeconds(5), () -> "decode's reservation given back: " + roles.decodePool().snapshot());
            final Object next = router.complete("alice", new Router.Request("the next client stays", 3, false), NoSink.INSTANCE);
            assertTrue(next instanceof Router.Completion, () -> "prefill is not taken for down by a client's leaving: " + next);
        }
    }
}
