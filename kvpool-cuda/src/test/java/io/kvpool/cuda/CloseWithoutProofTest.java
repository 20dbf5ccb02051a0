package io.kvpool.cuda;

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
 * A storage or pinned buffer frees what a submitted batch may still touch only once {@code cuCtxSynchronize} proved the
 * context idle: after a failed one the arena, scratch buffer and pinned memory stay (as the CUDA IPC engine keeps its
 * mappings after a failed drain), with the driver's code in a WARNING or the exception. Over {@link StubLibcuda}, whose
 * batches never finish and whose {@code cuCtxSynchronize} is made to fail with {@code CUDA_ERROR_ILLEGAL_ADDRESS} (700).
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

    /** The child: a 4-page storage and a 2-page pinned buffer, an offload batch left running, then both closed. */
    public static final class Child {
        public static void main(String[] args) throws Throwable {
            System.load(args[0]);
            final DevicePageStorage s = DevicePageStorage.allocate(DeviceIpcFormatTest.L, 4);
            say("arena 0x" + Long.toHexString(((DevicePageStorage.DevicePtr) s.arenaPointer()).address()));
            final PinnedPageBuffer pinned = new PinnedPageBuffer(s, 2);
            say("pinned 0x" + Long.toHexString(pinned.hostAddress(0)));
            s.submitOffload(new int[] {0, 1}, 0, 2, pinned, 0, OffloadEngine.KERNEL, null); // never finishes on the stub
            if (args[1].equals("failed")) {
                try (Arena a = Arena.ofConfined()) {
                    Linker.nativeLinker().downcallHandle(SymbolLookup.libraryLookup(Path.of(args[0]), a)
                            .find("stub_set_ctx_synchronize_result").orElseThrow(), FunctionDescriptor.ofVoid(ValueLayout.JAVA_INT))
                        .invokeExact(700);
                }
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

        private static void say(String line) {
            System.out.println(line);
            System.out.flush();
        }
    }
}
