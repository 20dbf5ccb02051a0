package io.kvpool.cuda;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.security.MessageDigest;
import java.security.NoSuchAlgorithmException;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.HexFormat;
import java.util.List;
import java.util.Properties;
import java.util.TreeSet;
import org.junit.jupiter.api.Test;

/**
 * Checks the committed fatbin without a GPU or CUDA tools: present, a well-formed fatbin container
 * with SASS for sm_80/90/100 and PTX, built from the current {@code .cu} (the drift guard), and
 * holding every kernel, the CUDA IPC transport's put included (the one fatbin both load).
 *
 * <p>Container format (NVIDIA {@code fatbinary.h}, as documented by reverse-engineering tools for
 * CUDA 11-13), all little-endian: a 16-byte header {@code magic u32 = 0xBA55ED50, version u16 = 1,
 * headerSize u16 = 16, fatSize u64} (bytes after the header), then entries back to back, each
 * {@code kind u16 @0 (1 = PTX, 2 = ELF/SASS), version u16 @2, headerSize u32 @4,
 * paddedPayloadSize u64 @8, smVersion u32 @28, flags u64 @40 (0x8000 = compressed)} with the
 * payload at {@code entry + headerSize} and the next entry at
 * {@code entry + headerSize + paddedPayloadSize}.
 */
class FatbinResourceTest {

    private static final int FATBIN_MAGIC = 0xBA55ED50;
    private static final int KIND_PTX = 1;
    private static final int KIND_ELF = 2;
    private static final long FLAG_COMPRESSED = 0x8000L;
    private static final Path SOURCE = Path.of("src/main/cuda/kvpool_kernels.cu");

    private record Entry(int kind, int sm, long flags, byte[] payload) {
    }

    private static byte[] fatbin() {
        final byte[] withZero = Kernels.loadFatbin();
        assertEquals(0, withZero[withZero.length - 1], "loadFatbin appends one 0 byte");
        return Arrays.copyOf(withZero, withZero.length - 1);
    }

    private static List<Entry> parse(byte[] fb) {
        final ByteBuffer b = ByteBuffer.wrap(fb).order(ByteOrder.LITTLE_ENDIAN);
        assertEquals(FATBIN_MAGIC, b.getInt(0), "fatbin container magic");
        assertEquals(1, b.getShort(4), "fatbin container version");
        final int headerSize = Short.toUnsignedInt(b.getShort(6));
        assertEquals(16, headerSize, "fatbin container header size");
        final long fatSize = b.getLong(8);
        assertEquals(fb.length, headerSize + fatSize, "one container spanning the whole file");
        final List<Entry> entries = new ArrayList<>();
        long p = headerSize;
        while (p < fb.length) {
            assertTrue(p + 64 <= fb.length, "entry header inside the file at " + p);
            final int at = Math.toIntExact(p);
            final int kind = Short.toUnsignedInt(b.getShort(at));
            final long entryHeader = Integer.toUnsignedLong(b.getInt(at + 4));
            final long padded = b.getLong(at + 8);
            assertTrue(entryHeader >= 64 && padded >= 0 && p + entryHeader + padded <= fb.length,
                    "entry at " + p + " fits: header " + entryHeader + ", payload " + padded);
            final int sm = b.getInt(at + 28);
            final long flags = b.getLong(at + 40);
            final int from = Math.toIntExact(p + entryHeader);
            entries.add(new Entry(kind, sm, flags, Arrays.copyOfRange(fb, from, Math.toIntExact(from + padded))));
            p += entryHeader + padded;
        }
        assertEquals(fb.length, p, "entries end exactly at the container's end");
        return entries;
    }

    private static String sha256(byte[] bytes) throws NoSuchAlgorithmException {
        return HexFormat.of().formatHex(MessageDigest.getInstance("SHA-256").digest(bytes));
    }

    private static boolean contains(byte[] hay, byte[] needle) {
        outer:
        for (int i = 0; i + needle.length <= hay.length; i++) {
            for (int j = 0; j < needle.length; j++) {
                if (hay[i + j] != needle[j]) {
                    continue outer;
                }
            }
            return true;
        }
        return false;
    }

    @Test
    void resourceIsPresentAndNonEmpty() {
        assertTrue(Kernels.class.getResource(Kernels.FATBIN_RESOURCE) != null, Kernels.FATBIN_RESOURCE);
        assertTrue(fatbin().length > 16, "fatbin is more than a header");
    }

    @Test
    void startsWithFatbinMagicLittleEndian() {
        final byte[] fb = fatbin();
        assertEquals(0x50, fb[0] & 0xFF);
        assertEquals(0xED, fb[1] & 0xFF);
        assertEquals(0x55, fb[2] & 0xFF);
        assertEquals(0xBA, fb[3] & 0xFF);
    }

    @Test
    void holdsSassForSm80Sm90Sm100AndPtx() {
        final List<Entry> entries = parse(fatbin());
        final TreeSet<Integer> sass = new TreeSet<>();
        final TreeSet<Integer> ptx = new TreeSet<>();
        for (Entry e : entries) {
            switch (e.kind()) {
                case KIND_ELF -> sass.add(e.sm());
                case KIND_PTX -> ptx.add(e.sm());
                default -> throw new AssertionError("unexpected entry kind " + e.kind());
            }
        }
        assertEquals(new TreeSet<>(List.of(80, 90, 100)), sass, "SASS archs");
        assertEquals(new TreeSet<>(List.of(100)), ptx, "PTX archs");
        for (Entry e : entries) {
            if (e.kind() == KIND_ELF) {
                assertEquals(0x7F, e.payload()[0] & 0xFF, "ELF payload for sm_" + e.sm());
                assertEquals("ELF", new String(e.payload(), 1, 3, StandardCharsets.US_ASCII));
            }
        }
        final Properties props = Kernels.loadProperties();
        assertEquals("sm_80,sm_90,sm_100", props.getProperty("archs.sass"));
        assertEquals("compute_100", props.getProperty("archs.ptx"));
    }

    @Test
    void recordedSourceHashMatchesTheCurrentSource() throws IOException, NoSuchAlgorithmException {
        assertTrue(Files.isRegularFile(SOURCE), SOURCE.toAbsolutePath() + " (tests run in kvpool-cuda/)");
        final String recorded = Kernels.loadProperties().getProperty("source.sha256");
        assertEquals(sha256(Files.readAllBytes(SOURCE)), recorded,
                "kvpool_kernels.cu changed since the fatbin was built: run kvpool-cuda/build-kernels.sh and commit its outputs");
    }

    @Test
    void everyKernelIsASymbolInEveryEntry() {
        final String listed = Kernels.loadProperties().getProperty("kernels");
        assertEquals(String.join(",", Kernels.NAMES), listed, "properties and Kernels agree on the kernels");
        for (String name : listed.split(",")) {
            assertSymbolInEveryEntry(name);
        }
        assertFalse(listed.isBlank());
    }

    /** The CUDA IPC transport (JCudaIpcEngine) takes its put kernel from this same fatbin: one source, one binary. */
    @Test
    void theCudaIpcPutKernelIsInTheSameFatbin() {
        assertTrue(Kernels.NAMES.contains(Kernels.IPC_PUT_PAGES), Kernels.NAMES::toString);
        assertTrue(List.of(Kernels.loadProperties().getProperty("kernels").split(",")).contains(Kernels.IPC_PUT_PAGES),
                "build-kernels.sh lists " + Kernels.IPC_PUT_PAGES);
        assertSymbolInEveryEntry(Kernels.IPC_PUT_PAGES);
    }

    private static void assertSymbolInEveryEntry(String name) {
        assertTrue(contains(fatbin(), name.getBytes(StandardCharsets.US_ASCII)), name + " in the fatbin bytes");
        for (Entry e : parse(fatbin())) {
            assertEquals(0, e.flags() & FLAG_COMPRESSED, "entry for sm_" + e.sm() + " is uncompressed");
            final String symbol = e.kind() == KIND_PTX ? ".entry " + name + "(" : name + "\0";
            assertTrue(contains(e.payload(), symbol.getBytes(StandardCharsets.US_ASCII)),
                    name + " in the " + (e.kind() == KIND_PTX ? "PTX" : "sm_" + e.sm() + " ELF") + " entry");
        }
    }

    @Test
    void aDriverOlderThanTheReleaseThatBuiltTheKernelsIsNamedWithBothVersions() {
        final int required = Kernels.requiredDriverVersion(Kernels.loadProperties());
        assertEquals(13000, required, "the committed fatbin was built by nvcc 13.0");
        final String old = Kernels.driverTooOld(12080, required);
        assertTrue(old != null && old.contains("CUDA 12.8") && old.contains("12080") && old.contains("CUDA 13.0"), old);
        assertEquals(null, Kernels.driverTooOld(13000, required));
        assertEquals(null, Kernels.driverTooOld(13020, required), "a later minor release loads it");
        final Properties broken = new Properties();
        broken.setProperty("nvcc.version", "nvcc: NVIDIA (R) Cuda compiler driver");
        final IllegalStateException e = org.junit.jupiter.api.Assertions.assertThrows(IllegalStateException.class,
            () -> Kernels.requiredDriverVersion(broken));
        assertTrue(e.getMessage().contains("Cuda compiler driver"), e.getMessage());
    }
}
