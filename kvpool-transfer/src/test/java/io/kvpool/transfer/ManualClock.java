package io.kvpool.transfer;

/** A clock the test moves. */
final class ManualClock implements NanoClock {
    long now = 1_000_000_000L;

    @Override
    public long nanoTime() {
        return now;
    }

    void advanceMillis(long ms) {
        now += ms * 1_000_000L;
    }
}
