package io.kvpool.transfer;

import io.kvpool.Safeguard;
import io.kvpool.storage.FillMode;
import io.kvpool.transfer.testkit.Kv;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.EnumSource;
import org.junit.jupiter.params.provider.ValueSource;

import java.util.EnumSet;
import java.util.function.Consumer;

import static org.junit.jupiter.api.Assertions.*;

/**
 * The leak hunter ({@link LeakHunter}) with every safeguard on must find nothing over ≥ 100,000 transfers
 * of chaos; with any single safeguard off it must catch a leak or a corrupted read — so each safeguard is
 * shown to be what stops its failure. Each control runs in a deployment where that safeguard is the last
 * line of defence (said at each one): the layers overlap on purpose, and a control whose failure another
 * layer also stops would prove nothing.
 *
 * <p>{@code -Dkvpool.hunter.transfers=N} sets the main run's length (default 100,000: about 10 s on 2 cores)
 * and {@code -Dkvpool.hunter.seed=S} the seed of every run (default 1), e.g. for a longer run:
 * {@code ./dev test -pl kvpool-transfer -am -Dtest=LeakHunterTest -Dsurefire.failIfNoSpecifiedTests=false
 * -Dkvpool.test.argLine="-Dkvpool.hunter.transfers=2000000 -Dkvpool.hunter.seed=7"}.
 */
class LeakHunterTest {

    static final int CONTROL_TRANSFERS = 10_000;

    static LeakHunter.Report hunt(int transfers, Consumer<LeakHunter.Config> setup) {
        final LeakHunter.Config c = new LeakHunter.Config();
        c.transfers = transfers;
        setup.accept(c);
        return LeakHunter.hunt(c);
    }

    @Test
    void aHundredThousandTransfersOfChaosShowNoForeignByteAndBalance() {
        final int n = Integer.getInteger("kvpool.hunter.transfers", 100_000);
        final LeakHunter.Report r = hunt(n, c -> { });
        System.out.println("leak hunter: " + r);
        assertEquals(0, r.leaks, r::toString);
        assertEquals(0, r.corrupted, r::toString);
        assertTrue(r.balanced, r::toString);
        assertTrue(r.transfers >= n);
        assertTrue(r.committed > n / 2, () -> "too few commits to mean anything: " + r);
        // the chaos reached every safeguard: each check refused something, drains and quarantines happened
        for (FailureReason f : new FailureReason[] {FailureReason.LENGTH_MISMATCH, FailureReason.CANARY,
            FailureReason.CHECKSUM_MISMATCH, FailureReason.SENDER_ABORTED, FailureReason.ABORTED, FailureReason.TIMEOUT,
            FailureReason.PEER_LOST, FailureReason.REJECTED}) {
            assertTrue(r.failures.get(f) > 0 || f == FailureReason.REJECTED && r.rejected > 0, () -> "no " + f + " in " + r);
        }
        for (ReceiverMetrics.Outcome o : ReceiverMetrics.Outcome.values()) {
            assertTrue(r.outcomes.get(o) > 0, () -> "no deferred release ended " + o + ": " + r);
        }
        assertTrue(r.staleRefused > 0, () -> "no stale handle was refused: " + r);
    }

    @Test
    void theSameSeedReplaysTheSameRunAndAnotherSeedDoesNot() {
        final LeakHunter.Report a = hunt(3_000, c -> c.seed = 42);
        final LeakHunter.Report b = hunt(3_000, c -> c.seed = 42);
        final LeakHunter.Report other = hunt(3_000, c -> c.seed = 43);
        assertEquals(a.toString(), b.toString());
        assertEquals(a.metrics.toString(), b.metrics.toString(), "every counter of every receiver replays");
        assertNotEquals(a.metrics.toString(), other.metrics.toString(), "the seed must matter");
    }

    static void assertCaught(LeakHunter.Report r) {
        System.out.println("control: " + r);
        assertTrue(r.leaks + r.corrupted > 0, () -> "the hunter caught nothing with the safeguard off: " + r);
    }

    /**
     * Each control runs twice in the same deployment: with its safeguard on, nothing may be found (so what the run
     * with it off finds is that safeguard's to stop, not another fault of the setup's); off, the hunter must catch it.
     */
    static LeakHunter.Report control(boolean on, Consumer<LeakHunter.Config> setup, Consumer<LeakHunter.Config> turnOff) {
        final LeakHunter.Report r = hunt(CONTROL_TRANSFERS, c -> {
            setup.accept(c);
            if (!on) {
                turnOff.accept(c);
            }
        });
        if (on) {
            System.out.println("control, safeguard on: " + r);
            assertEquals(0, r.leaks + r.corrupted + r.truncated, () -> "found with the safeguard on, so the control proves nothing: " + r);
            assertTrue(r.balanced, r::toString);
        } else {
            assertCaught(r);
        }
        return r;
    }

    /**
     * With the safeguard off, the harm it is there to stop must be what was found: {@code expected} in a committed
     * sequence's read, not just any corrupted read (a stale handle served, a truncated context, another finding) that
     * some other fault of the setup could cause.
     */
    static void assertHarm(boolean on, LeakHunter.Report r, Kv.Finding... expected) {
        if (!on) {
            long found = 0;
            for (Kv.Finding f : expected) {
                found += r.committedReads.getOrDefault(f, 0L);
            }
            assertTrue(found > 0, () -> "the control caught something, but no committed read found any of "
                + java.util.Arrays.toString(expected) + ": " + r);
        }
    }

    @ParameterizedTest(name = "safeguard on: {0}")
    @ValueSource(booleans = {true, false})
    void theGenerationCheckKeepsAStaleHandleFromAnotherTenantsPage(boolean on) {
        // last line: a decode step that still holds an aborted request's handles reads after reuse
        final LeakHunter.Report r = control(on, c -> { }, c -> c.poolOff = EnumSet.of(Safeguard.GENERATION_CHECK));
        assertTrue(on || r.leaks > 0, r::toString);
    }

    @ParameterizedTest(name = "safeguard on: {0}")
    @ValueSource(booleans = {true, false})
    void theDrainWaitKeepsLateWritesFromTheNextTenant(boolean on) {
        // last line: writes still in flight when a transfer fails (slow writes make the window wide)
        final LeakHunter.Report r = control(on, c -> {
            c.faults = c.faults.withStragglers(0.02, 1_000_000, 5_000_000);
            c.routerAbort = 0.2;
            c.decodePages = 256;
            c.revocableLinks = false;
        }, c -> c.transferOff = EnumSet.of(TransferSafeguard.DRAIN_WAIT));
        assertHarm(on, r, Kv.Finding.FOREIGN); // a late write landed in the next tenant's page
    }

    @ParameterizedTest(name = "safeguard on: {0}")
    @ValueSource(booleans = {true, false})
    void quarantineKeepsAFrozenPeersWritesFromLandingAfterTheTimeout(boolean on) {
        // last line: writes of a frozen peer that outlive the completion and drain deadlines, on links that
        // cannot revoke, while the peer's link stays up
        final LeakHunter.Report r = control(on, c -> {
            c.faults = c.faults.withStragglers(0.005, 30_000_000, 80_000_000);
            c.revocableLinks = false;
            c.decodePages = 256; // a busy decode pool: a freed page soon holds another tenant's committed KV
            c.maxHoldSteps = 4_000; // decode holds sequences up to 40 ms, as long as a straggler can be late
            c.senderDrainDeadlineMs = 200; // the frozen sender does not give up (or crash) first: its link stays up
        }, c -> c.transferOff = EnumSet.of(TransferSafeguard.QUARANTINE_ON_TIMEOUT));
        assertHarm(on, r, Kv.Finding.FOREIGN); // a frozen peer's write landed in the next tenant's page
    }

    @ParameterizedTest(name = "safeguard on: {0}")
    @ValueSource(booleans = {true, false})
    void theLengthCheckStopsAShortTransfer(boolean on) {
        // last line: no checksums (they are keyed by the token count, so they would stop it too), ZERO fill at decode
        // (the canary check has nothing to find in the unwritten pages), and no other fault that either would catch
        final LeakHunter.Report r = control(on, c -> {
            c.checksums = false;
            c.decodeFill = FillMode.ZERO;
            c.truncatedPrefill = 0.01;
            c.unwrittenPrefill = 0;
            c.faults = c.faults.withWrites(c.faults.writeFail(), 0, 0, 0);
        }, c -> c.transferOff = EnumSet.of(TransferSafeguard.LENGTH_CHECK));
        // the tokens the short sender never held: its own canary (it copies whole pages) or decode's ZERO fill
        assertHarm(on, r, Kv.Finding.CANARY, Kv.Finding.MISPLACED);
        assertTrue(on || r.truncated == 0, r::toString); // a full-length context, not admission's placeholder
    }

    @ParameterizedTest(name = "safeguard on: {0}")
    @ValueSource(booleans = {true, false})
    void theCanaryCheckKeepsKvThatWasNeverWrittenFromDecode(boolean on) {
        // last line: a prefill that never wrote some KV; its checksums describe the unwritten bytes faithfully
        final LeakHunter.Report r = control(on, c -> c.unwrittenPrefill = 0.01, c -> c.transferOff = EnumSet.of(TransferSafeguard.CANARY_CHECK));
        assertHarm(on, r, Kv.Finding.CANARY);
    }

    @Test
    void aSendersUnwrittenKvReachesADecodePoolNotFilledWithTheCanary() {
        // the documented limit of the canary check: it runs on a canary-filled decode pool only, so with every safeguard
        // on a prefill's unwritten (canary) KV commits at a ZERO-filled decode; a prefill's canary, not another tenant's KV
        final LeakHunter.Report r = hunt(CONTROL_TRANSFERS, c -> {
            c.decodeFill = FillMode.ZERO;
            c.unwrittenPrefill = 0.01;
        });
        assertEquals(0, r.leaks, r::toString);
        assertTrue(r.corrupted > 0, r::toString);
    }

    @ParameterizedTest(name = "safeguard on: {0}")
    @ValueSource(booleans = {true, false})
    void checksumsKeepCorruptedWritesFromDecode(boolean on) {
        // last line: a byte flipped in flight (no canary, right length)
        final LeakHunter.Report r = control(on, c -> c.faults = c.faults.withWrites(0.002, 0, 0, 0.01),
            c -> c.transferOff = EnumSet.of(TransferSafeguard.CHECKSUM));
        assertHarm(on, r, Kv.Finding.MISPLACED); // a flipped byte: this request's KV, wrong
    }

    @ParameterizedTest(name = "safeguard on: {0}")
    @ValueSource(booleans = {true, false})
    void theSourceHoldKeepsTheNextTenantsKvOutOfAWriteInFlight(boolean on) {
        // last line: no checksums (a source page reused under its write no longer matches the checksum sent for it),
        // so no misdirected or corrupted writes either (only checksums catch those), a small prefill pool whose freed
        // pages soon hold another request's KV, and slow writes that read their source late
        final LeakHunter.Report r = control(on, c -> {
            c.checksums = false;
            c.prefillPages = 256;
            c.faults = c.faults.withWrites(c.faults.writeFail(), c.faults.lostWrite(), 0, 0)
                .withStragglers(0.02, 1_000_000, 5_000_000);
        }, c -> c.transferOff = EnumSet.of(TransferSafeguard.SOURCE_HOLD));
        assertTrue(on || r.leaks > 0, r::toString);
    }

    @ParameterizedTest(name = "safeguard on: {0}")
    @ValueSource(booleans = {true, false})
    void aSenderThatSaysDrainedOnlyOnceItsWritesEndKeepsLateWritesFromTheNextTenant(boolean on) {
        // last line: writes reported ended on time that land 1–5 ms later (a flush still waits for them), on links that
        // cannot revoke, so a freed registration still takes them; many aborts mid-transfer, and a busy decode pool whose
        // freed pages soon hold another tenant's committed KV
        final LeakHunter.Report r = control(on, c -> {
            c.faults = c.faults.withLateLandings(0.02, 1_000_000, 5_000_000);
            c.routerAbort = 0.2;
            c.senderAbort = 0.05;
            c.decodePages = 256;
            c.revocableLinks = false;
        }, c -> c.transferOff = EnumSet.of(TransferSafeguard.DRAINED_AFTER_WRITES_END));
        assertHarm(on, r, Kv.Finding.FOREIGN); // a write still in flight past DRAINED landed in the next tenant's page
    }

    @ParameterizedTest(name = "safeguard on: {0}")
    @ValueSource(booleans = {true, false})
    void admissionRejectionKeepsAnOverCapacityRequestFromBecomingAOneTokenPlaceholder(boolean on) {
        // last line: the placeholder's length is what prefill announces, so every later check agrees with it
        final LeakHunter.Report r = control(on, c -> c.overCapacity = 0.01,
            c -> c.poolOff = EnumSet.of(Safeguard.ADMISSION_REJECTION));
        assertTrue(on || r.truncated > 0, r::toString);
    }

    @ParameterizedTest(name = "safeguard on: {0}")
    @ValueSource(booleans = {true, false})
    void theReceiversTailFillKeepsASendersOldKvOutOfAPartialPage(boolean on) {
        // last line: a sender pool that does not fill its free pages, so a partial last page's tail holds an earlier
        // request's KV; decode's free-page fill off also turns the receiver's tail fill off (its pages are written whole
        // by the transfer, so nothing else changes). No unwritten prefill KV: with NONE it would be foreign in the read range.
        final LeakHunter.Report r = control(on, c -> {
            c.prefillFill = FillMode.NONE;
            c.unwrittenPrefill = 0;
        }, c -> c.poolOff = EnumSet.of(Safeguard.FREE_PAGE_FILL));
        assertTrue(on || r.tailForeign > 0, r::toString);
    }

    /** The safeguards the 2026 incident's deployment lacked. */
    static final EnumSet<Safeguard> INCIDENT_POOL = EnumSet.of(Safeguard.ADMISSION_REJECTION, Safeguard.FREE_PAGE_FILL);
    static final EnumSet<TransferSafeguard> INCIDENT_TRANSFER =
        EnumSet.of(TransferSafeguard.LENGTH_CHECK, TransferSafeguard.CANARY_CHECK, TransferSafeguard.CHECKSUM);

    static void incident(LeakHunter.Config c) {
        c.poolOff = EnumSet.copyOf(INCIDENT_POOL);
        c.transferOff = EnumSet.copyOf(INCIDENT_TRANSFER);
        c.decodeSizedByRouter = true; // decode preallocates for the original request
        c.overCapacity = 0.01;
        // only the incident's own failure: no other fault that the disabled checks would have caught
        c.truncatedPrefill = 0;
        c.unwrittenPrefill = 0;
        c.faults = c.faults.withWrites(c.faults.writeFail(), 0, 0, 0);
    }

    @Test
    void theIncidentReplayedLeaksOtherTenantsKv() {
        // An over-capacity request becomes a one-token placeholder at prefill; decode, sized for the real
        // request, takes the one-token transfer as complete and reads pages still holding earlier tenants' KV.
        final LeakHunter.Report r = hunt(CONTROL_TRANSFERS, LeakHunterTest::incident);
        System.out.println("incident: " + r);
        assertTrue(r.leaks > 0, () -> "the incident did not reproduce: " + r);
    }

    @ParameterizedTest
    @EnumSource(names = {"LENGTH_CHECK", "CHECKSUM"})
    void theIncidentIsStoppedByTheLengthCheckOrTheChecksumAlone(TransferSafeguard restored) {
        final LeakHunter.Report r = hunt(CONTROL_TRANSFERS, c -> {
            incident(c);
            c.transferOff.remove(restored);
        });
        assertEquals(0, r.leaks + r.corrupted, r::toString);
    }

    @Test
    void theIncidentIsStoppedByAdmissionRejectionAlone() {
        final LeakHunter.Report r = hunt(CONTROL_TRANSFERS, c -> {
            incident(c);
            c.poolOff.remove(Safeguard.ADMISSION_REJECTION);
        });
        assertEquals(0, r.leaks + r.corrupted, r::toString);
    }

    @Test
    void freePageFillAloneTurnsTheIncidentsLeakIntoCanaryReads() {
        // the fill removes the foreign bytes; the canary check (off here) is what would then refuse the commit
        final LeakHunter.Report r = hunt(CONTROL_TRANSFERS, c -> {
            incident(c);
            c.poolOff.remove(Safeguard.FREE_PAGE_FILL);
        });
        assertEquals(0, r.leaks, r::toString);
        assertTrue(r.corrupted > 0, r::toString);
    }
}
