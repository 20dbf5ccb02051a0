package io.kvpool.cuda;

import io.kvpool.storage.FillMode;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;

import java.lang.foreign.Arena;
import java.lang.foreign.FunctionDescriptor;
import java.lang.foreign.Linker;
import java.lang.foreign.SymbolLookup;
import java.lang.foreign.ValueLayout;
import java.nio.file.Path;
import java.util.List;

import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * A batch whose submit fails after its device buffer and event were made gives both back, whatever it failed with: a
 * RuntimeException or an Error; unless its stream cannot be awaited, and then it keeps them and says so. Over {@link StubLibcuda}, which prints each allocation, free and event destroyed; the
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

    @Test
    void aBatchThatFailsWhereItsStreamCannotBeAwaitedKeepsItsBufferAndSaysWhy() throws Exception {
        final List<String> out = StubLibcuda.child(stub, Child.class, "unawaited").lines().map(String::strip).toList();
        final int threw = out.indexOf("threw java.lang.IllegalStateException: planted");
        assertTrue(threw >= 0, () -> "the planted failure reached the caller:\n" + String.join("\n", out));
        final String batchBuffer = batchBuffer(out.subList(0, threw));
        assertFalse(out.contains("free " + batchBuffer), () -> "what the batch queued may still read its buffer:\n" + String.join("\n", out));
        assertTrue(out.stream().anyMatch(l -> l.startsWith("suppressed io.kvpool.cuda.CudaException: cuStreamSynchronize failed: "
                + "CUDA_ERROR_ILLEGAL_ADDRESS (700)") && l.contains("device buffer at " + batchBuffer) && l.contains("stay")),
            () -> "the failure says what stays, with the code and the buffer:\n" + String.join("\n", out));
    }

    /** @return the address of the last allocation in {@code lines}: the batch's buffer */
    private static String batchBuffer(List<String> lines) {
        final List<String> allocs = lines.stream().filter(l -> l.startsWith("alloc ")).toList();
        assertTrue(allocs.size() >= 2, () -> "the storage's allocations, then the batch's buffer:\n" + String.join("\n", lines));
        return allocs.getLast().substring("alloc ".length());
    }

    private static void assertFreed(String scenario, String thrown) throws Exception {
        final List<String> out = StubLibcuda.child(stub, Child.class, scenario).lines().map(String::strip).toList();
        final int threw = out.indexOf(thrown);
        assertTrue(threw >= 0, () -> "the planted failure reached the caller:\n" + String.join("\n", out));
        final List<String> before = out.subList(0, threw);
        final String batchBuffer = batchBuffer(before);
        assertTrue(before.contains("free " + batchBuffer), () -> "the batch's buffer freed before the call threw:\n" + String.join("\n", out));
        assertTrue(before.contains("destroyed event"), () -> "its event destroyed before the call threw:\n" + String.join("\n", out));
    }

    /**
     * The child: a 4-page storage, a fill batch of 2 pages that fails as planted; prints what it threw and what that
     * suppressed. {@code unawaited}: the stream's wait after the failure fails too (700).
     */
    public static final class Child {
        public static void main(String[] args) throws Throwable {
            System.load(args[0]);
            final DevicePageStorage s = DevicePageStorage.allocate(DeviceIpcFormatTest.L, 4);
            if (args[1].equals("unawaited")) {
                streamSynchronizeResult(Path.of(args[0]), 700);
            }
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
                for (Throwable x : t.getSuppressed()) {
                    System.out.println("suppressed " + x);
                }
            }
            DevicePageStorage.inBatchForTests = null;
            streamSynchronizeResult(Path.of(args[0]), 0);
            s.close();
        }

        private static void streamSynchronizeResult(Path lib, int result) throws Throwable {
            try (Arena a = Arena.ofConfined()) {
                Linker.nativeLinker().downcallHandle(SymbolLookup.libraryLookup(lib, a).find("stub_set_stream_synchronize_result")
                    .orElseThrow(), FunctionDescriptor.ofVoid(ValueLayout.JAVA_INT)).invokeExact(result);
            }
        }
    }
}
