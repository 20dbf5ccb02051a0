package io.kvpool.transfer;

import org.junit.jupiter.api.Test;

import static org.junit.jupiter.api.Assertions.*;

/**
 * The soak of link retirement: the leak hunter's chaos on links that cannot revoke one registration (UCX over
 * tcp, shared memory across processes), where every suspect write needs its link's teardown as proof. Torn down at
 * once, the link took every other transfer in flight on it down too (collateral {@code PEER_LOST}); retired, it takes
 * no new transfer, finishes those in flight, and only then is torn down. The same runs, both ways, with nothing leaked,
 * nothing corrupted and every pool balanced either way.
 *
 * <p>A <em>collateral</em> failure is one of a transfer that was not the suspect: failed {@code PEER_LOST} because the
 * receiver tore its link down, or timed out while its link was RETIRING ({@link LeakHunter.Report#collateral}).
 *
 * <p>{@code -Dkvpool.soak.transfers=N} sets the length of each run (default 20,000), {@code -Dkvpool.hunter.seed=S}
 * the seed. The numbers in docs/transfer.md: {@code ./dev mvn -o -q -pl kvpool-transfer -am test
 * -Dtest=LinkRetirementSoakTest -Dsurefire.failIfNoSpecifiedTests=false
 * -Dkvpool.test.argLine="-Dkvpool.soak.transfers=100000"}.
 */
class LinkRetirementSoakTest {

    static LeakHunter.Report soak(boolean retire, boolean frozenWrites) {
        return soak(retire, frozenWrites, new LeakHunter.Config().seed);
    }

    static LeakHunter.Report soak(boolean retire, boolean frozenWrites, long seed) {
        final LeakHunter.Config c = new LeakHunter.Config();
        c.seed = seed;
        c.transfers = Integer.getInteger("kvpool.soak.transfers", 20_000);
        c.revocableLinks = false;
        c.retireSuspectLinks = retire;
        if (!frozenWrites) {
            c.faults = c.faults.withStragglers(0, 0, 0);
        }
        final LeakHunter.Report r = LeakHunter.hunt(c);
        System.out.println("soak (" + (frozenWrites ? "with" : "no") + " frozen writes), suspect links "
            + (retire ? "retired:   " : "torn down: ") + r);
        assertEquals(0, r.leaks + r.corrupted, r::toString);
        assertTrue(r.balanced, r::toString);
        return r;
    }

    @Test
    void retiringALinkAfterAnUnprovenWriteSparesTheTransfersInFlightOnIt() {
        // writes that fail, are lost, misdirected or corrupted: their outcome is unknown, the link itself is fine
        final LeakHunter.Report torn = soak(false, false);
        final LeakHunter.Report retired = soak(true, false);
        assertTrue(torn.collateral >= 50, () -> "the chaos must make collateral failures to compare: " + torn);
        assertTrue(retired.linksRetired > 0, () -> "no link was retired: " + retired);
        assertTrue(retired.collateral * 10 <= torn.collateral,
            () -> "collateral failures: retired " + retired.collateral + " vs torn down at once " + torn.collateral);
        assertTrue(retired.committed > torn.committed, () -> "retirement committed no more: " + retired + " vs " + torn);
    }

    @Test
    void aFrozenWriteStallsItsLinkEitherWayAndRetirementIsNoWorseOverThreeSeeds() {
        // a write frozen 30-80 ms holds every later flush on its link (as an endpoint flush waits for every put):
        // the transfers behind it cannot prove their writes before their deadline, retired or torn down. Which way fails
        // more in one run depends on the seed (each way has lost at some seed, by up to 30 %), so three seeds are summed
        long torn = 0;
        long retired = 0;
        final long first = new LeakHunter.Config().seed;
        for (long seed = first; seed < first + 3; seed++) {
            torn += soak(false, true, seed).collateral;
            retired += soak(true, true, seed).collateral;
        }
        final long t = torn;
        final long r = retired;
        assertTrue(r <= t, () -> "collateral failures over three seeds: retired " + r + " vs torn down at once " + t);
    }

}
