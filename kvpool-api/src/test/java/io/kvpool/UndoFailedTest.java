package io.kvpool;

import org.junit.jupiter.api.Test;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertDoesNotThrow;
import static org.junit.jupiter.api.Assertions.assertSame;
import static org.junit.jupiter.api.Assertions.assertThrows;

/** {@link PoolAllocations#undoFailed}: the first failure is the one the caller hears of, unless the undo ran out of the JVM. */
class UndoFailedTest {

    @Test
    void whatTheUndoThrowsIsSuppressedInTheFirstFailure() {
        final IllegalStateException fill = new IllegalStateException("fill");
        final IllegalStateException closed = new IllegalStateException("kvpool is closed");
        PoolAllocations.undoFailed(fill, closed);
        assertArrayEquals(new Throwable[] {closed}, fill.getSuppressed());
    }

    @Test
    void anUndoThatRethrowsTheSameInstanceDoesNotReplaceIt() {
        final IllegalStateException shared = new IllegalStateException("one instance, thrown again by the undo");
        assertDoesNotThrow(() -> PoolAllocations.undoFailed(shared, shared));
        assertArrayEquals(new Throwable[0], shared.getSuppressed());
    }

    @Test
    void anUndoOutOfMemoryAfterAnExceptionIsThrownWithTheExceptionSuppressed() {
        final IllegalStateException fill = new IllegalStateException("fill");
        final OutOfMemoryError oom = new OutOfMemoryError("undo");
        final OutOfMemoryError thrown = assertThrows(OutOfMemoryError.class, () -> PoolAllocations.undoFailed(fill, oom));
        assertSame(oom, thrown);
        assertArrayEquals(new Throwable[] {fill}, oom.getSuppressed());
    }
}
