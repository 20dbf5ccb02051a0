package io.kvpool.examples.server.role;

import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.ThreadLocalRandom;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.atomic.AtomicReference;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

/** {@link DutyCycle}'s promise to its callers: a submit that races close either runs its command or throws, never neither. */
@Timeout(value = 60, unit = TimeUnit.SECONDS)
class DutyCycleTest {

    @Test
    void aSubmitThatPassedTheClosedCheckBeforeCloseDrainedIsRefusedNotLost() throws Exception {
        final CountDownLatch inWindow = new CountDownLatch(1);
        final CountDownLatch closedDone = new CountDownLatch(1);
        final DutyCycle duty = new DutyCycle("test-duty", () -> 0, () -> {
        }, () -> {
            if (Thread.currentThread().getName().equals("racer")) {
                inWindow.countDown();
                await(closedDone); // close stops the thread and drains the queue while this submit sits past its check
            }
        });
        final AtomicLong ran = new AtomicLong();
        final AtomicReference<Throwable> thrown = new AtomicReference<>();
        final Thread racer = Thread.ofPlatform().name("racer").start(() -> {
            try {
                duty.submit(ran::incrementAndGet);
            } catch (Throwable t) {
                thrown.set(t);
            }
        });
        assertTrue(inWindow.await(10, TimeUnit.SECONDS));
        duty.close();
        closedDone.countDown();
        racer.join(10_000);
        assertTrue(ran.get() == 1 || thrown.get() instanceof IllegalStateException,
            () -> "the submit returned normally but its command never ran (ran " + ran + ", thrown " + thrown + ")");
        assertEquals(0, ran.get(), "nothing runs commands after close");
        assertThrows(IllegalStateException.class, () -> duty.submit(() -> {
        }));
    }

    @Test
    void underManySubmittersRacingCloseEverySubmitRunsOrThrows() throws Exception {
        for (int round = 0; round < 150; round++) {
            final DutyCycle duty = new DutyCycle("test-duty-" + round, () -> 0, () -> {
            });
            final AtomicLong accepted = new AtomicLong();
            final AtomicLong ran = new AtomicLong();
            final List<Thread> submitters = new ArrayList<>();
            final CountDownLatch go = new CountDownLatch(1);
            for (int t = 0; t < 4; t++) {
                submitters.add(Thread.ofPlatform().start(() -> {
                    await(go);
                    while (true) {
                        try {
                            duty.submit(ran::incrementAndGet);
                            accepted.incrementAndGet();
                        } catch (IllegalStateException closed) {
                            return;
                        }
                    }
                }));
            }
            go.countDown();
            final long spin = ThreadLocalRandom.current().nextLong(20_000, 200_000);
            for (long end = System.nanoTime() + spin; System.nanoTime() < end; ) {
                Thread.onSpinWait();
            }
            duty.close();
            for (Thread t : submitters) {
                t.join(10_000);
            }
            assertEquals(accepted.get(), ran.get(), "round " + round + ": accepted submits whose command never ran");
        }
    }

    private static void await(CountDownLatch l) {
        try {
            l.await(10, TimeUnit.SECONDS);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        }
    }
    @Test
    void anErrorInTheDutyCycleDoesNotStopItAndCloseStillShutsDown() throws Exception {
        // an Error (an AssertionError of a codec, an OutOfMemoryError) escaped Agrona's runner and ended the thread:
        // commands were accepted and never ran, and the role's close never ran its shutdown
        final java.util.concurrent.atomic.AtomicBoolean boom = new java.util.concurrent.atomic.AtomicBoolean(true);
        final CountDownLatch shut = new CountDownLatch(1);
        final DutyCycle cycle = new DutyCycle("t", () -> {
            if (boom.getAndSet(false)) {
                throw new AssertionError("a bug in the duty cycle");
            }
            return 0;
        }, shut::countDown);
        final long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(5);
        while (cycle.failures() == 0 && System.nanoTime() < deadline) { // the first cycle's work throws the Error
            Thread.sleep(1);
        }
        assertEquals(1, cycle.failures(), "the Error is counted (and logged)");
        final CountDownLatch ran = new CountDownLatch(1);
        cycle.submit(ran::countDown);
        assertTrue(ran.await(2, TimeUnit.SECONDS), "a command after the Error never ran: the duty thread died");
        cycle.submit(() -> {
            throw new AssertionError("a command that fails at close");
        });
        cycle.close();
        assertEquals(0, shut.getCount(), "close ran no shutdown");
    }
}
