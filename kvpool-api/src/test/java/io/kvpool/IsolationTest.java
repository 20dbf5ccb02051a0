package io.kvpool;

import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;
import org.junit.jupiter.api.Test;

import static org.junit.jupiter.api.Assertions.*;

/**
 * After any sequence of operations, no live sequence and no stale handle can read another tenant's
 * data: the generation check refuses stale handles and freshly allocated pages hold the canary. Each
 * safeguard is then switched off alone to show that the harness catches the leak it prevents.
 */
class IsolationTest {

    private static final int STEPS = Integer.getInteger("kvpool.isolation.steps", 4_000);

    private static KvPool pool(Safeguard... off) {
        return TestPools.builder(40).maxContextTokens(64).unsafeDisable(off).build();
    }

    @ParameterizedTest
    @ValueSource(longs = {1, 2, 3, 42, 2026})
    void noTenantEverReadsAnotherTenantsKv(long seed) {
        try (KvPool pool = pool()) {
            final IsolationHarness.Result r = new IsolationHarness(pool, seed).run(STEPS);
            assertEquals(0, r.leaks(), r.firstLeak());
            assertTrue(r.tokensChecked() > 10_000, "the harness exercised reads: " + r);
            assertTrue(r.staleProbes() > 50 && r.staleRefused() > 0, "stale handles were probed and refused: " + r);
            final PoolSnapshot s = pool.verifyAccounting();
            assertEquals(0, s.inUse(), s.toString());
            assertEquals(0, s.reserved());
            assertTrue(s.prefixHits() > 0 && s.evictions() > 0, "prefix sharing and eviction happened: " + s);
        }
    }

    @ParameterizedTest
    @ValueSource(longs = {7, 8})
    void noLeakWithTheAllocatorCacheEither(long seed) {
        try (KvPool pool = TestPools.builder(40).maxContextTokens(64).threadCache(8).build()) {
            final IsolationHarness.Result r = new IsolationHarness(pool, seed).run(STEPS);
            assertEquals(0, r.leaks(), r.firstLeak());
            assertEquals(0, pool.verifyAccounting().inUse());
        }
    }

    @Test
    void withoutTheGenerationCheckStaleHandlesReadOtherTenantsData() {
        long leaks = 0;
        for (long seed = 1; seed <= 5 && leaks == 0; seed++) {
            try (KvPool pool = pool(Safeguard.GENERATION_CHECK)) {
                final IsolationHarness.Result r = new IsolationHarness(pool, seed).run(STEPS);
                leaks += r.leaks();
                if (r.leaks() > 0) {
                    assertTrue(r.firstLeak().contains("stale handle"), r.firstLeak());
                }
            }
        }
        assertTrue(leaks > 0, "the harness must catch the leak when the generation check is off");
    }

    @Test
    void withoutTheFreePageFillNewTenantsSeeOldData() {
        long leaks = 0;
        for (long seed = 1; seed <= 5 && leaks == 0; seed++) {
            try (KvPool pool = pool(Safeguard.FREE_PAGE_FILL)) {
                final IsolationHarness.Result r = new IsolationHarness(pool, seed).run(STEPS);
                leaks += r.leaks();
                if (r.leaks() > 0) {
                    assertTrue(r.firstLeak().contains("instead of the canary"), r.firstLeak());
                }
            }
        }
        assertTrue(leaks > 0, "the harness must catch the leak when freed pages are not filled");
    }
}
