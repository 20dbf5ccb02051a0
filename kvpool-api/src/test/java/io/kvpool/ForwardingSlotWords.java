package io.kvpool;

/** Slot words that forward to an array of words; tests override the access they hook. */
abstract class ForwardingSlotWords implements SlotWords {
    final SlotWords d;

    ForwardingSlotWords(int n) {
        d = SlotWords.ofArray(n);
    }

    @Override
    public long getVolatile(int i) {
        return d.getVolatile(i);
    }

    @Override
    public boolean compareAndSet(int i, long expected, long update) {
        return d.compareAndSet(i, expected, update);
    }

    @Override
    public void setRelease(int i, long value) {
        d.setRelease(i, value);
    }

    @Override
    public int length() {
        return d.length();
    }
}
