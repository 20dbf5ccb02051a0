package io.kvpool.examples.server.router;

import io.kvpool.examples.server.Await;
import io.kvpool.examples.server.ServerTests;
import io.kvpool.examples.server.api.ApiError;
import io.kvpool.examples.server.config.ServerConfig;
import io.kvpool.examples.server.role.DecodeCall;
import io.kvpool.examples.server.role.DecodeRole;
import io.kvpool.examples.server.role.DecodeService;
import io.kvpool.examples.server.role.InJvmRoles;
import io.kvpool.examples.server.role.Rejection;
import io.kvpool.examples.server.role.RoleStatus;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

import java.time.Duration;
import java.util.List;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * Decode admits a request before prefill computes it (a reservation), so that a decode with no room costs prefill
 * nothing: the request is refused 429 before prefill is asked. The reservation is taken by the decode call, or given
 * back when the request ends without one.
 */
@Timeout(value = 60, unit = TimeUnit.SECONDS)
class DecodeReservationTest {

    static final String PROMPT = "a prompt of a few tokens";
    static final int MAX_TOKENS = 4;

    @Test
    void aDecodeWithNoRoomIsRefusedBeforePrefillComputes() throws Exception {
        final ServerConfig cfg = ServerTests.small().build();
        try (InJvmRoles roles = InJvmRoles.start(cfg, Duration.ofSeconds(10))) {
            Await.until(roles.decode()::ready, Duration.ofSeconds(10), () -> "the prefill link");
            fill(roles.decode());
            final Router router = new Router(cfg, roles.prefill(), roles.decode());
            final long prefillAdmitted = counter(roles.prefill().status(), "admitted");
            final ApiError e = assertThrows(ApiError.class, () -> router.complete("alice", new Router.Request(PROMPT, MAX_TOKENS, false),
                NoSink.INSTANCE));
            assertEquals(429, e.status(), e::getMessage);
            assertEquals("retry_later", e.reason(), e::getMessage);
            assertTrue(e.getMessage().contains("decode pool"), e::getMessage);
            assertEquals(prefillAdmitted, counter(roles.prefill().status(), "admitted"), "prefill computed nothing for it");
        }
    }

    @Test
    void withoutReservationsTheSameRefusalComesAfterPrefillComputed() throws Exception {
        // the control: a decode that admits only at the transfer (a build before reservations) costs prefill a request
        final ServerConfig cfg = ServerTests.small().build();
        try (InJvmRoles roles = InJvmRoles.start(cfg, Duration.ofSeconds(10))) {
            Await.until(roles.decode()::ready, Duration.ofSeconds(10), () -> "the prefill link");
            fill(roles.decode());
            final Router router = new Router(cfg, roles.prefill(), new NoReservations(roles.decode()));
            final long prefillAdmitted = counter(roles.prefill().status(), "admitted");
            final ApiError e = assertThrows(ApiError.class, () -> router.complete("alice", new Router.Request(PROMPT, MAX_TOKENS, false),
                NoSink.INSTANCE));
            assertEquals(429, e.status(), e::getMessage);
            assertEquals(prefillAdmitted + 1, counter(roles.prefill().status(), "admitted"), "prefill computed it for nothing");
        }
    }

    @Test
    void aCompletedRequestUsesItsReservationAndARefusedOneGivesItBack() throws Exception {
        final ServerConfig cfg = ServerTests.small().build();
        try (InJvmRoles roles = InJvmRoles.start(cfg, Duration.ofSeconds(10))) {
            Await.until(roles.decode()::ready, Duration.ofSeconds(10), () -> "the prefill link");
            final long[] fillerEnd = new long[1];
            final Router router = new Router(cfg, roles.prefill(), new FillAfterReserve(roles.decode(), fillerEnd));
            final Router.Completion done = router.complete("alice", new Router.Request(PROMPT, MAX_TOKENS, false), NoSink.INSTANCE);
            assertEquals(MAX_TOKENS, done.generation().completionTokens(), "decoded in a full pool: in its reservation");
            assertEquals(1 + fillerEnd[0] - FILLER_IDS, counter(roles.decode().status(), "reserved_ahead"), "its own and the fillers'");
            giveBack(roles.decode(), fillerEnd[0]);

            // a reservation whose request never reaches its decode call is given back, not left to expire
            assertNull(roles.decode().reserve(99, "bob", 8, 0));
            roles.decode().unreserve(99, "test: the router gave up");
            Await.until(() -> roles.decodePool().snapshot().openSequences() == 0 && roles.decodePool().snapshot().reserved() == 0,
                Duration.ofSeconds(10), () -> "the reservation given back: " + roles.decodePool().snapshot());
            assertEquals(0, counter(roles.decode().status(), "reservations_expired"));
        }
    }

    @Test
    void aReservationHoldsATransferSlotSoPrefillNeverComputesForABusyDecode() throws Exception {
        final ServerConfig cfg = ServerTests.small().decodePages(1100).build(); // more pages than transfer slots
        try (InJvmRoles roles = InJvmRoles.start(cfg, Duration.ofSeconds(10))) {
            Await.until(roles.decode()::ready, Duration.ofSeconds(10), () -> "the prefill link");
            final int slots = 1024; // TransferReceiver's default maxTransfers
            for (int id = 1; id <= slots; id++) {
                assertNull(roles.decode().reserve(id, "alice", 8, 0), "reservation " + id);
            }
            final Rejection full = roles.decode().reserve(slots + 1, "alice", 8, 0);
            assertNotNull(full, "every transfer slot is promised: refused before prefill computes, not after");
            assertEquals(Rejection.Reason.RETRY_LATER, full.reason(), full::message);
            assertTrue(full.message().contains("all 1024 transfer slots are taken (0 transfers under way, 1024 reserved ahead)"),
                full::message);
            assertEquals(1024L, full.numbers().get("transfers_reserved"));
            roles.decode().unreserve(1, "test", 0);
            assertNull(roles.decode().reserve(slots + 2, "alice", 8, 0), "a slot given back is free again");
        }
    }

    @Test
    void aPromptOverOneTransferIsRefusedWithThePagesItNeedsAndTheLimit() throws Exception {
        final ServerConfig cfg = ServerTests.small().build(); // 16 tokens a page
        try (InJvmRoles roles = InJvmRoles.start(cfg, Duration.ofSeconds(10))) {
            final Rejection r = roles.decode().reserve(43, "erin", 65_537 * 16, 0);
            assertTrue(r != null && r.reason() == Rejection.Reason.EXCEEDS_TRANSFER, () -> String.valueOf(r));
            assertEquals(65_537L, r.numbers().get("prompt_pages"), r.numbers()::toString);
            assertEquals(65_536L, r.numbers().get("max_pages_per_transfer"), r.numbers()::toString);
        }
    }

    @Test
    void aReservationGivenBackBeforeItArrivedIsRefused() throws Exception {
        // a router whose reserve call timed out gives it back; here the give-back reaches decode first
        final ServerConfig cfg = ServerTests.small().build();
        try (InJvmRoles roles = InJvmRoles.start(cfg, Duration.ofSeconds(10))) {
            Await.until(roles.decode()::ready, Duration.ofSeconds(10), () -> "the prefill link");
            roles.decode().unreserve(42, "test: the router gave up on its reserve call");
            final Rejection r = roles.decode().reserve(42, "dave", 8, 0);
            assertTrue(r != null && r.message().contains("given back before its reservation arrived"), () -> String.valueOf(r));
            assertEquals(0, roles.decodePool().snapshot().openSequences(), "nothing held for it");
        }
    }

    @Test
    void aRouterClosingGivesBackTheReservationsOfRequestsStillWithPrefill() throws Exception {
        final ServerConfig cfg = ServerTests.small().build();
        try (InJvmRoles roles = InJvmRoles.start(cfg, Duration.ofSeconds(10))) {
            Await.until(roles.decode()::ready, Duration.ofSeconds(10), () -> "the prefill link");
            final HeldPrefill held = new HeldPrefill(roles.prefill());
            final CountDownLatch computing = held.entered, done = held.release;
            final Router router = new Router(cfg, held, roles.decode());
            final Thread request = Thread.ofVirtual().start(() -> {
                try {
                    router.complete("alice", new Router.Request(PROMPT, MAX_TOKENS, false), NoSink.INSTANCE);
                } catch (Exception expected) { // 503 server_closing
                }
            });
            assertTrue(computing.await(10, TimeUnit.SECONDS), "the request reached prefill");
            assertEquals(1, roles.decodePool().snapshot().openSequences(), "decode holds its reservation");
            router.close();
            Await.until(() -> roles.decodePool().snapshot().openSequences() == 0, Duration.ofSeconds(10),
                () -> "the reservation given back while prefill still computes: " + roles.decodePool().snapshot());
            done.countDown();
            request.join(10_000);
        }
    }

    @Test
    void aReservationNoDecodeCallTakesExpires() throws Exception {
        final ServerConfig cfg = ServerTests.small().requestTimeout(Duration.ofMillis(300)).build();
        try (InJvmRoles roles = InJvmRoles.start(cfg, Duration.ofSeconds(10))) {
            Await.until(roles.decode()::ready, Duration.ofSeconds(10), () -> "the prefill link");
            assertNull(roles.decode().reserve(5, "carol", 8, 0)); // its router died: no decode call, no abort
            assertEquals(1, roles.decodePool().snapshot().openSequences());
            Await.until(() -> counter(roles.decode().status(), "reservations_expired") == 1, Duration.ofSeconds(10),
                () -> "the reservation to expire: " + roles.decode().status().counters());
            assertEquals(0, roles.decodePool().snapshot().openSequences(), roles.decodePool().snapshot()::toString);
            assertEquals(0, roles.decodePool().snapshot().reserved());
        }
    }

    @Test
    void aDecodeCallForAnotherRequestUnderAReservedIdLeavesTheReservationAlone() throws Exception {
        // two routers reusing id 7: alice's router reserved it, bob's decode call arrives first
        final ServerConfig cfg = ServerTests.small().build();
        try (InJvmRoles roles = InJvmRoles.start(cfg, Duration.ofSeconds(10))) {
            Await.until(roles.decode()::ready, Duration.ofSeconds(10), () -> "the prefill link");
            assertNull(roles.decode().reserve(7, "alice", 8, 0));
            final long end = fill(roles.decode()); // no admission is possible now: a call admitted took the reservation
            final long reserved = roles.decodePool().snapshot().reserved();

            for (DecodeCall other : List.of(roles.decode().start(7, "bob", 8, 0), roles.decode().start(7, "alice", 9, 0),
                roles.decode().start(7, "alice", 8, 1))) {
                final DecodeCall.Admitted a = other.awaitAdmission(Duration.ofSeconds(10));
                assertTrue(a != null && !a.admitted(), () -> "a call of another request must not take alice's reservation: " + a);
                assertEquals(Rejection.Reason.UNAVAILABLE, a.rejection().reason(), a.rejection()::message);
                assertTrue(a.rejection().message().contains("reserved here for another request"), a.rejection()::message);
            }
            assertEquals(reserved, roles.decodePool().snapshot().reserved(), "alice's reservation untouched");

            // alice's own call is admitted although the pool is full: it took her reservation
            final DecodeCall alice = roles.decode().start(7, "alice", 8, 0);
            assertEquals(DecodeCall.Admitted.YES, alice.awaitAdmission(Duration.ofSeconds(10)));
            alice.abort("test: prefill never offers request 7");
            giveBack(roles.decode(), end);
            Await.until(() -> roles.decodePool().snapshot().openSequences() == 0 && roles.decodePool().snapshot().reserved() == 0,
                Duration.ofSeconds(10), () -> "everything given back: " + roles.decodePool().snapshot());
        }
    }

    @Test
    void giveBacksBeyondTheOnesDecodeRemembersAreCounted() throws Exception {
        final ServerConfig cfg = ServerTests.small().build();
        try (InJvmRoles roles = InJvmRoles.start(cfg, Duration.ofSeconds(10))) {
            Await.until(roles.decode()::ready, Duration.ofSeconds(10), () -> "the prefill link");
            final DecodeService decode = roles.decode();
            for (long id = 1; id <= DecodeRole.MAX_EARLY_GIVE_BACKS + 2; id++) { // none of them reserved
                decode.unreserve(id, "test: the router gave up on its reserve call");
            }
            Await.until(() -> counter(decode.status(), "give_backs_not_kept") == 2, Duration.ofSeconds(30),
                () -> "two give-backs beyond the kept ones: " + decode.status().counters());
        }
    }

    static final long FILLER_IDS = 1_000_000;

    /**
     * Reserves the decode pool until it refuses: every page is promised to a request that is not coming.
     *
     * @return the end of the ids reserved, from {@link #FILLER_IDS} (exclusive)
     */
    private static long fill(DecodeService decode) throws InterruptedException {
        for (long id = FILLER_IDS; ; id++) {
            final Rejection r = decode.reserve(id, "filler", 256, 0);
            if (r != null) {
                assertEquals(Rejection.Reason.RETRY_LATER, r.reason(), r::message);
                return id;
            }
        }
    }

    /** Gives back what {@link #fill} reserved. */
    private static void giveBack(DecodeService decode, long end) {
        for (long id = FILLER_IDS; id < end; id++) {
            decode.unreserve(id, "test: filler");
        }
    }

    private static long counter(RoleStatus s, String name) {
        return s.counters().getOrDefault(name, -1L);
    }

    /** A prefill whose every call waits for {@code done} once it said it is {@code computing}. */
    /** A decode that, once it reserved a request, promises every other page: the request's call must use its reservation. */
    private static final class FillAfterReserve extends ForwardingDecode {
        private final long[] fillerEnd;

        FillAfterReserve(DecodeService d, long[] fillerEnd) {
            super(d);
            this.fillerEnd = fillerEnd;
        }

        @Override
        public Rejection reserve(long requestId, String tenant, int promptTokens, int maxNewTokens, long prefillInstance)
            throws InterruptedException {
            final Rejection r = d.reserve(requestId, tenant, promptTokens, maxNewTokens, prefillInstance);
            if (r == null) {
                fillerEnd[0] = fill(d);
            }
            return r;
        }
    }

    /** A decode as a build before reservations: it reserves nothing, and admits at the decode call. */
    private static final class NoReservations extends ForwardingDecode {
        NoReservations(DecodeService d) {
            super(d);
        }

        @Override
        public Rejection reserve(long requestId, String tenant, int promptTokens, int maxNewTokens, long prefillInstance) {
            return null;
        }

        @Override
        public void unreserve(long requestId, String why, long prefillInstance) {
        }
    }
}
