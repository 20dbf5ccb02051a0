package io.kvpool.cuda;

import io.kvpool.storage.FillMode;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;

import java.nio.file.Path;
import java.util.List;

import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * A batch whose submit fails after its device buffer and event were made gives both back, whatever it failed with: a
 * RuntimeException or an Error. Over {@link StubLibcuda}, which prints each allocation, free and event destroyed; the
 * failure is planted just before the batch's work is enqueued ({@link DevicePageStorage#inBatchForTests}).
 */
class DeviceBatchCleanupTest {

    private static Path stub;

    @BeforeAll
    static void buildStub() throws Exception {
        stub = StubLibcuda.build(Path.of("target/device-batch-cleanup-test"), 13000);
    }

    @Test
    void aBatchThatFailsWithAnErrorFreesItsBufferAndEvent() throws Exception {
        assertFreed("error", "threw java.lang.AssertionError: planted");
    }

    @Test
    void aBatchThatFailsWithARuntimeExceptionFreesItsBufferAndEvent() throws Exception {
        assertFreed("runtime", "threw java.lang.IllegalStateException: planted");
    }

    private static void assertFreed(String scenario, String thrown) throws Exception {
        final List<String> out = StubLibcuda.child(stub, Child.class, scenario).lines().map(String::strip).toList();
        final int threw = out.indexOf(thrown);
        assertTrue(threw >= 0, () -> "the planted failure reached the caller:\n" + String.join("\n", out));
        final List<String> before = out.subList(0, threw);
        final List<String> allocs = before.stream().filter(l -> l.startsWith("alloc ")).toList();
        assertTrue(allocs.size() >= 2, () -> "the storage's allocations, then the batch's buffer:\n" + String.join("\n", out));
        final String batchBuffer = allocs.getLast().substring("alloc ".length());
        assertTrue(before.contains("free " + batchBuffer), () -> "the batch's buffer freed before the call threw:\n" + String.join("\n", out));
        assertTrue(before.contains("destroyed event"), () -> "its event destroyed before the call threw:\n" + String.join("\n", out));
    }

    /** The child: a 4-page storage, a fill batch of 2 pages that fails as planted; prints what it threw. */
    public static final class Child {
        public static void main(String[] args) {
            System.load(args[0]);
            final DevicePageStorage s = DevicePageStorage.allocate(DeviceIpcFormatTest.L, 4);
            DevicePageStorage.inBatchForTests = args[1].equals("error")
                ? () -> {
                    throw new AssertionError("planted");
                }
                : () -> {
                    throw new IllegalStateException("planted");
                };
            try {
                s.submitFill(new int[] {0, 1}, 0, 2, FillMode.CANARY, null);
                System.out.println("no failure");
            } catch (Throwable t) {
                System.out.println("threw " + t);
            }
            DevicePageStorage.inBatchForTests = null;
            s.close();
        }
    }
}
