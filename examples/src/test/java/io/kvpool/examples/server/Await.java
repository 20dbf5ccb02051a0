package io.kvpool.examples.server;

import java.time.Duration;
import java.util.function.BooleanSupplier;
import java.util.function.Supplier;

import static org.junit.jupiter.api.Assertions.fail;

/** Waits for a condition the server reaches on its own threads (polling, never a fixed sleep). */
public final class Await {
    private Await() {
    }

    public static void until(BooleanSupplier condition, Duration timeout, Supplier<String> what) throws InterruptedException {
        final long end = System.nanoTime() + timeout.toNanos();
        while (!condition.getAsBoolean()) {
            if (System.nanoTime() - end > 0) {
                fail("timed out after " + timeout.toMillis() + " ms waiting for: " + what.get());
            }
            Thread.sleep(1);
        }
    }
}
