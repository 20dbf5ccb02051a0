package io.kvpool;

import java.lang.invoke.MethodHandles;
import java.lang.invoke.VarHandle;

/**
 * The memory that holds the slots' state words. Production uses {@link #ofArray(int)}; the model-checking
 * test substitutes an implementation that lets a scheduler interleave every read and CAS.
 */
interface SlotWords {

    /** @return the word at {@code i}, with volatile semantics */
    long getVolatile(int i);

    /** Atomically sets the word at {@code i} to {@code update} if it equals {@code expected} (volatile semantics). */
    boolean compareAndSet(int i, long expected, long update);

    /** Sets the word at {@code i} with release semantics (ordered after every earlier access of this thread). */
    void setRelease(int i, long value);

    /** @return the number of words */
    int length();

    /** @return words on a plain {@code long[]} accessed through a {@link VarHandle}, all zero (FREE, generation 0) */
    static SlotWords ofArray(int length) {
        return new ArraySlotWords(length);
    }

    /** The production implementation. */
    final class ArraySlotWords implements SlotWords {
        private static final VarHandle WORDS = MethodHandles.arrayElementVarHandle(long[].class);
        private final long[] words;

        ArraySlotWords(int length) {
            this.words = new long[length];
        }

        @Override
        public long getVolatile(int i) {
            return (long) WORDS.getVolatile(words, i);
        }

        @Override
        public boolean compareAndSet(int i, long expected, long update) {
            return WORDS.compareAndSet(words, i, expected, update);
        }

        @Override
        public void setRelease(int i, long value) {
            WORDS.setRelease(words, i, value);
        }

        @Override
        public int length() {
            return words.length;
        }
    }
}
