package io.kvpool;

import org.junit.jupiter.api.Test;

import static org.junit.jupiter.api.Assertions.*;

class SmokeTest {
    @Test
    void admitAppendForkClose() {
        try (KvPool pool = TestPools.pool(16)) {
            Admission a = pool.admit(10, 6);
            assertTrue(a.admitted(), a::toString);
            Sequence s = a.sequence();
            assertEquals(4, s.reservedPages());
            s.append(10);
            assertEquals(3, s.pageCount());
            Sequence f = s.fork();
            f.append(1);
            s.append(1);
            assertNotEquals(s.pageIndex(2), f.pageIndex(2));
            assertEquals(s.pageIndex(0), f.pageIndex(0));
            s.close();
            f.close();
            PoolSnapshot snap = pool.verifyAccounting();
            assertEquals(16, snap.free());
            assertEquals(0, snap.reserved());
        }
    }
}
