package io.kvpool.cuda;

import org.junit.jupiter.api.Assumptions;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;

import java.io.IOException;
import java.lang.foreign.MemoryLayout.PathElement;
import java.lang.foreign.ValueLayout;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * {@link MemcpyBatch}'s hand-made ABI against the installed {@code cuda.h}, without a GPU: a small C program
 * ({@code src/test/c/memcpy_batch_abi.c}) compiled with gcc static-asserts both signatures and prints the
 * symbol name, struct sizes and offsets and enum values, which must equal the Java layouts. A control build
 * whose assert is wrong on purpose must fail to compile, so the asserts are known to bite. Skips, saying so,
 * without gcc or {@value #HEADER} (e.g. on the GPU machine, which has a driver but no toolkit).
 */
class MemcpyBatchAbiTest {

    private static final long TIMEOUT_S = 60;
    static final String HEADER = "/usr/local/cuda/include/cuda.h";
    private static final Path SOURCE = Path.of("src/test/c/memcpy_batch_abi.c");
    private static final Path WORK = Path.of("target/memcpy-batch-abi");
    private static Map<String, String> printed;

    @BeforeAll
    static void compileAndRun() throws IOException, InterruptedException {
        Assumptions.assumeTrue(Files.isRegularFile(Path.of(HEADER)), HEADER + " is not installed: the CUDA toolkit's header is needed");
        NativeTools.assumeUsable("gcc", "to compile " + SOURCE.getFileName() + " against " + HEADER);
        Files.createDirectories(WORK);
        final Path exe = WORK.resolve("abi");
        final String err = run(gcc(List.of("-o", exe.toString())), null);
        assertTrue(err == null, () -> "the CUDA 13 signature or layout does not compile: " + err);
        final StringBuilder out = new StringBuilder();
        final String ran = run(List.of(exe.toAbsolutePath().toString()), out);
        assertTrue(ran == null, ran);
        printed = new HashMap<>();
        for (String line : out.toString().strip().split("\n")) {
            final String[] kv = line.split(" ", 2);
            printed.put(kv[0], kv[1]);
        }
    }

    private static List<String> gcc(List<String> extra) {
        final List<String> cmd = new ArrayList<>(List.of("gcc", "-Wall", "-Werror", "-I" + Path.of(HEADER).getParent()));
        cmd.addAll(extra);
        cmd.add(SOURCE.toString());
        return cmd;
    }

    /** {@link NativeTools#run} with this test's timeout ({@value #TIMEOUT_S} s). */
    private static String run(List<String> cmd, StringBuilder out) throws InterruptedException {
        return NativeTools.run(cmd, out, TIMEOUT_S);
    }

    private static long value(String key) {
        final String v = printed.get(key);
        assertTrue(v != null, () -> key + " not printed: " + printed);
        return Long.parseLong(v);
    }

    @Test
    void cudaHMapsCuMemcpyBatchAsyncToTheSymbolLookedUpFirst() {
        assertEquals(MemcpyBatch.SYMBOL_V2, printed.get("symbol"));
    }

    @Test
    void theAttributesStructMatchesCudaH() {
        assertEquals(value("CUmemcpyAttributes.size"), MemcpyBatch.ATTRIBUTES.byteSize());
        assertEquals(value("CUmemcpyAttributes.align"), MemcpyBatch.ATTRIBUTES.byteAlignment());
        for (String field : new String[] {"srcAccessOrder", "srcLocHint", "dstLocHint", "flags"}) {
            assertEquals(value("CUmemcpyAttributes." + field), MemcpyBatch.ATTRIBUTES.byteOffset(PathElement.groupElement(field)), field);
        }
        assertEquals(value("CUmemLocation.size"), MemcpyBatch.LOCATION.byteSize());
        assertEquals(value("CUmemLocation.type"), MemcpyBatch.LOCATION.byteOffset(PathElement.groupElement("type")));
        assertEquals(value("CUmemLocation.id"), MemcpyBatch.LOCATION.byteOffset(PathElement.groupElement("id")));
        assertEquals(value("CU_MEMCPY_SRC_ACCESS_ORDER_STREAM"), MemcpyBatch.SRC_ACCESS_ORDER_STREAM);
        assertEquals(0, value("CU_MEMCPY_FLAG_DEFAULT"), "flags left 0");
        assertEquals(0, value("CU_MEM_LOCATION_TYPE_INVALID"), "location hints left 0");
    }

    @Test
    void theDowncallDescriptorsHaveTheCArgumentsSizes() {
        assertEquals(value("CUresult.size"), MemcpyBatch.V2.returnLayout().orElseThrow().byteSize());
        assertEquals(value("CUdeviceptr.size"), ValueLayout.ADDRESS.byteSize(), "CUdeviceptr* and CUstream as ADDRESS");
        assertEquals(value("CUstream.size"), ValueLayout.ADDRESS.byteSize());
        assertEquals(value("size_t.size"), ValueLayout.JAVA_LONG.byteSize(), "size_t as JAVA_LONG");
        // dsts, srcs, sizes, count, attrs, attrsIdxs, numAttrs, [failIdx,] stream: the static asserts checked the C side
        assertEquals(8, MemcpyBatch.V2.argumentLayouts().size());
        assertEquals(9, MemcpyBatch.V1.argumentLayouts().size());
        for (int i : new int[] {3, 6}) {
            assertEquals(ValueLayout.JAVA_LONG, MemcpyBatch.V2.argumentLayouts().get(i), "argument " + i + " is a size_t");
            assertEquals(ValueLayout.JAVA_LONG, MemcpyBatch.V1.argumentLayouts().get(i), "argument " + i + " is a size_t");
        }
    }

    @Test
    void theCuda12SignatureCompilesAndTheControlDoesNot() throws InterruptedException {
        final String v1 = run(gcc(List.of("-D__CUDA_API_VERSION_INTERNAL", "-fsyntax-only")), null);
        assertTrue(v1 == null, () -> "the CUDA 12.8 signature (with failIdx) does not compile: " + v1);
        final String control = run(gcc(List.of("-DKVPOOL_ABI_CONTROL", "-fsyntax-only")), null);
        assertNotEquals(null, control, "the control assert compiled: the static asserts cannot tell the signatures apart");
        assertTrue(control.contains("control: the failIdx shape"), control);
    }
}
