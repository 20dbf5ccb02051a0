package io.kvpool.transfer.ucx;

import org.junit.jupiter.api.Test;
import org.opentest4j.AssertionFailedError;
import org.opentest4j.TestAbortedException;

import java.util.Optional;

import static io.kvpool.transfer.ucx.UcxTestSupport.decide;
import static org.junit.jupiter.api.Assertions.*;

/** The skip/require rule of the UCX tests; runs with or without UCX. */
class UcxSkipRuleTest {

    @Test
    void unavailableSkipsWithTheReasonUnlessRequiredThenFails() {
        decide(Optional.empty(), true); // available: nothing happens either way
        decide(Optional.empty(), false);
        final TestAbortedException skip = assertThrows(TestAbortedException.class,
            () -> decide(Optional.of("UnsatisfiedLinkError: libucp.so.0"), false));
        assertTrue(skip.getMessage().contains("libucp.so.0"), skip.getMessage());
        final AssertionFailedError fail = assertThrows(AssertionFailedError.class,
            () -> decide(Optional.of("UnsatisfiedLinkError: libucp.so.0"), true));
        assertTrue(fail.getMessage().contains("libucp.so.0"), fail.getMessage());
    }
}
