package io.kvpool;

import io.kvpool.storage.FillMode;
import io.kvpool.storage.HostPageStorage;
import org.junit.jupiter.api.Test;

import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicReference;

import static org.junit.jupiter.api.Assertions.*;

/**
 * A truncate frees pages lock-free and re-reserves the regrowth its sequence was admitted for: an admission on
 * another thread in between must not take those pages.
 */
class TruncateReservationTest {

    private static final int PAGES = 34;
    private static final int TPP = TestPools.SMALL.tokensPerPage();

    @Test
    void aTruncateKeepsItsRegrowthWhileAnotherThreadAdmitsDuringItsRelease() throws Exception {
        final AtomicReference<FillGate> gate = new AtomicReference<>();
        try (KvPool pool = TestPools.builder(PAGES).fillMode(FillMode.CANARY)
            .storage((layout, n) -> {
                final FillGate g = new FillGate(HostPageStorage.allocate(layout, n));
                gate.set(g);
                return g;
            }).build()) {
            final Sequence s = pool.admit(PAGES * TPP, 0).sequence();
            s.append(PAGES * TPP); // every page of the pool, none left reserved
            assertEquals(0, s.reservedPages());

            // the truncate's release frees pages in runs of 32: stop it at the 33rd fill, with 32 pages already free
            gate.get().stopAtFill(33);
            final AtomicReference<Throwable> failed = new AtomicReference<>();
            final Thread truncating = Thread.ofPlatform().start(() -> {
                try {
                    s.truncate(0);
                } catch (Throwable t) {
                    failed.set(t);
                }
            });
            assertTrue(gate.get().stopped.await(10, TimeUnit.SECONDS), "the release reached its 33rd page");
            final Admission other = pool.admit(32 * TPP, 0); // 32 pages are free now; all of them are s's to regrow into
            gate.get().go.countDown();
            truncating.join(10_000);
            assertNull(failed.get());

            assertFalse(other.admitted(), "an admission took the pages a truncate freed for its own regrowth: " + other.message());
            assertEquals(PAGES, s.reservedPages(), "the truncated sequence's reservation: " + pool.snapshot());
            assertDoesNotThrow(() -> s.append(PAGES * TPP), "regrowing within the admission");
            s.close();
            assertEquals(0, pool.snapshot().reserved());
        }
    }

    @Test
    void aTruncateOfPagesSharedElsewhereReservesOnlyWhatIsFree() {
        try (KvPool pool = TestPools.pool(6)) {
            final Sequence s = pool.admit(4 * TPP, 0).sequence();
            s.append(4 * TPP);
            final Sequence child = s.fork(); // every page full and shared now: the fork reserves nothing
            s.truncate(0); // frees nothing (the child holds every page); 2 pages are free and unreserved
            assertEquals(2, s.reservedPages(), pool.snapshot().toString());
            assertEquals(2, pool.snapshot().reserved(), pool.snapshot().toString());
            pool.verifyAccounting(); // reserved ≤ free
            child.close();
            s.close();
            assertEquals(0, pool.snapshot().reserved());
        }
    }

    /** Host storage whose fills can be stopped at the n-th one from now, until released. */
    static final class FillGate extends ForwardingStorage {
        final CountDownLatch stopped = new CountDownLatch(1), go = new CountDownLatch(1);
        private final AtomicInteger fills = new AtomicInteger();
        private volatile int stopAt = -1;

        FillGate(HostPageStorage d) {
            super(d);
        }

        void stopAtFill(int n) {
            fills.set(0);
            stopAt = n;
        }

        @Override
        public void fill(int page, FillMode mode) {
            if (stopAt > 0 && fills.incrementAndGet() == stopAt) {
                stopped.countDown();
                try {
                    go.await(10, TimeUnit.SECONDS);
                } catch (InterruptedException e) {
                    Thread.currentThread().interrupt();
                }
            }
            d.fill(page, mode);
        }
    }
}
