package io.kvpool;

import org.junit.jupiter.api.Test;

import static org.junit.jupiter.api.Assertions.*;

/**
 * A sequence's page tables grow when an append is planned, before any page is taken: growing them while the taken
 * pages are recorded could fail (OutOfMemoryError) with pages allocated to nobody.
 */
class PageTableGrowthTest {

    private static final int TPP = TestPools.SMALL.tokensPerPage();

    @Test
    void anAppendPastTheAdmissionHasRoomForItsPagesBeforeTakingThem() {
        try (KvPool pool = TestPools.builder(128).reservationPolicy(ReservationPolicy.PROMPT_ONLY).build()) {
            final Sequence s = pool.admit(TPP, 0).sequence(); // one page admitted: the tables start that small
            for (int step = 0; step < 30; step++) { // ~260 tokens of 512
                final int n = 1 + step % 5 * TPP; // one token, or a few pages at once
                final int pages = s.planAppend(n);
                assertTrue(s.pageTableCapacity() >= s.pageCount() + pages, "step " + step + ": room for "
                    + s.pageTableCapacity() + " pages, " + s.pageCount() + " held and " + pages + " planned");
                s.append(n);
            }
            s.close();
            pool.verifyAccounting();
        }
    }
}
