package io.kvpool;

import org.junit.jupiter.api.Test;

import static org.junit.jupiter.api.Assertions.*;

/** Typed admission decisions, reservations, and their exact accounting. */
class AdmissionTest {

    @Test
    void decisionsCarryTheirNumbers() {
        try (KvPool pool = TestPools.pool(8)) { // 8 pages × 4 tokens = 32 tokens of context
            final Admission tooLong = pool.admit(30, 3);
            assertEquals(Admission.Decision.REJECTED_CONTEXT_TOO_LONG, tooLong.decision());
            assertTrue(tooLong.message().contains("33") && tooLong.message().contains("32"), tooLong.message());
            assertThrows(IllegalStateException.class, tooLong::sequence);

            final Admission a = pool.admit(10, 10); // 5 pages
            assertTrue(a.admitted());
            assertEquals(5, a.pagesNeeded());
            final Admission later = pool.admit(8, 8); // 4 pages, 3 left unreserved
            assertEquals(Admission.Decision.RETRY_LATER, later.decision());
            assertEquals(3, later.pagesAvailable());
            assertTrue(later.message().contains("4 pages") && later.message().contains("3 are free"), later.message());
            a.sequence().close();
            final Admission now = pool.admit(8, 8);
            assertTrue(now.admitted(), "fits once the reservation is returned");
            now.sequence().close();
            final PoolSnapshot s = pool.verifyAccounting();
            assertEquals(1, s.rejectedContextTooLong());
            assertEquals(1, s.retryLater());
            assertEquals(0, s.reserved());
        }
    }

    @Test
    void badRequestsThrowAndChangeNothing() {
        try (KvPool pool = TestPools.pool(8)) {
            assertThrows(IllegalArgumentException.class, () -> pool.admit(0, 5));
            assertThrows(IllegalArgumentException.class, () -> pool.admit(-1, 5));
            assertThrows(IllegalArgumentException.class, () -> pool.admit(5, -1));
            assertThrows(IllegalArgumentException.class, () -> pool.tryReserve(0, 0));
            assertThrows(IllegalArgumentException.class, () -> pool.admit(new int[0], 1, TestPools.SALT));
            assertThrows(NullPointerException.class, () -> pool.admit(null, 1, TestPools.SALT));
            final PoolSnapshot s = pool.verifyAccounting();
            assertEquals(0, s.reserved());
            assertEquals(0, s.rejectedContextTooLong() + s.rejectedExceedsPool() + s.retryLater());
            // Integer.MAX_VALUE + Integer.MAX_VALUE must not overflow into an admission
            assertEquals(Admission.Decision.REJECTED_CONTEXT_TOO_LONG, pool.admit(Integer.MAX_VALUE, Integer.MAX_VALUE).decision());
        }
    }

    @Test
    void anAdmittedRequestNeverRunsOutOfPagesWhileOthersAllocate() {
        try (KvPool pool = TestPools.pool(8)) {
            final Sequence a = pool.admit(4, 12).sequence(); // reserves 4 pages
            final Sequence b = pool.admit(4, 12).sequence(); // reserves the other 4
            assertEquals(PageHandle.EXHAUSTED, pool.tryAllocate(), "reserved pages are not up for grabs");
            a.append(16);
            b.append(16);
            assertEquals(0, pool.snapshot().free());
            assertThrows(PoolExhaustedException.class, () -> a.append(1), "beyond its admission, with no page left");
            assertEquals(16, a.tokenCount(), "a failed append changes nothing");
            a.close();
            b.close();
            assertEquals(8, pool.verifyAccounting().free());
        }
    }

    @Test
    void unusedReservationIsReturnedExactly() {
        try (KvPool pool = TestPools.pool(8)) {
            final Sequence s = pool.admit(3, 17).sequence(); // 5 pages
            s.append(6); // 2 pages used, 3 still reserved
            assertEquals(3, s.reservedPages());
            assertEquals(3, pool.snapshot().reserved());
            s.close();
            s.close();
            final PoolSnapshot snap = pool.verifyAccounting();
            assertEquals(0, snap.reserved());
            assertEquals(0, snap.openSequences());
        }
    }

    @Test
    void allocationFreeReservationsAreGenerationChecked() {
        try (KvPool pool = TestPools.builder(8).maxReservations(2).build()) {
            final long r1 = pool.tryReserve(4, 4);
            final long r2 = pool.tryReserve(4, 4);
            assertTrue(r1 > 0 && r2 > 0);
            assertEquals(Admission.RETRY_LATER, pool.tryReserve(1, 0), "reservation table full");
            assertEquals(4, pool.snapshot().reserved());
            final Sequence s = pool.openSequence(r1);
            assertEquals(2, s.reservedPages());
            assertThrows(IllegalArgumentException.class, () -> pool.openSequence(r1), "opened twice");
            assertThrows(IllegalArgumentException.class, () -> pool.cancelReservation(r1), "cancel after open");
            pool.cancelReservation(r2);
            assertThrows(IllegalArgumentException.class, () -> pool.cancelReservation(r2), "cancelled twice");
            final long r3 = pool.tryReserve(1, 0); // reuses an index with a new generation
            assertNotEquals(r2, r3);
            assertThrows(IllegalArgumentException.class, () -> pool.openSequence(r2), "stale id of a reused index");
            assertThrows(IllegalArgumentException.class, () -> pool.openSequence(12345));
            assertThrows(IllegalArgumentException.class, () -> pool.openSequence(-7));
            pool.cancelReservation(r3);
            assertEquals(Admission.CONTEXT_TOO_LONG, pool.tryReserve(30, 3));
            s.close();
            final PoolSnapshot snap = pool.verifyAccounting();
            assertEquals(0, snap.reserved());
            assertEquals(0, snap.openReservations());
        }
    }

    @Test
    void exceedsPoolWhenSlotsAreRetired() {
        try (KvPool pool = TestPools.pool(4)) {
            // retire two slots: push their generation to the maximum, then allocate through them
            final SlotTable table = slots(pool);
            table.forceGenerationOfFreeSlot(0, PageHandle.MAX_GENERATION);
            table.forceGenerationOfFreeSlot(1, PageHandle.MAX_GENERATION);
            final long h = pool.tryAllocate();
            assertTrue(h > 0);
            assertNotEquals(0, PageHandle.slot(h));
            assertNotEquals(1, PageHandle.slot(h));
            pool.release(h);
            final PoolSnapshot s = pool.verifyAccounting();
            assertEquals(2, s.retired());
            final Admission a = pool.admit(10, 2); // 3 pages > 2 in service
            assertEquals(Admission.Decision.REJECTED_EXCEEDS_POOL, a.decision());
            assertTrue(a.message().contains("3 pages") && a.message().contains("2 pages in service"), a.message());
            assertEquals(1, pool.snapshot().rejectedExceedsPool());
        }
    }

    @Test
    void promptOnlyPolicyOvercommitsAndCanFailLater() {
        try (KvPool pool = TestPools.builder(4).reservationPolicy(ReservationPolicy.PROMPT_ONLY).build()) {
            final Sequence a = pool.admit(4, 12).sequence(); // reserves 1 page only
            final Sequence b = pool.admit(4, 12).sequence();
            a.append(4);
            b.append(4);
            a.append(8);
            assertThrows(PoolExhaustedException.class, () -> b.append(1), "over-commit: no page left for b");
            a.close();
            b.close();
            pool.verifyAccounting();
        }
    }

    @Test
    void withAdmissionRejectionDisabledAnOverCapacityRequestBecomesAPlaceholder() {
        // the 2026 incident's mechanism, reproduced only behind the test switch
        try (KvPool pool = TestPools.builder(8).unsafeDisable(Safeguard.ADMISSION_REJECTION).build()) {
            final Admission a = pool.admit(1000, 10);
            assertEquals(Admission.Decision.ADMITTED, a.decision(), "the safeguard is what rejects it");
            assertEquals(1, a.sequence().admittedTokens(), "a one-token placeholder");
            a.sequence().close();
            assertTrue(pool.toString().contains("UNSAFE"));
        }
    }

    static SlotTable slots(KvPool pool) {
        try {
            final var f = KvPool.class.getDeclaredField("slots");
            f.setAccessible(true);
            return (SlotTable) f.get(pool);
        } catch (ReflectiveOperationException e) {
            throw new AssertionError(e);
        }
    }
    @Test
    void aReservationIdOfAnotherPoolIsRefusedNamingBothPools() {
        // the prefill/decode mix-up that handles carry a pool id against: the first reservation of every pool had the
        // same id, so another pool's id opened or cancelled an unrelated request's reservation here
        try (KvPool prefill = TestPools.pool(8); KvPool decode = TestPools.pool(8)) {
            final long ofPrefill = prefill.tryReserve(4, 0);
            final long ofDecode = decode.tryReserve(4, 0);
            assertTrue(ofPrefill > 0 && ofDecode > 0);
            final IllegalArgumentException e = assertThrows(IllegalArgumentException.class, () -> decode.cancelReservation(ofPrefill));
            assertTrue(e.getMessage().contains("pool " + prefill.poolId()) && e.getMessage().contains("pool " + decode.poolId()),
                e.getMessage());
            assertThrows(IllegalArgumentException.class, () -> decode.openSequence(ofPrefill));
            assertEquals(1, decode.snapshot().openReservations(), "decode's own reservation is untouched");
            // one reservation, one id: a high bit the generation does not use is not ignored
            assertThrows(IllegalArgumentException.class, () -> decode.cancelReservation(ofDecode | (1L << 55)));
            decode.cancelReservation(ofDecode);
            prefill.cancelReservation(ofPrefill);
        }
    }

    @Test
    void anAdmissionClosedBeforeItsSequenceWasTakenGivesTheReservationBack() {
        try (KvPool pool = TestPools.pool(8)) { // 8 pages × 4 tokens
            try (Admission a = pool.admit(1, 31)) { // all 8 pages
                assertTrue(a.admitted(), a::message);
                assertEquals(Admission.Decision.RETRY_LATER, pool.admit(1, 3).decision(), "held while the admission is open");
            } // left before taking the sequence: a client gone, an exception
            assertEquals(0, pool.snapshot().reserved(), pool.snapshot()::toString);
            assertEquals(0, pool.snapshot().openSequences());

            final Admission closed = pool.admit(1, 31);
            closed.close();
            closed.close(); // idempotent
            final IllegalStateException e = assertThrows(IllegalStateException.class, closed::sequence);
            assertTrue(e.getMessage().contains("8 pages needed"), e::getMessage);

            final Sequence taken;
            try (Admission a = pool.admit(1, 31)) {
                taken = a.sequence();
                assertSame(taken, a.sequence(), "every call hands out the same sequence");
            }
            assertFalse(taken.isClosed(), "a sequence taken is its taker's: closing the admission leaves it");
            taken.append(32);
            assertEquals(8, pool.snapshot().owned());
            taken.close();

            try (Admission refused = pool.admit(40, 0)) {
                assertFalse(refused.admitted()); // closing a refusal does nothing
            }
            assertEquals(0, pool.verifyAccounting().reserved());
        }
    }
}
