package io.kvpool;

import org.junit.jupiter.api.Test;

import static org.junit.jupiter.api.Assertions.*;

/** A refused {@link KvPool#appendEach} names the batch member it refuses, as its other refusals do. */
class AppendEachRefusalNamesTheMemberTest {

    @Test
    void aClosedSequenceInABatchIsNamedByItsIndex() {
        try (KvPool pool = TestPools.builder(16).build()) {
            final Sequence a = pool.admit(2, 2).sequence(), b = pool.admit(2, 2).sequence(), closed = pool.admit(1, 1).sequence();
            closed.close();
            final IllegalStateException e = assertThrows(IllegalStateException.class,
                () -> pool.appendEach(new Sequence[] {a, b, closed}, 3, 1));
            assertTrue(e.getMessage().startsWith("batch[2]"), e.getMessage());
            assertTrue(e.getMessage().contains("closed"), e.getMessage());
            assertEquals(0, a.tokenCount() + b.tokenCount(), "nothing changed");
            a.close();
            b.close();
        }
    }

    @Test
    void aSequencePastTheMaxContextInABatchIsNamedByItsIndex() {
        try (KvPool pool = TestPools.builder(16).build()) {
            final Sequence a = pool.admit(2, 2).sequence(), b = pool.admit(2, 2).sequence();
            final long max = pool.maxContextTokens();
            b.append(2);
            final IllegalArgumentException e = assertThrows(IllegalArgumentException.class,
                () -> pool.appendEach(new Sequence[] {a, b}, 2, (int) max - 1));
            assertTrue(e.getMessage().startsWith("batch[1]"), e.getMessage());
            assertTrue(e.getMessage().contains(Long.toString(max)), e.getMessage());
            assertEquals(0, a.tokenCount(), "nothing changed");
            assertEquals(2, b.tokenCount(), "nothing changed");
            a.close();
            b.close();
        }
    }
}
