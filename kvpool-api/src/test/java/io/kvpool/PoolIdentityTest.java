package io.kvpool;

import org.junit.jupiter.api.Test;

import java.lang.foreign.ValueLayout;
import java.util.ArrayList;
import java.util.HashSet;
import java.util.List;
import java.util.Set;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

/** Handles name their pool: a prefill pool's handle used on the decode pool of the same process reaches nothing. */
class PoolIdentityTest {

    private static final byte PREFILL_TENANT = 0x11;
    private static final byte DECODE_TENANT = 0x22;

    /** Both pools issue their first handle for slot 0, generation 1: only the pool id tells them apart. */
    private static long[] sameSlotHandles(KvPool prefill, KvPool decode) {
        final long p = prefill.tryAllocate();
        final long d = decode.tryAllocate();
        assertEquals(PageHandle.slot(p), PageHandle.slot(d));
        assertEquals(PageHandle.generation(p), PageHandle.generation(d));
        prefill.page(p).fill(PREFILL_TENANT);
        decode.page(d).fill(DECODE_TENANT);
        return new long[] {p, d};
    }

    @Test
    void aHandleOfALargerPoolBeyondThisPoolsSlotsIsForeignNotInvalid() {
        try (KvPool prefill = TestPools.pool(8); KvPool decode = TestPools.pool(4)) {
            long h = 0;
            for (int i = 0; i < 8; i++) {
                h = prefill.tryAllocate(); // the last is slot 7: beyond decode's four
            }
            final long foreign = h;
            assertTrue(PageHandle.slot(foreign) >= decode.capacity(), "a slot decode does not have");
            assertEquals(PageHandle.FOREIGN, decode.validate(foreign));
            final StaleHandleException e = assertThrows(StaleHandleException.class, () -> decode.page(foreign));
            assertEquals(StaleHandleException.Refusal.FOREIGN, e.refusal(), e::getMessage);
            assertTrue(e.getMessage().contains("issued by pool " + prefill.poolId()), e.getMessage());
            assertEquals(2, decode.snapshot().foreignHandlesRefused());
            assertEquals(PageHandle.INVALID, decode.validate(PageHandle.of(decode.poolId(), 7, 1)), "its own pool's, out of range");
        }
    }

    @Test
    void aSharedPoolIdIsNotHandedToAThirdPoolWhileOneOfItsSharersIsOpen() {
        final List<KvPool> open = new ArrayList<>();
        final java.util.Map<Integer, KvPool> byId = new java.util.HashMap<>();
        try {
            KvPool sharer = null, first = null;
            while (sharer == null) { // past 127 open pools an id is shared (a warning says so)
                final KvPool p = TestPools.pool(1);
                open.add(p);
                final KvPool had = byId.putIfAbsent(p.poolId(), p);
                if (had != null) {
                    sharer = p;
                    first = had;
                }
            }
            assertEquals(2, PoolIds.users(sharer.poolId()));
            first.close(); // the id's first user goes; its sharer stays open
            open.remove(first);
            final KvPool stays = sharer;
            for (int i = 0; i < 2; i++) { // room for a new pool under an id of its own: two pools of unshared ids go
                final KvPool other = open.stream().filter(p -> p != stays && PoolIds.users(p.poolId()) == 1).findFirst().orElseThrow();
                other.close();
                open.remove(other);
            }
            assertEquals(1, PoolIds.users(sharer.poolId()), "the sharer still holds its id");
            final KvPool fresh = TestPools.pool(1);
            open.add(fresh);
            assertNotEquals(sharer.poolId(), fresh.poolId(), "the sharer's id was handed out again while the sharer is open");
            final long theirs = sharer.tryAllocate();
            assertEquals(PageHandle.FOREIGN, fresh.validate(theirs), "a handle of another open pool is refused");
            sharer.release(theirs);
        } finally {
            open.forEach(KvPool::close);
        }
    }

    @Test
    void aHandleOfAnotherPoolIsRefusedEverywhereAStaleOneIsAndCounted() {
        try (KvPool prefill = TestPools.pool(4); KvPool decode = TestPools.pool(4)) {
            assertNotEquals(prefill.poolId(), decode.poolId());
            final long[] h = sameSlotHandles(prefill, decode);
            final long foreign = h[0];
            assertEquals(PageHandle.FOREIGN, decode.validate(foreign));
            final StaleHandleException e = assertThrows(StaleHandleException.class, () -> decode.page(foreign));
            assertTrue(e.getMessage().contains("issued by pool " + prefill.poolId()), e.getMessage());
            assertEquals(StaleHandleException.Refusal.FOREIGN, e.refusal(), "told apart from a stale handle without reading the message");
            assertEquals(foreign, e.handle());
            assertThrows(StaleHandleException.class, () -> decode.release(foreign));
            assertThrows(StaleHandleException.class, () -> decode.retain(foreign));
            assertThrows(StaleHandleException.class, () -> decode.firstCanaryToken(foreign, 0, 1));
            assertThrows(StaleHandleException.class, () -> decode.handles().pinWriter(foreign));
            assertThrows(StaleHandleException.class, () -> decode.handles().commitReceive(foreign));
            assertEquals(PageHandle.FOREIGN, decode.tryTransition(foreign, SlotEvent.RELEASE));
            assertNull(decode.state(foreign));
            assertEquals(1, decode.refcountOfSlot(PageHandle.slot(foreign)), "the decode tenant's page is untouched");
            final PoolSnapshot s = decode.snapshot();
            assertEquals(8, s.foreignHandlesRefused(), "eight refusals; state() is a query and counts nothing");
            assertEquals(0, s.staleHandlesRefused());
            assertEquals(8, decode.metrics().foreignHandlesRefused());
            assertEquals(0, prefill.metrics().foreignHandlesRefused());
            prefill.release(h[0]);
            decode.release(h[1]);
            decode.verifyAccounting();
        }
    }

    /** The control: with the pool identity check off, the same mistake reads the decode tenant's KV. */
    @Test
    void withoutTheIdentityCheckAPrefillHandleReadsTheDecodeTenantsKv() {
        try (KvPool prefill = TestPools.pool(4);
             KvPool decode = TestPools.builder(4).unsafeDisable(Safeguard.POOL_IDENTITY_CHECK).build()) {
            final long[] h = sameSlotHandles(prefill, decode);
            final byte[] leaked = decode.page(h[0]).toArray(ValueLayout.JAVA_BYTE);
            final byte[] decodeTenant = new byte[leaked.length];
            java.util.Arrays.fill(decodeTenant, DECODE_TENANT);
            assertArrayEquals(decodeTenant, leaked, "the prefill handle reached the decode tenant's page");
            prefill.release(h[0]);
            decode.release(h[1]);
        }
    }

    @Test
    void openPoolsHaveDistinctIdsAndAClosedPoolsIdComesBackLast() {
        final List<KvPool> open = new ArrayList<>();
        try {
            final Set<Integer> ids = new HashSet<>();
            for (int i = 0; i < 40; i++) {
                final KvPool p = TestPools.pool(1);
                open.add(p);
                assertTrue(ids.add(p.poolId()), "pool id " + p.poolId() + " given to two open pools");
                assertTrue(p.poolId() >= 1 && p.poolId() <= PageHandle.MAX_POOL, "id " + p.poolId());
            }
            final int closedId = open.get(0).poolId();
            open.remove(0).close();
            final KvPool next = TestPools.pool(1);
            open.add(next);
            assertNotEquals(closedId, next.poolId(), "a closed pool's id is not the next one handed out");
        } finally {
            open.forEach(KvPool::close);
        }
    }

    @Test
    void theHandleLayoutCarriesPoolSlotAndGeneration() {
        final long h = PageHandle.of(PageHandle.MAX_POOL, PageHandle.MAX_SLOT, PageHandle.MAX_GENERATION);
        assertTrue(h > 0, "bit 63 stays clear");
        assertEquals(PageHandle.MAX_POOL, PageHandle.pool(h));
        assertEquals(PageHandle.MAX_SLOT, PageHandle.slot(h));
        assertEquals(PageHandle.MAX_GENERATION, PageHandle.generation(h));
        final long g = PageHandle.of(3, 12, 7);
        assertEquals((3L << 56) | (7L << 24) | 12, g);
        assertEquals("page[pool=3, slot=12, gen=7]", PageHandle.toString(g));
        assertEquals(0, PageHandle.pool(PageHandle.of(12, 7)));
        assertThrows(IllegalArgumentException.class, () -> PageHandle.of(PageHandle.MAX_POOL + 1, 0, 1));
        assertThrows(IllegalArgumentException.class, () -> PageHandle.of(-1, 0, 1));
    }
}
