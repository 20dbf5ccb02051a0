package io.kvpool.transfer.spi;

import org.junit.jupiter.api.Test;

import static org.junit.jupiter.api.Assertions.*;

class FixedRegistrationTest {

    @Test
    void holdsACopyOfItsKeyHandsOutCopiesAndCanNeverBeRevoked() {
        final byte[] key = {1, 2, 3};
        final FixedRegistration r = FixedRegistration.of(key);
        key[0] = 9; // the caller's array is not the registration's
        assertArrayEquals(new byte[] {1, 2, 3}, r.key());
        r.key()[1] = 9; // nor is the one it hands out
        assertArrayEquals(new byte[] {1, 2, 3}, r.key());
        assertFalse(r.revoke());
        r.close();
        r.close(); // idempotent
        assertFalse(r.revoke(), "still not revocable after close");
        assertArrayEquals(new byte[] {1, 2, 3}, r.key());
        assertThrows(NullPointerException.class, () -> FixedRegistration.of(null));
    }

    @Test
    void oneMadeByTakingKeepsAndHandsOutTheCallersArray() {
        final byte[] key = {1, 2, 3};
        final FixedRegistration r = FixedRegistration.taking(key);
        assertSame(key, r.key(), "no copy in or out");
        assertSame(r.key(), r.key());
        assertFalse(r.revoke());
        r.close();
        r.close(); // idempotent
        assertThrows(NullPointerException.class, () -> FixedRegistration.taking(null));
    }
}
