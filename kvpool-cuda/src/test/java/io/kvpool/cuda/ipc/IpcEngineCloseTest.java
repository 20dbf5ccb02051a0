package io.kvpool.cuda.ipc;

import io.kvpool.cuda.CudaException;
import io.kvpool.cuda.DeviceIpc;
import io.kvpool.cuda.DevicePageStorage;
import io.kvpool.cuda.StubLibcuda;
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
 * {@link JCudaIpcEngine#close()} unmaps the peers' arenas and frees the index buffer its copies read only after a drain
 * proved its copies ended, and only in its own context; {@link DeviceIpc.OpenedArena#close()} unmaps only in the context
 * it opened the arena in. Over {@link StubLibcuda}, which prints each mapping closed and each buffer freed; the drain's
 * {@code cuStreamSynchronize} is made to fail with {@code CUDA_ERROR_ILLEGAL_ADDRESS} (700) in one child, one
 * {@code cuCtxSetCurrent} with {@code CUDA_ERROR_INVALID_CONTEXT} (201) in others.
 */
class IpcEngineCloseTest {

    private static Path stub;

    @BeforeAll
    static void buildStub() throws Exception {
        stub = StubLibcuda.build(Path.of("target/ipc-engine-close-test"), 13000);
    }

    @Test
    void aCloseAfterAProvenDrainUnmapsThePeersArenaAndFreesTheIndexBuffer() throws Exception {
        final List<String> out = run("drained");
        final String indices = indexBuffer(out);
        assertTrue(out.contains("closed mapping"), () -> "the peer's arena unmapped:\n" + String.join("\n", out));
        assertTrue(out.contains("free " + indices), () -> "the index buffer freed:\n" + String.join("\n", out));
    }

    @Test
    void aCloseWhoseDrainFailedKeepsThePeersArenaMappedAndTheIndexBuffer() throws Exception {
        final List<String> out = run("failed");
        final String indices = indexBuffer(out);
        assertFalse(out.contains("closed mapping"), () -> "a copy may still be queued: the mapping stays:\n" + String.join("\n", out));
        assertFalse(out.contains("free " + indices), () -> "the index buffer it reads stays:\n" + String.join("\n", out));
        assertTrue(out.stream().anyMatch(l -> l.contains("without proof that its copies ended") && l.contains("(700)")),
            () -> "a WARNING says why, with the code:\n" + String.join("\n", out));
        assertTrue(out.contains("closed"), () -> String.join("\n", out));
    }

    @Test
    void aCloseWhoseContextCannotBeMadeCurrentAfterTheDrainKeepsTheIndexBufferAndSaysSo() throws Exception {
        final List<String> out = run("set-current-fails-after-drain");
        final String indices = indexBuffer(out);
        assertTrue(out.contains("closed mapping"), () -> "the drain proved the copies ended: the mapping goes:\n" + String.join("\n", out));
        assertFalse(out.contains("free " + indices), () -> "freed in whatever context is current, or none:\n" + String.join("\n", out));
        assertTrue(out.stream().anyMatch(l -> l.contains("cuCtxSetCurrent") && l.contains("(201)") && l.contains(indices)),
            () -> "a WARNING says why, with the code and the buffer kept:\n" + String.join("\n", out));
        assertTrue(out.contains("closed"), () -> String.join("\n", out));
    }

    @Test
    void anEngineWhoseMappingCannotBeClosedStillFreesTheIndexBufferAndSaysSo() throws Exception {
        final List<String> out = run("arena-set-current-fails");
        final String indices = indexBuffer(out);
        assertFalse(out.contains("closed mapping"), () -> "the mapping stays:\n" + String.join("\n", out));
        assertTrue(out.contains("free " + indices), () -> "the drain proved the copies ended:\n" + String.join("\n", out));
        assertTrue(out.stream().anyMatch(l -> l.contains("cuCtxSetCurrent") && l.contains("(201)") && l.contains("0x700000000")),
            () -> "a WARNING names the mapping kept and the code:\n" + String.join("\n", out));
        assertTrue(out.contains("closed"), () -> String.join("\n", out));
    }

    @Test
    void anOpenedArenaWhoseContextCannotBeMadeCurrentKeepsItsMappingAndThrowsOnce() throws Exception {
        final List<String> out = StubLibcuda.child(stub, ArenaChild.class, "").lines().map(String::strip).toList();
        assertFalse(out.contains("closed mapping"), () -> "unmapped in whatever context is current, or none:\n" + String.join("\n", out));
        assertTrue(out.stream().anyMatch(l -> l.startsWith("thrown: cuCtxSetCurrent failed") && l.contains("(201)")
                && l.contains("0x700000000") && l.contains("-byte")),
            () -> "the exception names the code and the mapping kept:\n" + String.join("\n", out));
        assertTrue(out.contains("second close: nothing"), () -> String.join("\n", out));
    }

    private static List<String> run(String scenario) throws Exception {
        return StubLibcuda.child(stub, Child.class, scenario).lines().map(String::strip).toList();
    }

    /** @return the address of the last allocation: the two storages' come first, then the engine's index buffer */
    private static String indexBuffer(List<String> out) {
        final List<String> allocs = out.stream().filter(l -> l.startsWith("alloc ")).toList();
        assertTrue(allocs.size() >= 3, () -> "the storages' allocations, then the index buffer:\n" + String.join("\n", out));
        return allocs.getLast().substring("alloc ".length());
    }

    /** The child: exports one storage, opens it in an engine, copies a page from another into it, closes the engine. */
    public static final class Child {
        public static void main(String[] args) throws Throwable {
            System.load(args[0]);
            final io.kvpool.KvLayout layout = new io.kvpool.KvLayout(2, 1, 4, io.kvpool.DType.FP32, 4);
            final DevicePageStorage peer = DevicePageStorage.allocate(layout, 4);
            final DevicePageStorage source = DevicePageStorage.allocate(layout, 4);
            final JCudaIpcEngine engine = new JCudaIpcEngine();
            final IpcEngine.Export export = engine.export(peer);
            final IpcEngine.Mapping mapping = engine.open(export.handle(), layout);
            engine.submit(mapping, source, new int[] {0}, new int[] {1}, 1);
            switch (args[1]) {
                case "failed" -> stub(args[0], "stub_set_stream_synchronize_result", 700);
                // close: the drain's cuCtxSetCurrent, the mapping's, then the engine's before it frees (the one failed)
                case "set-current-fails-after-drain" -> stub(args[0], "stub_fail_ctx_set_current_after", 2, 201);
                case "arena-set-current-fails" -> stub(args[0], "stub_fail_ctx_set_current_after", 1, 201);
                default -> {
                }
            }
            engine.close();
            engine.close(); // idempotent: prints nothing
            System.out.println("closed");
        }
    }

    /** The child: opens a peer's arena directly and closes it while its context cannot be made current, twice. */
    public static final class ArenaChild {
        public static void main(String[] args) throws Throwable {
            System.load(args[0]);
            final io.kvpool.KvLayout layout = new io.kvpool.KvLayout(2, 1, 4, io.kvpool.DType.FP32, 4);
            final DevicePageStorage peer = DevicePageStorage.allocate(layout, 4);
            final DeviceIpc.OpenedArena arena = DeviceIpc.open(DeviceIpc.export(peer), layout);
            stub(args[0], "stub_set_ctx_set_current_result", 201);
            try {
                arena.close();
                System.out.println("no exception");
            } catch (CudaException e) {
                System.out.println("thrown: " + e.getMessage());
            }
            arena.close();
            System.out.println("second close: nothing");
        }
    }

    private static void stub(String lib, String setter, int... args) throws Throwable {
        try (Arena a = Arena.ofConfined()) {
            final var fn = SymbolLookup.libraryLookup(Path.of(lib), a).find(setter).orElseThrow();
            if (args.length == 1) {
                Linker.nativeLinker().downcallHandle(fn, FunctionDescriptor.ofVoid(ValueLayout.JAVA_INT)).invokeExact(args[0]);
            } else {
                Linker.nativeLinker().downcallHandle(fn, FunctionDescriptor.ofVoid(ValueLayout.JAVA_INT, ValueLayout.JAVA_INT))
                    .invokeExact(args[0], args[1]);
            }
        }
    }
}
