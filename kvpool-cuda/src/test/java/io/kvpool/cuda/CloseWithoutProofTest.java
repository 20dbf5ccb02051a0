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
 * A storage, pinned buffer or batch frees what a submitted batch may still touch only once the driver proved that the
 * batch ended: after a failed {@code cuCtxSynchronize} or {@code cuEventSynchronize}, or a failed {@code cuCtxSetCurrent}
 * (the wait and the frees would act on another context), the arena, scratch buffer, pinned memory and batch buffer stay
 * (as the CUDA IPC engine keeps its mappings after a failed drain), with the driver's code in a WARNING or the
 * exception. Over {@link StubLibcuda}, whose batches never finish and whose calls are made to fail with
 * {@code CUDA_ERROR_ILLEGAL_ADDRESS} (700) or {@code CUDA_ERROR_INVALID_CONTEXT} (201).
 */
class CloseWithoutProofTest {

    private static Path stub;

    @BeforeAll
    static void buildStub() throws Exception {
        stub = StubLibcuda.build(Path.of("target/close-without-proof-test"), 13000);
    }

    private static List<String> run(String scenario) throws Exception {
        return StubLibcuda.child(stub, Child.class, scenario).lines().map(String::strip).toList();
    }

    private static String named(List<String> out, String what) {
        return out.stream().filter(l -> l.startsWith(what + " ")).findFirst()
            .orElseThrow(() -> new AssertionError("the child named no " + what + ":\n" + String.join("\n", out))).substring(what.length() + 1);
    }

    /** @return the scratch buffer: the storage's second allocation, after its arena */
    private static String scratch(List<String> out) {
        final List<String> allocs = out.stream().filter(l -> l.startsWith("alloc ")).toList();
        assertTrue(allocs.size() >= 2 && allocs.get(0).equals("alloc " + named(out, "arena")), () -> String.join("\n", out));
        return allocs.get(1).substring("alloc ".length());
    }

    @Test
    void aCloseAfterTheContextWasProvenIdleFreesTheArenaScratchAndPinnedMemory() throws Exception {
        final List<String> out = run("idle");
        assertTrue(out.contains("free " + named(out, "arena")), () -> String.join("\n", out));
        assertTrue(out.contains("free " + scratch(out)), () -> String.join("\n", out));
        assertTrue(out.contains("free host " + named(out, "pinned")), () -> String.join("\n", out));
    }

    @Test
    void aPinnedBufferWhoseSynchronizeFailedKeepsItsMemoryAndSaysWhy() throws Exception {
        final List<String> out = run("failed");
        assertFalse(out.contains("free host " + named(out, "pinned")), () -> "a batch may still write the pinned pages:\n" + String.join("\n", out));
        assertTrue(out.stream().anyMatch(l -> l.startsWith("pinned close: ") && l.contains("(700)")),
            () -> "the pinned buffer's close says why, with the code:\n" + String.join("\n", out));
    }

    @Test
    void aStorageWhoseSynchronizeFailedKeepsItsArenaAndScratchAndSaysWhy() throws Exception {
        final List<String> out = run("failed");
        assertFalse(out.contains("free " + named(out, "arena")), () -> "a batch may still run on the arena:\n" + String.join("\n", out));
        assertFalse(out.contains("free " + scratch(out)), () -> "a batch's kernel may still use the scratch buffer:\n" + String.join("\n", out));
        assertTrue(out.stream().anyMatch(l -> !l.startsWith("pinned close: ") && l.contains("(700)") && l.contains("stay")),
            () -> "the storage's WARNING says why, with the code:\n" + String.join("\n", out));
        assertTrue(out.contains("closed"), () -> String.join("\n", out));
    }

    @Test
    void aPinnedBufferWhoseContextCannotBeMadeCurrentKeepsItsMemoryAndSaysWhy() throws Exception {
        final List<String> out = run("notCurrent");
        assertFalse(out.contains("free host " + named(out, "pinned")), () -> "a batch may still write the pinned pages:\n" + String.join("\n", out));
        assertTrue(out.stream().anyMatch(l -> l.startsWith("pinned close: ") && l.contains("cuCtxSetCurrent failed")
                && l.contains("(201)") && l.contains("bytes at " + named(out, "pinned"))),
            () -> "the pinned buffer's close says why, with the code and the memory kept:\n" + String.join("\n", out));
    }

    @Test
    void aStorageWhoseContextCannotBeMadeCurrentKeepsItsArenaAndScratchAndSaysWhy() throws Exception {
        final List<String> out = run("notCurrent");
        assertFalse(out.contains("free " + named(out, "arena")), () -> "a batch may still run on the arena:\n" + String.join("\n", out));
        assertFalse(out.contains("free " + scratch(out)), () -> "a batch's kernel may still use the scratch buffer:\n" + String.join("\n", out));
        assertTrue(out.stream().anyMatch(l -> !l.startsWith("pinned close: ") && l.contains("cuCtxSetCurrent failed") && l.contains("(201)")
                && l.contains("arena at " + named(out, "arena")) && l.contains("stay")),
            () -> "the storage's WARNING says why, with the code and the arena kept:\n" + String.join("\n", out));
        assertTrue(out.contains("closed"), () -> String.join("\n", out));
    }

    /** @return the batch's device buffer: the last allocation before the child said it submitted the batch */
    private static String batchBuffer(List<String> out) {
        final List<String> allocs = out.subList(0, out.indexOf("submitted")).stream().filter(l -> l.startsWith("alloc ")).toList();
        assertTrue(allocs.size() >= 3, () -> "the arena, the scratch buffer, then the batch's buffer:\n" + String.join("\n", out));
        return allocs.getLast().substring("alloc ".length());
    }

    @Test
    void aBatchProvenEndedFreesItsIndexBuffer() throws Exception {
        final List<String> out = run("batchIdle");
        assertTrue(out.contains("batch close: ok"), () -> String.join("\n", out));
        assertTrue(out.subList(out.indexOf("submitted"), out.indexOf("batch close: ok")).contains("free " + batchBuffer(out)),
            () -> "control: a close after the wait frees the batch's buffer:\n" + String.join("\n", out));
    }

    @Test
    void closeKeepsIndexBufferWhenContextCannotBeMadeCurrent() throws Exception {
        checkBatchKeepsItsBuffer("batchNotCurrent", "cuCtxSetCurrent failed: CUDA_ERROR_INVALID_CONTEXT (201)");
    }

    @Test
    void closeKeepsIndexBufferWhenTheBatchCannotBeAwaited() throws Exception {
        checkBatchKeepsItsBuffer("batchWaitFailed", "cuEventSynchronize failed: CUDA_ERROR_ILLEGAL_ADDRESS (700)");
    }

    private static void checkBatchKeepsItsBuffer(String scenario, String failure) throws Exception {
        final List<String> out = run(scenario);
        final String buffer = batchBuffer(out);
        assertFalse(out.contains("free " + buffer), () -> "a kernel of the batch may still read its buffer:\n" + String.join("\n", out));
        assertTrue(out.stream().anyMatch(l -> l.startsWith("batch close: io.kvpool.cuda.CudaException: " + failure)
                && l.contains("16-byte device buffer at " + buffer) && l.contains("stay")),
            () -> "the batch's close says why, with the code and the buffer kept:\n" + String.join("\n", out));
        assertTrue(out.contains("batch close again: ok"), () -> "close stays idempotent:\n" + String.join("\n", out));
        assertFalse(out.subList(out.indexOf("submitted"), out.size()).contains("destroyed event"),
            () -> "the event stays with the buffer:\n" + String.join("\n", out));
        assertTrue(out.contains("closed"), () -> String.join("\n", out));
    }

    @Test
    void aLeaseEndingWhereTheContextCannotBeMadeCurrentKeepsTheArenaAndSaysWhy() throws Exception {
        final List<String> out = run("leaseNotCurrent");
        assertTrue(out.contains("free " + scratch(out)), () -> "control: the close itself proved the context idle:\n" + String.join("\n", out));
        assertFalse(out.contains("free " + named(out, "arena")), () -> "the free would act on another context:\n" + String.join("\n", out));
        assertTrue(out.stream().anyMatch(l -> l.contains("arena at " + named(out, "arena")) && l.contains("stays")
                && l.contains("cuCtxSetCurrent failed: CUDA_ERROR_INVALID_CONTEXT (201)")),
            () -> "the WARNING says why, with the code and the arena kept:\n" + String.join("\n", out));
        assertTrue(out.contains("ended the lease"), () -> String.join("\n", out));
    }

    /**
     * The child. {@code idle}, {@code failed}, {@code notCurrent}: a 4-page storage and a 2-page pinned buffer, an offload
     * batch left running, then both closed. {@code batch...}: a 4-page storage, a fill batch of 2 pages (a 16-byte buffer)
     * closed twice, then the storage closed. {@code leaseNotCurrent}: a 4-page storage exported with a lease, closed, then
     * the lease ended.
     */
    public static final class Child {
        public static void main(String[] args) throws Throwable {
            System.load(args[0]);
            final Path lib = Path.of(args[0]);
            final DevicePageStorage s = DevicePageStorage.allocate(DeviceIpcFormatTest.L, 4);
            say("arena 0x" + Long.toHexString(((DevicePageStorage.DevicePtr) s.arenaPointer()).address()));
            switch (args[1]) {
                case "idle", "failed", "notCurrent" -> storageAndPinned(lib, s, args[1]);
                case "batchIdle", "batchNotCurrent", "batchWaitFailed" -> batch(lib, s, args[1]);
                case "leaseNotCurrent" -> {
                    final DeviceIpc.ExportLease lease = DeviceIpc.exportLease(s);
                    s.close();
                    stub(lib, "stub_set_ctx_set_current_result", 201);
                    lease.close();
                    say("ended the lease");
                }
                default -> throw new IllegalArgumentException(args[1]);
            }
        }

        private static void storageAndPinned(Path lib, DevicePageStorage s, String scenario) throws Throwable {
            final PinnedPageBuffer pinned = new PinnedPageBuffer(s, 2);
            say("pinned 0x" + Long.toHexString(pinned.hostAddress(0)));
            s.submitOffload(new int[] {0, 1}, 0, 2, pinned, 0, OffloadEngine.KERNEL, null); // never finishes on the stub
            switch (scenario) {
                case "failed" -> stub(lib, "stub_set_ctx_synchronize_result", 700);
                case "notCurrent" -> stub(lib, "stub_set_ctx_set_current_result", 201);
                default -> { }
            }
            try {
                pinned.close();
                say("pinned close: ok");
            } catch (RuntimeException e) {
                say("pinned close: " + e);
            }
            s.close();
            say("closed");
        }

        private static void batch(Path lib, DevicePageStorage s, String scenario) throws Throwable {
            final DeviceBatch batch = s.submitFill(new int[] {0, 1}, 0, 2, FillMode.CANARY, null);
            say("submitted");
            switch (scenario) {
                case "batchNotCurrent" -> stub(lib, "stub_set_ctx_set_current_result", 201);
                case "batchWaitFailed" -> stub(lib, "stub_set_event_synchronize_result", 700);
                default -> { }
            }
            closeBatch(batch, "batch close");
            closeBatch(batch, "batch close again");
            stub(lib, "stub_set_ctx_set_current_result", 0);
            s.close();
            say("closed");
        }

        private static void closeBatch(DeviceBatch batch, String what) {
            try {
                batch.close();
                say(what + ": ok");
            } catch (RuntimeException e) {
                say(what + ": " + e);
            }
        }

        /** Calls the stub's {@code setter(int)}, which makes a driver call answer {@code result} from now on. */
        private static void stub(Path lib, String setter, int result) throws Throwable {
            try (Arena a = Arena.ofConfined()) {
                Linker.nativeLinker().downcallHandle(SymbolLookup.libraryLookup(lib, a).find(setter).orElseThrow(),
                    FunctionDescriptor.ofVoid(ValueLayout.JAVA_INT)).invokeExact(result);
            }
        }

        private static void say(String line) {
            System.out.println(line);
            System.out.flush();
        }
    }
}
