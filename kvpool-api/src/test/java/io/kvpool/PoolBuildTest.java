package io.kvpool;

import io.kvpool.storage.HostPageStorage;
import org.junit.jupiter.api.Test;

import static org.junit.jupiter.api.Assertions.*;

/** Sizing and the startup capacity check. */
class PoolBuildTest {

    private static final KvLayout TINY = new KvLayout(1, 1, 8, DType.FP8, 16); // 256-byte pages

    @Test
    void theIncidentConfigurationFailsAtStartupWithBothNumbers() {
        // 2026: 1,048,576 tokens advertised, the prefill pool held 681,280 (42,580 pages of 16 tokens)
        final PoolCapacityException e = assertThrows(PoolCapacityException.class,
            () -> KvPool.builder(TINY).pages(42_580).maxContextTokens(1_048_576).build());
        assertTrue(e.getMessage().contains("1,048,576"), e.getMessage());
        assertTrue(e.getMessage().contains("681,280"), e.getMessage());
        assertTrue(e.getMessage().contains("largest safe context is 681,280"), e.getMessage());
        assertEquals(1_048_576, e.advertisedContextTokens());
        assertEquals(681_280, e.poolTokens());
    }

    @Test
    void clampIsAnExplicitOptIn() {
        try (KvPool pool = KvPool.builder(TINY).pages(42_580).maxContextTokens(1_048_576).contextPolicy(ContextPolicy.CLAMP).build()) {
            assertEquals(681_280, pool.maxContextTokens());
            assertEquals(Admission.Decision.REJECTED_CONTEXT_TOO_LONG, pool.admit(681_280, 1).decision());
            assertEquals(Admission.Decision.ADMITTED, pool.admit(681_000, 280).decision());
        }
    }

    @Test
    void aContextThatExactlyFitsBuilds() {
        try (KvPool pool = KvPool.builder(TINY).pages(4).maxContextTokens(64).build()) {
            assertEquals(64, pool.maxContextTokens());
        }
        assertThrows(PoolCapacityException.class, () -> KvPool.builder(TINY).pages(4).maxContextTokens(65).build());
    }

    @Test
    void sizedFromAByteBudget() {
        try (KvPool pool = KvPool.builder(TINY).byteBudget(256 * 10 + 255).maxContextTokens(16).build()) {
            assertEquals(10, pool.capacity());
        }
        final IllegalArgumentException e = assertThrows(IllegalArgumentException.class,
            () -> KvPool.builder(TINY).byteBudget(255).maxContextTokens(16).build());
        assertTrue(e.getMessage().contains("255") && e.getMessage().contains("256"), e.getMessage());
    }

    @Test
    void badSizesAreRefused() {
        assertThrows(IllegalArgumentException.class, () -> KvPool.builder(TINY).pages(0).maxContextTokens(1).build());
        assertThrows(IllegalArgumentException.class, () -> KvPool.builder(TINY).pages(-5).maxContextTokens(1).build());
        assertThrows(IllegalArgumentException.class, () -> KvPool.builder(TINY).pages(PageHandle.MAX_SLOT + 2L).maxContextTokens(1).build());
        assertThrows(IllegalArgumentException.class, () -> KvPool.builder(TINY).byteBudget(-1).maxContextTokens(1).build());
        assertTrue(assertThrows(IllegalArgumentException.class, () -> KvPool.builder(TINY).maxContextTokens(1).build())
            .getMessage().contains("pages(n) or byteBudget"));
        assertTrue(assertThrows(IllegalArgumentException.class, () -> KvPool.builder(TINY).pages(4).build())
            .getMessage().contains("maxContextTokens"));
        assertThrows(IllegalArgumentException.class, () -> KvPool.builder(TINY).pages(4).maxContextTokens(0).build());
        assertThrows(IllegalArgumentException.class, () -> KvPool.builder(TINY).maxReservations(0));
        assertThrows(IllegalArgumentException.class, () -> KvPool.builder(TINY).maxReservations((1 << 24) + 1)); // what an id names
        assertThrows(NullPointerException.class, () -> KvPool.builder(null));
    }

    @Test
    void aNegativeSizeOrContextIsRefusedWithItsNumberWhateverWasSetBefore() {
        final java.util.function.Function<java.util.function.Supplier<KvPoolBuilder>, String> refusal = b ->
            assertThrows(IllegalArgumentException.class, () -> b.get().build()).getMessage();
        // a page count replaces a byte budget set before it, a bad one included
        String m = refusal.apply(() -> KvPool.builder(TINY).byteBudget(1 << 20).pages(-7).maxContextTokens(1));
        assertTrue(m.contains("-7"), m);
        m = refusal.apply(() -> KvPool.builder(TINY).pages(-7).maxContextTokens(1));
        assertTrue(m.contains("-7"), m);
        m = refusal.apply(() -> KvPool.builder(TINY).byteBudget(-5).maxContextTokens(1));
        assertTrue(m.contains("-5"), m);
        m = refusal.apply(() -> KvPool.builder(TINY).pages(4).maxContextTokens(-1));
        assertTrue(m.contains("-1") && !m.contains("set maxContextTokens"), m);
        // the most negative long is a value too, not "not set"
        final String min = Long.toString(Long.MIN_VALUE);
        m = refusal.apply(() -> KvPool.builder(TINY).pages(Long.MIN_VALUE).maxContextTokens(1));
        assertTrue(m.contains(min), m);
        m = refusal.apply(() -> KvPool.builder(TINY).byteBudget(Long.MIN_VALUE).maxContextTokens(1));
        assertTrue(m.contains(min), m);
        m = refusal.apply(() -> KvPool.builder(TINY).pages(4).maxContextTokens(Long.MIN_VALUE));
        assertTrue(m.contains(min), m);
        try (KvPool p = KvPool.builder(TINY).byteBudget(1 << 20).pages(3).maxContextTokens(1).build()) {
            assertEquals(3, p.capacity(), "the later pages(n) wins");
        }
    }

    @Test
    void aStorageOfTheWrongShapeIsRefusedAndClosed() {
        final HostPageStorage[] made = new HostPageStorage[1];
        final IllegalArgumentException e = assertThrows(IllegalArgumentException.class, () -> KvPool.builder(TINY).pages(4)
            .maxContextTokens(16).storage((layout, pages) -> made[0] = HostPageStorage.allocate(layout, pages + 1)).build());
        assertTrue(e.getMessage().contains("5 pages"), e.getMessage());
        assertThrows(IllegalStateException.class, () -> made[0].hostPage(0), "the wrong storage was closed");
    }

    @Test
    void hostPagesAreAlignedAndStartAsCanary() {
        try (KvPool pool = KvPool.builder(TINY).pages(3).maxContextTokens(48).build()) {
            final HostPageStorage storage = (HostPageStorage) pool.storage();
            assertEquals(0, storage.segment().address() % 256);
            for (int p = 0; p < 3; p++) {
                assertEquals(0, storage.hostPage(p).address() % 256);
                assertEquals(0, storage.firstCanaryToken(p, 0, 16));
            }
        }
    }
}
