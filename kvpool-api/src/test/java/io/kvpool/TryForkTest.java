package io.kvpool;

import org.junit.jupiter.api.Test;

import java.lang.management.ManagementFactory;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * The exception-free fork: a full pool answers null, changes nothing and allocates nothing; a fork no freed page can
 * make fit throws, not retryable.
 */
class TryForkTest {

    @Test
    void tryForkAnswersNullWhenTheChildsReservationCannotBeHadAndChangesNothing() {
        try (KvPool pool = TestPools.pool(4)) { // 4 pages of 4 tokens
            final Sequence parent = pool.admit(6, 2).sequence(); // 2 pages reserved
            parent.append(6);                                     // 2 pages, the last partial
            final Sequence other = pool.admit(8, 0).sequence();  // the other 2 pages reserved
            final PoolSnapshot before = pool.snapshot();
            assertNull(parent.tryFork(), "the child needs its copy-on-write page reserved; none is free");
            assertEquals(before, pool.snapshot(), "a refused tryFork changes nothing");
            assertEquals(6, parent.tokenCount());
            final PoolExhaustedException e = assertThrows(PoolExhaustedException.class, parent::fork);
            assertTrue(e.getMessage().contains("0 are free and unreserved"), e.getMessage());
            other.close();
            final Sequence child = parent.tryFork();
            assertNotNull(child, "room again: the fork succeeds");
            assertEquals(6, child.tokenCount());
            child.close();
            parent.close();
            pool.verifyAccounting();
        }
    }

    @Test
    void aForkNoFreedPageCanMakeFitThrowsSayingNoWaitHelps() {
        try (KvPool pool = TestPools.pool(8)) { // 8 pages of 4 tokens
            final Sequence parent = pool.admit(4, 28).sequence(); // all 8 pages reserved
            parent.append(4);                                      // 1 held, 7 reserved
            final PoolSnapshot before = pool.snapshot();
            // the child needs 7 pages for its growth beside the parent's 8: nothing anyone frees makes room
            final PoolExhaustedException never = assertThrows(PoolExhaustedException.class, parent::tryFork);
            assertFalse(never.retryLater(), never::getMessage);
            assertTrue(never.getMessage().contains("at most 0 can ever be free beside this sequence (the pool's 8 pages in "
                + "service less its 1 held and 7 reserved)"), never::getMessage);
            assertEquals(before, pool.snapshot(), "a refused tryFork changes nothing");
            assertFalse(assertThrows(PoolExhaustedException.class, parent::fork).retryLater());
            parent.append(28); // grown to its admitted length: the child needs no page of its own
            final Sequence child = parent.fork();
            child.close();
            parent.close();
            pool.verifyAccounting();
        }
    }

    @Test
    void aForkThatPagesFreedElsewhereCanMakeFitIsRetryable() {
        try (KvPool pool = TestPools.pool(4)) {
            final Sequence parent = pool.admit(6, 2).sequence();
            parent.append(6);
            final Sequence other = pool.admit(8, 0).sequence(); // holds what the child needs
            assertNull(parent.tryFork());
            assertTrue(assertThrows(PoolExhaustedException.class, parent::fork).retryLater());
            other.close();
            parent.fork().close();
            parent.close();
        }
    }

    @Test
    void aRefusedTryForkAllocatesNothing() {
        final com.sun.management.ThreadMXBean threads = (com.sun.management.ThreadMXBean) ManagementFactory.getThreadMXBean();
        try (KvPool pool = TestPools.pool(4)) {
            final Sequence parent = pool.admit(6, 2).sequence();
            parent.append(6);
            final Sequence other = pool.admit(8, 0).sequence();
            for (int i = 0; i < 20_000; i++) { // warm up: the JIT settles the refused path
                assertNull(parent.tryFork());
            }
            final long before = threads.getCurrentThreadAllocatedBytes();
            for (int i = 0; i < 10_000; i++) {
                parent.tryFork();
            }
            final long allocated = threads.getCurrentThreadAllocatedBytes() - before;
            assertTrue(allocated < 10_000, "10,000 refused forks allocated " + allocated + " bytes");
            other.close();
            parent.close();
        }
    }
}
