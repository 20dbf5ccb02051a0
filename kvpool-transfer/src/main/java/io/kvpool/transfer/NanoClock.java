package io.kvpool.transfer;

/** A monotonic clock in nanoseconds, injected so tests drive deadlines deterministically. */
@FunctionalInterface
public interface NanoClock {
    /** The JVM's monotonic clock. */
    NanoClock SYSTEM = System::nanoTime;

    /** {@return a monotonic time in nanoseconds (only differences mean anything)} */
    long nanoTime();
}
