package io.kvpool;

import org.junit.jupiter.api.Test;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertDoesNotThrow;
import static org.junit.jupiter.api.Assertions.assertSame;
import static org.junit.jupiter.api.Assertions.assertThrows;

/** {@link PoolAllocations#undoAfter}: the first failure is the one the caller hears of, unless the undo ran out of the JVM. */
class UndoAfterTest {

    @Test
    void whatTheUndoThrowsIsSuppressedInTheFirstFailure() {
        final IllegalStateException fill = new IllegalStateException("fill");
        final IllegalStateException closed = new IllegalStateException("kvpool is closed");
        PoolAllocations.undoAfter(fill, () -> {
            throw closed;
        });
        assertArrayEquals(new Throwable[] {closed}, fill.getSuppressed());
    }

    @Test
    void anUndoThatRethrowsTheSameInstanceDoesNotReplaceIt() {
        final IllegalStateException shared = new IllegalStateException("one instance, thrown again by the undo");
        assertDoesNotThrow(() -> PoolAllocations.undoAfter(shared, () -> {
            throw shared;
        }));
        assertArrayEquals(new Throwable[0], shared.getSuppressed());
    }

    @Test
    void anUndoOutOfMemoryAfterAnExceptionIsThrownWithTheExceptionSuppressed() {
        final IllegalStateException fill = new IllegalStateException("fill");
        final OutOfMemoryError oom = new OutOfMemoryError("undo");
        final OutOfMemoryError thrown = assertThrows(OutOfMemoryError.class, () -> PoolAllocations.undoAfter(fill, () -> {
            throw oom;
        }));
        assertSame(oom, thrown);
        assertArrayEquals(new Throwable[] {fill}, oom.getSuppressed());
    }
}
