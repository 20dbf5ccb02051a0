package io.kvpool.cuda.ipc;

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
 * proved its copies ended. Over {@link StubLibcuda}, which prints each mapping closed and each buffer freed; the drain's
 * {@code cuStreamSynchronize} is made to fail with {@code CUDA_ERROR_ILLEGAL_ADDRESS} (700) in one child.
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
            if (args[1].equals("failed")) {
                try (Arena a = Arena.ofConfined()) {
                    Linker.nativeLinker().downcallHandle(SymbolLookup.libraryLookup(Path.of(args[0]), a)
                            .find("stub_set_stream_synchronize_result").orElseThrow(), FunctionDescriptor.ofVoid(ValueLayout.JAVA_INT))
                        .invokeExact(700);
                }
            }
            engine.close();
            System.out.println("closed");
        }
    }
}
