package io.kvpool.examples.server.router;

import io.kvpool.examples.server.Await;
import io.kvpool.examples.server.ServerTests;
import io.kvpool.examples.server.config.ServerConfig;
import io.kvpool.examples.server.role.DecodeService;
import io.kvpool.examples.server.role.InJvmRoles;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

import java.time.Duration;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.TimeUnit;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * A client that leaves while prefill computes its request gets decode's reservation back at once, not when prefill
 * answers; the request still waits for that answer, which names the engine holding the offer, and decode's give-back
 * then tells that engine, so the offer ends too. A router closed once prefill answered names that engine as well.
 */
@Timeout(value = 60, unit = TimeUnit.SECONDS)
class ClientLeavesWhilePrefillComputesTest {

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

    /** A decode that records the prefill engine each give-back names (0: none). */
    private static final class RecordingDecode extends ForwardingDecode {
        final List<Long> giveBacks = new CopyOnWriteArrayList<>();

        RecordingDecode(DecodeService d) {
            super(d);
        }

        @Override
        public void unreserve(long requestId, String why, long prefillInstance) {
            giveBacks.add(prefillInstance);
            super.unreserve(requestId, why, prefillInstance);
        }
    }

    @Test
    void decodesReservationGoesBackWhenTheClientLeavesAndTheOfferWhenPrefillAnswers() throws Exception {
        final ServerConfig cfg = ServerTests.small().build();
        try (InJvmRoles roles = InJvmRoles.start(cfg, Duration.ofSeconds(10))) {
            Await.until(roles.decode()::ready, Duration.ofSeconds(10), () -> "the prefill link");
            final HeldPrefill prefill = new HeldPrefill(roles.prefill());
            final RecordingDecode decode = new RecordingDecode(roles.decode());
            final Router router = new Router(cfg, prefill, decode);
            final LeavingSink sink = new LeavingSink();
            final CompletableFuture<Object> result = CompletableFuture.supplyAsync(() -> {
                try {
                    return router.complete("alice", new Router.Request("a client that leaves", 3, false), sink);
                } catch (Exception e) {
                    return e;
                }
            }, task -> Thread.ofPlatform().daemon().start(task));
            assertTrue(prefill.entered.await(10, TimeUnit.SECONDS), "the request never reached prefill");
            assertTrue(roles.decodePool().snapshot().reserved() > 0, "decode reserved the request's pages");

            sink.leave();
            Await.until(() -> roles.decodePool().snapshot().reserved() == 0 && roles.decodePool().snapshot().openSequences() == 0,
                Duration.ofSeconds(2), () -> "decode's reservation given back while prefill still computes: " + roles.decodePool().snapshot());
            assertFalse(result.isDone(), "the request waits for prefill's answer, which names the engine holding the offer");
            assertEquals(List.of(0L), decode.giveBacks, "one give-back so far, naming no engine: none answered yet");

            prefill.release.countDown();
            final Object r = result.get(10, TimeUnit.SECONDS);
            assertTrue(r instanceof Router.ClientGone, () -> "ended as the client's leaving: " + r);
            assertEquals(1, prefill.aborts.get(), "prefill was told to abort the request");
            assertEquals(List.of(0L, roles.prefill().instance()), decode.giveBacks,
                "then a give-back naming the engine that offered, for decode to tell it");
            Await.until(() -> roles.prefill().activeTransfers() == 0 && roles.prefillPool().snapshot().idle()
                    && roles.decodePool().snapshot().idle(), Duration.ofSeconds(5),
                () -> "the offer ended and both pools idle: prefill " + roles.prefillPool().snapshot() + ", decode "
                    + roles.decodePool().snapshot());

            final Object next = router.complete("alice", new Router.Request("the next client stays", 3, false), NoSink.INSTANCE);
            assertTrue(next instanceof Router.Completion, () -> "the next request is served: " + next);
        }
    }

    @Test
    void aRouterClosedAfterPrefillAnsweredStillNamesTheOfferingEngineToDecode() throws Exception {
        // close() gives the reservation back without knowing the engine; the request's own end, which does, names it
        final ServerConfig cfg = ServerTests.small().build();
        try (InJvmRoles roles = InJvmRoles.start(cfg, Duration.ofSeconds(10))) {
            Await.until(roles.decode()::ready, Duration.ofSeconds(10), () -> "the prefill link");
            final RecordingDecode decode = new RecordingDecode(roles.decode());
            final Router[] router = new Router[1];
            final ForwardingPrefill prefill = new ForwardingPrefill(roles.prefill()) {
                @Override
                public Answer computeAndOffer(long requestId, String tenant, List<byte[]> tokens) {
                    final Answer a = super.computeAndOffer(requestId, tenant, tokens);
                    router[0].close(); // the server closes between prefill's answer and decode's call
                    return a;
                }
            };
            router[0] = new Router(cfg, prefill, decode);
            final io.kvpool.examples.server.api.ApiError e = org.junit.jupiter.api.Assertions.assertThrows(
                io.kvpool.examples.server.api.ApiError.class,
                () -> router[0].complete("alice", new Router.Request("closed after prefill", 3, false), NoSink.INSTANCE));
            assertEquals(503, e.status(), e::getMessage);
            assertTrue(decode.giveBacks.contains(roles.prefill().instance()), () -> "a give-back named the engine that offered: "
                + decode.giveBacks);
            Await.until(() -> roles.prefill().activeTransfers() == 0 && roles.prefillPool().snapshot().idle(), Duration.ofSeconds(5),
                () -> "the offer ended: " + roles.prefillPool().snapshot());
        }
    }
}
