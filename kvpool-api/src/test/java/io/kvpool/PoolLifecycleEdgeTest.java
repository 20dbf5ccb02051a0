package io.kvpool;

import org.junit.jupiter.api.Test;

import static org.junit.jupiter.api.Assertions.*;

/**
 * Edges of a page's and a pool's lifetime: no pin after close or on a published page, pins wound down after close
 * release the kept storage, a truncate within a shared last page keeps the growth guarantee, forks leave no
 * reservations behind, a tenancy at the last generation retires, a retired published page leaves the prefix index.
 */
class PoolLifecycleEdgeTest {

    @Test
    void aPublishedPageCannotBePinnedThroughTryTransitionEither() {
        try (KvPool pool = TestPools.pool(4)) {
            final Sequence s = pool.admit(new int[] {1, 2, 3, 4, 5}, 0, 3).sequence();
            s.append(5);
            TokenTags.writeSequence(s, 1, 0, 5);
            s.publish(new int[] {1, 2, 3, 4, 5}, 3);
            assertEquals(PageHandle.ILLEGAL_STATE, pool.tryTransition(s.pageHandle(0), SlotEvent.PIN_WRITER));
            assertEquals(SlotState.OWNED, pool.state(s.pageHandle(0)));
            s.close();
        }
    }

    @Test
    void noPinCanAppearAfterClose() {
        final KvPool pool = TestPools.pool(2);
        final long h = pool.tryAllocate();
        pool.close();
        assertThrows(IllegalStateException.class, () -> pool.tryTransition(h, SlotEvent.PIN_WRITER));
        assertThrows(IllegalStateException.class, () -> pool.handles().pinWriter(h));
    }

    @Test
    void truncatingWithinASharedLastPageKeepsTheGrowthGuarantee() {
        try (KvPool pool = TestPools.pool(5)) {
            final Sequence parent = pool.admit(8, 4).sequence(); // 3 pages
            parent.append(8);                                    // 2 full pages, 1 reserved
            final Sequence child = parent.fork();                 // full last page: child reserves its 1 page of growth
            assertEquals(1, child.reservedPages());
            child.truncate(7);                                    // within the shared page: no page dropped
            assertEquals(2, child.reservedPages(), "re-reserved the copy the next append needs");
            assertEquals(0, pool.snapshot().free() - pool.snapshot().reserved(), "no unreserved page left: " + pool.snapshot());
            child.append(5); // 7 → 12 tokens: copy page 1, then one new page; must not run out
            assertEquals(12, child.tokenCount());
            child.close();
            parent.close();
            pool.verifyAccounting();
        }
    }

    @Test
    void forkingAndDroppingChildrenDoesNotAccumulateReservations() {
        try (KvPool pool = TestPools.pool(16)) {
            final Sequence parent = pool.admit(6, 2).sequence(); // 2 pages
            parent.append(6);                                    // partial last page, 0 reserved
            for (int i = 0; i < 10; i++) {
                parent.fork().close();
            }
            assertEquals(1, parent.reservedPages(), "one copy-on-write credit, not ten");
            assertEquals(1, pool.snapshot().reserved());
            parent.close();
            pool.verifyAccounting();
        }
    }

    @Test
    void pinsWoundDownAfterCloseReleaseTheKeptStorage() {
        final KvPool pool = TestPools.pool(4);
        final long receiving = pool.tryAllocate();
        final long quarantined = pool.tryAllocate();
        pool.handles().pinWriter(receiving);
        pool.handles().pinWriter(quarantined);
        pool.handles().quarantine(quarantined);
        pool.close();
        assertTrue(pool.closeReport().orElseThrow().contains("NOT released"));
        pool.handles().beginDrain(receiving);
        pool.handles().drained(receiving);                 // still accepted after close
        assertNotNull(pool.storage().hostPage(0), "one page is still pinned: storage kept");
        pool.handles().releaseQuarantine(quarantined);    // the last pin: the transport proved the peer is gone
        assertThrows(IllegalStateException.class, () -> pool.storage().hostPage(0), "storage released with the last pin");
        assertThrows(IllegalStateException.class, () -> pool.retain(receiving), "nothing else works after close");
    }

    @Test
    void aTenancyAtTheLastGenerationRetiresOnReleaseAndNeverCountsAsFree() {
        try (KvPool pool = TestPools.pool(2)) {
            AdmissionTest.slots(pool).forceGenerationOfFreeSlot(0, PageHandle.MAX_GENERATION - 1);
            final long h = pool.tryAllocate();
            assertEquals(0, PageHandle.slot(h));
            assertEquals(PageHandle.MAX_GENERATION, PageHandle.generation(h));
            final Sequence s = pool.admit(4, 0).sequence(); // reserves the other page
            assertTrue(pool.release(h) == false, "the page did not become FREE");
            final PoolSnapshot snap = pool.verifyAccounting();
            assertEquals(1, snap.retired());
            assertEquals(1, snap.free());
            assertEquals(1, snap.reserved());
            assertThrows(StaleHandleException.class, () -> pool.release(h));
            s.append(4); // the reservation is still backed by a free page
            s.close();
            assertEquals(Admission.Decision.REJECTED_EXCEEDS_POOL, pool.admit(5, 0).decision(), "one page left in service");
        }
    }

    @Test
    void aRetiredPublishedPageLeavesThePrefixIndex() {
        try (KvPool pool = TestPools.pool(2)) {
            AdmissionTest.slots(pool).forceGenerationOfFreeSlot(0, PageHandle.MAX_GENERATION - 1);
            final int[] ids = {1, 2, 3, 4, 5};
            final Sequence s = pool.admit(ids, 0, TestPools.SALT).sequence();
            s.append(5);
            assertEquals(0, s.pageIndex(0));
            TokenTags.writeSequence(s, 1, 0, 5);
            s.publish(ids, TestPools.SALT);
            assertEquals(1, pool.snapshot().publishedPrefixes());
            s.close(); // slot 0's last tenancy ends: RETIRED, and out of the index
            final PoolSnapshot snap = pool.verifyAccounting();
            assertEquals(1, snap.retired());
            assertEquals(0, snap.publishedPrefixes());
        }
    }
}
