package io.kvpool;


import org.junit.jupiter.api.Test;

import java.util.EnumMap;
import java.util.Map;

import static io.kvpool.SlotStateMachine.DRAINING;
import static io.kvpool.SlotStateMachine.FREE;
import static io.kvpool.SlotStateMachine.OWNED;
import static io.kvpool.SlotStateMachine.QUARANTINED;
import static io.kvpool.SlotStateMachine.RECEIVING;
import static io.kvpool.SlotStateMachine.RETIRED;
import static io.kvpool.SlotStateMachine.word;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * The transition table of {@link SlotStateMachine}, written out independently here for every phase,
 * refcount class (0, 1, 2) and event, and compared with {@code next()} exhaustively.
 */
class SlotStateMachineTest {

    private static final long G = 5;
    private static final long ST = PageHandle.STALE;
    private static final long IL = PageHandle.ILLEGAL_STATE;

    /** Expected next word for (phase, refcount, event) with a current handle; written from the documented table. */
    private static long expected(int phase, int rc, SlotEvent e) {
        if (e == SlotEvent.ALLOCATE) {
            return phase == FREE ? word(G + 1, OWNED, 1) : IL;
        }
        if (phase == FREE || phase == RETIRED) {
            return ST;
        }
        return switch (phase) {
            case OWNED -> switch (e) {
                case RETAIN -> word(G, OWNED, rc + 1);
                case RELEASE -> rc == 1 ? word(G, FREE, 0) : word(G, OWNED, rc - 1);
                case PIN_WRITER -> rc == 1 ? word(G, RECEIVING, 1) : IL;
                default -> IL;
            };
            case RECEIVING -> switch (e) {
                case RELEASE -> rc == 0 ? IL : word(G, RECEIVING, rc - 1);
                case COMMIT_RECEIVE -> rc == 0 ? word(G, FREE, 0) : word(G, OWNED, rc);
                case BEGIN_DRAIN -> word(G, DRAINING, rc);
                case QUARANTINE -> word(G, QUARANTINED, rc);
                default -> IL;
            };
            case DRAINING -> switch (e) {
                case RELEASE -> rc == 0 ? IL : word(G, DRAINING, rc - 1);
                case DRAINED -> rc == 0 ? word(G, FREE, 0) : word(G, OWNED, rc);
                case QUARANTINE -> word(G, QUARANTINED, rc);
                default -> IL;
            };
            case QUARANTINED -> switch (e) {
                case RELEASE -> rc == 0 ? IL : word(G, QUARANTINED, rc - 1);
                case RELEASE_QUARANTINE -> rc == 0 ? word(G, FREE, 0) : word(G, OWNED, rc);
                default -> IL;
            };
            default -> throw new AssertionError(phase);
        };
    }

    @Test
    void everyPhaseRefcountAndEventMatchesTheDocumentedTable() {
        int checked = 0;
        for (int phase = FREE; phase <= RETIRED; phase++) {
            for (int rc = 0; rc <= 2; rc++) {
                if ((phase == FREE || phase == RETIRED) && rc != 0 || phase == OWNED && rc == 0) {
                    continue; // not reachable
                }
                for (SlotEvent e : SlotEvent.values()) {
                    final long w = word(G, phase, rc);
                    assertEquals(describe(expected(phase, rc, e)), describe(SlotStateMachine.next(w, G, e)),
                        SlotStateMachine.describe(w) + " on " + e);
                    checked++;
                }
            }
        }
        assertEquals(9 * (1 + 2 + 3 + 3 + 3 + 1), checked);
    }

    @Test
    void aHandleOfAnotherGenerationIsStaleForEveryEventAndPhase() {
        for (int phase = OWNED; phase <= QUARANTINED; phase++) {
            for (SlotEvent e : SlotEvent.values()) {
                if (e == SlotEvent.ALLOCATE) {
                    continue;
                }
                assertEquals(ST, SlotStateMachine.next(word(G, phase, 1), G - 1, e), "older generation, " + e);
                assertEquals(ST, SlotStateMachine.next(word(G, phase, 1), G + 1, e), "newer generation, " + e);
            }
        }
    }

    @Test
    void pagesReachFreeOnlyWithoutReferencesAndWithoutAPin() {
        for (int phase = OWNED; phase <= QUARANTINED; phase++) {
            for (int rc = 0; rc <= 3; rc++) {
                for (SlotEvent e : SlotEvent.values()) {
                    final long next = SlotStateMachine.next(word(G, phase, rc), G, e);
                    if (next >= 0 && SlotStateMachine.phase(next) == FREE) {
                        final boolean lastRefUnpinned = phase == OWNED && rc == 1 && e == SlotEvent.RELEASE;
                        final boolean pinDroppedNoRefs = rc == 0 && (e == SlotEvent.COMMIT_RECEIVE || e == SlotEvent.DRAINED
                            || e == SlotEvent.RELEASE_QUARANTINE);
                        assertTrue(lastRefUnpinned || pinDroppedNoRefs, SlotStateMachine.describe(word(G, phase, rc)) + " --" + e + "--> FREE");
                    }
                }
            }
        }
    }

    @Test
    void quarantineIsLeftOnlyByAnExplicitRelease() {
        final Map<SlotEvent, Integer> leaving = new EnumMap<>(SlotEvent.class);
        for (SlotEvent e : SlotEvent.values()) {
            final long next = SlotStateMachine.next(word(G, QUARANTINED, 0), G, e);
            if (next >= 0 && SlotStateMachine.phase(next) != QUARANTINED) {
                leaving.put(e, SlotStateMachine.phase(next));
            }
        }
        assertEquals(Map.of(SlotEvent.RELEASE_QUARANTINE, FREE), leaving);
    }

    @Test
    void allocationBumpsTheGenerationAndRetiresAtTheMaximum() {
        assertEquals(word(1, OWNED, 1), SlotStateMachine.next(0L, 0, SlotEvent.ALLOCATE));
        final long last = word(PageHandle.MAX_GENERATION - 1, FREE, 0);
        assertEquals(word(PageHandle.MAX_GENERATION, OWNED, 1), SlotStateMachine.next(last, 0, SlotEvent.ALLOCATE));
        final long exhausted = word(PageHandle.MAX_GENERATION, FREE, 0);
        assertEquals(SlotState.RETIRED, SlotStateMachine.state(SlotStateMachine.next(exhausted, 0, SlotEvent.ALLOCATE)));
        assertTrue(word(PageHandle.MAX_GENERATION, QUARANTINED, SlotStateMachine.MAX_REFCOUNT) > 0, "state words stay non-negative");
    }

    @Test
    void refcountSaturatesWithACode() {
        final long full = word(G, OWNED, SlotStateMachine.MAX_REFCOUNT);
        assertEquals(PageHandle.REFCOUNT_OVERFLOW, SlotStateMachine.next(full, G, SlotEvent.RETAIN));
        assertEquals(word(G, OWNED, SlotStateMachine.MAX_REFCOUNT - 1), SlotStateMachine.next(full, G, SlotEvent.RELEASE));
    }

    private static String describe(long w) {
        return w < 0 ? PageHandle.toString(w) : SlotStateMachine.describe(w);
    }
}
