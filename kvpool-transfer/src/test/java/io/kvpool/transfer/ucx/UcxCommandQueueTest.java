package io.kvpool.transfer.ucx;

import io.kvpool.transfer.TransferException;
import io.kvpool.transfer.spi.LinkFailedException;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

import java.time.Duration;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.atomic.AtomicReference;

import static io.kvpool.transfer.ucx.UcxTestSupport.assumeUcx;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * The UCX thread's command queue: a command whose caller gave up (its call timed out) does nothing, or hands what it
 * made to its clean-up; and a command the queue accepted always runs, also when the transport closes meanwhile.
 */
@Timeout(120)
class UcxCommandQueueTest {

    @Test
    void aCallWhoseCallerGaveUpDoesNothingOrHandsItsResultToItsCleanUp() throws Exception {
        assumeUcx();
        try (UcxTransport t = UcxTransport.open("queue")) {
            final CountDownLatch busy = new CountDownLatch(1);
            t.execute(() -> {
                try {
                    busy.await(); // the UCX thread is stuck: every call queued behind this waits
                } catch (InterruptedException e) {
                    Thread.currentThread().interrupt();
                }
            });
            final AtomicBoolean ran = new AtomicBoolean();
            final AtomicReference<Object> abandoned = new AtomicReference<>();
            assertThrows(TransferException.class, () -> t.call(() -> {
                ran.set(true);
                return "made too late";
            }, Duration.ofMillis(100), abandoned::set));
            busy.countDown();
            assertEquals(0, t.linkCount()); // a call that waits for the queue to drain
            assertFalse(ran.get(), "a command whose caller gave up before it ran must not run");

            assertThrows(TransferException.class, () -> t.call(() -> {
                Thread.sleep(300); // running when its caller gives up
                return "made";
            }, Duration.ofMillis(100), abandoned::set));
            t.linkCount();
            assertEquals("made", abandoned.get(), "what a command made after its caller gave up goes to its clean-up");
        }
    }

    @Test
    void aCommandThatMakesNothingRunsEvenIfItsCallerWasInterrupted() throws Exception {
        // a close or a teardown: skipped, it would leave an endpoint open or a quarantine unproven for good
        assumeUcx();
        try (UcxTransport t = UcxTransport.open("release")) {
            final CountDownLatch busy = new CountDownLatch(1);
            t.execute(() -> {
                try {
                    busy.await();
                } catch (InterruptedException e) {
                    Thread.currentThread().interrupt();
                }
            });
            final AtomicBoolean released = new AtomicBoolean();
            Thread.currentThread().interrupt(); // e.g. a duty thread that its runner interrupts while it shuts down
            try {
                assertThrows(TransferException.class, () -> t.call(() -> {
                    released.set(true);
                    return null;
                }, Duration.ofSeconds(5), null));
            } finally {
                Thread.interrupted();
            }
            busy.countDown();
            t.linkCount();
            assertTrue(released.get(), "the release was dropped with its caller");
        }
    }

    @Test
    void everyCommandTheQueueAcceptsRunsEvenWhenTheTransportClosesMeanwhile() throws Exception {
        assumeUcx();
        for (int round = 0; round < 30; round++) {
            final UcxTransport t = UcxTransport.open("closing-" + round);
            final AtomicLong accepted = new AtomicLong(), ran = new AtomicLong();
            final AtomicBoolean stop = new AtomicBoolean();
            final Thread[] submitters = new Thread[2];
            for (int i = 0; i < submitters.length; i++) {
                submitters[i] = Thread.ofPlatform().start(() -> {
                    while (!stop.get()) {
                        try {
                            t.execute(ran::incrementAndGet);
                            accepted.incrementAndGet();
                        } catch (LinkFailedException closed) {
                            return;
                        }
                    }
                });
            }
            Thread.sleep(5);
            t.close();
            stop.set(true);
            for (Thread s : submitters) {
                s.join();
            }
            assertEquals(accepted.get(), ran.get(), "round " + round + ": a command was accepted but never ran");
        }
    }
}
