package io.kvpool;

import io.kvpool.InterleavingExplorer.ControlledWords;
import io.kvpool.InterleavingExplorer.Op;
import io.kvpool.InterleavingExplorer.SequentialOp;

import org.junit.jupiter.api.Test;

import java.util.ArrayList;
import java.util.List;
import java.util.function.Supplier;

import static io.kvpool.SlotStateMachine.DRAINING;
import static io.kvpool.SlotStateMachine.FREE;
import static io.kvpool.SlotStateMachine.OWNED;
import static io.kvpool.SlotStateMachine.RECEIVING;
import static io.kvpool.SlotStateMachine.word;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * Exhaustive interleaving tests of {@link SlotTable}: every schedule of the real CAS loops of several
 * threads on the same slot is run, and each execution must be linearizable with respect to
 * {@link SlotStateMachine#next} (same result for every operation and same final state word as some
 * sequential order that respects program order and real time). A control test runs the same explorer
 * over a deliberately non-atomic CAS and asserts that it finds the lost update.
 */
class SlotTableInterleavingTest {

    private static final long G = 7; // the current generation in these scenarios
    private static final long H = PageHandle.of(0, G);
    private static final long STALE_H = PageHandle.of(0, G - 1);

    /** A handle-carrying event, concurrently and sequentially. */
    private record Ev(long handle, SlotEvent event) implements Op, SequentialOp {
        @Override
        public long run(SlotTable table) {
            return event == SlotEvent.ALLOCATE ? table.allocate(PageHandle.slot(handle)) : table.apply(handle, event);
        }

        @Override
        public long apply(long[] words) {
            final int slot = PageHandle.slot(handle);
            final long r = SlotStateMachine.next(words[slot], PageHandle.generation(handle), event);
            if (r >= 0) {
                words[slot] = r;
            }
            return r;
        }

        @Override
        public String name() {
            return event + "(" + PageHandle.toString(handle) + ")";
        }
    }

    private static Ev ev(SlotEvent e) {
        return new Ev(H, e);
    }

    private static long explore(long initial, Supplier<ControlledWords> words, List<List<Ev>> programs) {
        final List<List<Op>> ops = new ArrayList<>();
        final List<List<SequentialOp>> spec = new ArrayList<>();
        for (List<Ev> p : programs) {
            ops.add(new ArrayList<>(p));
            spec.add(new ArrayList<>(p));
        }
        return InterleavingExplorer.exploreAll(words, true, ops, e -> {
            final String violation = InterleavingExplorer.checkLinearizable(e, new long[] {initial}, spec);
            if (violation != null) {
                throw new AssertionError(violation + " for programs " + programs);
            }
        });
    }

    private static long exploreAtomic(long initial, List<List<Ev>> programs) {
        return explore(initial, () -> new ControlledWords(new long[] {initial}), programs);
    }

    @Test
    void concurrentReleasesAndRetainNeverLoseAnUpdate() {
        final long three = exploreAtomic(word(G, OWNED, 2), List.of(
            List.of(ev(SlotEvent.RELEASE)), List.of(ev(SlotEvent.RELEASE)), List.of(ev(SlotEvent.RETAIN))));
        final long two = exploreAtomic(word(G, OWNED, 2), List.of(
            List.of(ev(SlotEvent.RELEASE), ev(SlotEvent.RETAIN)), List.of(ev(SlotEvent.RETAIN), ev(SlotEvent.RELEASE))));
        assertTrue(three > 50 && two > 50, "explored " + three + " and " + two + " executions");
    }

    @Test
    void exactlyOneOfTwoLastReleasesFreesThePage() {
        // a double release of the same handle: one succeeds (FREE), the other is refused as stale
        final long[] freed = new long[1];
        final long initial = word(G, OWNED, 1);
        final List<List<Op>> ops = List.of(List.of(ev(SlotEvent.RELEASE)), List.of(ev(SlotEvent.RELEASE)));
        InterleavingExplorer.exploreAll(() -> new ControlledWords(new long[] {initial}), true, ops, e -> {
            int frees = 0;
            int stale = 0;
            for (long[] r : e.results()) {
                frees += r[0] >= 0 && SlotStateMachine.phase(r[0]) == FREE ? 1 : 0;
                stale += r[0] == PageHandle.STALE ? 1 : 0;
            }
            assertEquals(1, frees, "exactly one release frees the page, schedule " + e.schedule());
            assertEquals(1, stale, "the other is refused as stale, schedule " + e.schedule());
            freed[0]++;
        });
        assertTrue(freed[0] >= 2);
    }

    @Test
    void lastReleaseRacingWithWriterPinNeverFreesAPinnedPage() {
        exploreAtomic(word(G, OWNED, 1), List.of(
            List.of(ev(SlotEvent.RELEASE)), List.of(ev(SlotEvent.PIN_WRITER), ev(SlotEvent.BEGIN_DRAIN), ev(SlotEvent.DRAINED))));
    }

    @Test
    void drainAckQuarantineAndReleaseRace() {
        exploreAtomic(word(G, DRAINING, 1), List.of(
            List.of(ev(SlotEvent.DRAINED)), List.of(ev(SlotEvent.QUARANTINE)), List.of(ev(SlotEvent.RELEASE))));
        exploreAtomic(word(G, DRAINING, 1), List.of(
            List.of(ev(SlotEvent.QUARANTINE), ev(SlotEvent.RELEASE_QUARANTINE)), List.of(ev(SlotEvent.RELEASE), ev(SlotEvent.DRAINED))));
    }

    @Test
    void receiveCommitRacesWithAbortAndRelease() {
        exploreAtomic(word(G, RECEIVING, 1), List.of(
            List.of(ev(SlotEvent.COMMIT_RECEIVE)), List.of(ev(SlotEvent.BEGIN_DRAIN)), List.of(ev(SlotEvent.QUARANTINE))));
        exploreAtomic(word(G, RECEIVING, 1), List.of(
            List.of(ev(SlotEvent.COMMIT_RECEIVE), ev(SlotEvent.RELEASE)), List.of(ev(SlotEvent.BEGIN_DRAIN), ev(SlotEvent.DRAINED))));
    }

    @Test
    void staleHandleNeverActsOnTheNextTenancy() {
        // the allocator reuses a FREE slot while a holder of the previous tenancy's handle releases it
        final long initial = word(G - 1, FREE, 0);
        final List<List<Ev>> programs = List.of(
            List.of(new Ev(PageHandle.of(0, 1), SlotEvent.ALLOCATE), ev(SlotEvent.RELEASE)),
            List.of(new Ev(STALE_H, SlotEvent.RELEASE), new Ev(STALE_H, SlotEvent.RETAIN), new Ev(STALE_H, SlotEvent.PIN_WRITER)));
        exploreAtomic(initial, programs);
        InterleavingExplorer.exploreAll(() -> new ControlledWords(new long[] {initial}), true,
            List.of(new ArrayList<Op>(programs.get(0)), new ArrayList<Op>(programs.get(1))), e -> {
                for (long r : e.results()[1]) {
                    assertEquals(PageHandle.STALE, r, "stale handle must always be refused, schedule " + e.schedule());
                }
            });
    }

    @Test
    void theExplorerFindsALostUpdateInANonAtomicCas() {
        final long initial = word(G, OWNED, 2);
        final AssertionError found = org.junit.jupiter.api.Assertions.assertThrows(AssertionError.class, () ->
            explore(initial, () -> new InterleavingExplorer.NonAtomicCasWords(new long[] {initial}),
                List.of(List.of(ev(SlotEvent.RELEASE)), List.of(ev(SlotEvent.RELEASE)))));
        assertNotNull(found.getMessage());
        assertTrue(found.getMessage().contains("not linearizable"), found.getMessage());
    }

    @Test
    void theLinearizabilityCheckRejectsAWrongResult() {
        // a sanity check of the checker itself: an execution whose recorded result no order can produce
        final long initial = word(G, OWNED, 1);
        final InterleavingExplorer.Execution fake = new InterleavingExplorer.Execution(
            new long[][] {{word(G, OWNED, 1)}}, new int[][] {{1}}, new int[][] {{1}}, new long[] {word(G, FREE, 0)}, List.of(0));
        assertNotNull(InterleavingExplorer.checkLinearizable(fake, new long[] {initial}, List.of(List.of(ev(SlotEvent.RELEASE)))));
    }
}
