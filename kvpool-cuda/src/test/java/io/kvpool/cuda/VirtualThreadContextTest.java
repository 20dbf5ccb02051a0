package io.kvpool.cuda;

import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;

import java.nio.file.Path;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.atomic.AtomicReference;

import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * The CUDA current context belongs to the OS thread. A virtual thread that waits for a monitor gives its OS thread
 * up and may resume on another, so a call that makes the context current and then waits for a lock must make it
 * current again after the wait. Run over {@link StubLibcuda} with a context per thread: an offload whose virtual
 * thread waited for the pinned buffer's monitor, and resumed on the other of two carrier threads, still finds the
 * context there.
 */
class VirtualThreadContextTest {

    private static Path stub;

    @BeforeAll
    static void buildStub() throws Exception {
        stub = StubLibcuda.build(Path.of("target/virtual-thread-context-test"), 13000, true);
    }

    @Test
    void anOffloadThatWaitedForThePinnedBufferRunsWithTheContextOnItsNewCarrier() throws Exception {
        final String out = StubLibcuda.child(stub, Child.class, "offload",
            "-Djdk.virtualThreadScheduler.parallelism=2", "-Djdk.virtualThreadScheduler.maxPoolSize=2");
        assertTrue(out.contains("moved to another carrier"), () -> "the offload did not resume elsewhere, nothing shown:\n" + out);
        assertTrue(out.contains("offload ok"), () -> "the offload ran without the context on its thread:\n" + out);
    }

    /** The child: holds the pinned buffer's monitor while a virtual thread's offload waits for it, then moves it. */
    public static final class Child {
        static volatile boolean stopA, stopB;
        static final AtomicReference<String> carrierA = new AtomicReference<>(), carrierB = new AtomicReference<>();

        /** @return the carrier a virtual thread runs on, from its name: {@code VirtualThread[#n]/runnable@ForkJoinPool-1-worker-k} */
        static String carrier() {
            final String s = Thread.currentThread().toString();
            return s.substring(s.indexOf('@') + 1);
        }

        public static void main(String[] args) throws Exception {
            System.load(args[0]);
            final DevicePageStorage s = DevicePageStorage.allocate(DeviceIpcFormatTest.L, 4); // the context current on main
            final PinnedPageBuffer p = new PinnedPageBuffer(s, 2);
            final AtomicReference<String> before = new AtomicReference<>(), after = new AtomicReference<>();
            final AtomicReference<Object> result = new AtomicReference<>();
            final CountDownLatch started = new CountDownLatch(1);
            final Thread v, a, b;
            synchronized (p) { // as a concurrent offload of the same buffer, or its close(), would
                v = Thread.ofVirtual().start(() -> {
                    before.set(carrier());
                    started.countDown();
                    try {
                        s.offload(new int[] {1}, 0, 1, p, 0); // waits for p's monitor: the virtual thread unmounts
                        result.set("offload ok");
                    } catch (RuntimeException e) {
                        result.set(e);
                    }
                    after.set(carrier());
                });
                started.await();
                while (v.getState() != Thread.State.BLOCKED) {
                    Thread.onSpinWait();
                }
                // both carriers busy, then the monitor freed: v can run only where a spinner stops
                a = Thread.ofVirtual().start(() -> { carrierA.set(carrier()); while (!stopA) { Thread.onSpinWait(); } });
                b = Thread.ofVirtual().start(() -> { carrierB.set(carrier()); while (!stopB) { Thread.onSpinWait(); } });
                while (carrierA.get() == null || carrierB.get() == null) {
                    Thread.onSpinWait();
                }
            }
            Thread.sleep(100);
            if (carrierA.get().equals(before.get())) { // free the carrier the offload did not start on
                stopB = true;
            } else {
                stopA = true;
            }
            v.join();
            stopA = stopB = true;
            a.join();
            b.join();
            System.out.println("offload began on " + before.get() + ", ended on " + after.get()
                + (before.get().equals(after.get()) ? "" : ": moved to another carrier"));
            System.out.println(result.get() instanceof String ok ? ok : "offload threw " + result.get());
            p.close();
            s.close();
        }
    }
}
