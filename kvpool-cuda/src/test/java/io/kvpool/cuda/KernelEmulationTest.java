package io.kvpool.cuda;

import io.kvpool.DType;
import io.kvpool.KvLayout;
import io.kvpool.transfer.KvChecksum;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;

import java.io.IOException;
import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.SplittableRandom;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * The kernels checked without a GPU, compiled from the REAL {@code .cu} source for the CPU with g++.
 *
 * <p>The other kernels (copy, gather, scatter, fill, first canary token, the CUDA IPC put between two arenas):
 * {@code src/test/cuda/emulate_kernels.cpp} runs each launch's threads one after another and compares with a
 * byte-by-byte reference over several layouts, grid and block sizes ({@link #theOtherKernelsMatchTheirByteReference}).
 *
 * <p>The checksum kernel equals {@link KvChecksum}: the REAL {@code kvpool_page_checksums}
 * source is compiled for the CPU with g++ ({@code src/test/cuda/emulate_checksums.cpp}: CUDA builtins
 * shimmed, each block's threads run as real threads meeting at a real barrier) and run on pseudo-random
 * pages laid out as {@link DeviceLayout} lays out the arena; every result is compared with
 * {@link KvChecksum#of} computed here on the same page in host layout (its planes in order), for several
 * page shapes (all dtypes, odd tokens per page, token vectors that are not multiples of 16 bytes, partial
 * last pages), grid and block sizes (fewer and more blocks than pages, one thread, odd thread counts, 256)
 * and a misaligned arena (the kernel's byte paths). The kernel is built twice: as shipped (a thread
 * hashes ≥ 512 bytes) and with 16-byte chunks, so small pages too are split over many threads and
 * threads' ranges cross planes.
 *
 * <p>Skips, saying so, where g++ is missing. What it cannot show: the GPU's memory model and timing, and
 * nvcc's code generation (that is {@code DevicePageStorageChecksumGpuTest}'s job on the GPU machine).
 */
class KernelEmulationTest {

    private static final long TIMEOUT_S = 120;
    private static final Path SOURCE = Path.of("src/test/cuda/emulate_checksums.cpp");
    private static final Path WORK = Path.of("target/checksum-emulation");
    private static final Path OTHER_KERNELS = Path.of("src/test/cuda/emulate_kernels.cpp");
    /** The checksum kernel as shipped, and with 16-byte chunks. */
    private static Path shipped;
    private static Path smallChunks;
    /** emulate_kernels.cpp's binary. */
    private static Path others;

    /** grid, block, arena shift (bytes past a 16-byte boundary). */
    private static final int[][] LAUNCHES = {
        {1, 1, 0}, {2, 7, 0}, {3, 32, 0}, {1, 256, 0}, {64, 5, 0}, {2, 33, 1}, {3, 64, 8},
    };

    @BeforeAll
    static void compile() throws InterruptedException, IOException {
        NativeTools.assumeUsable("g++", "to compile the kernel for the CPU");
        Files.createDirectories(WORK);
        shipped = WORK.resolve("emulate_checksums");
        smallChunks = WORK.resolve("emulate_checksums_16");
        final List<String> flags = List.of("g++", "-O2", "-std=c++20", "-pthread", "-fno-strict-aliasing", "-Wall", "-Werror");
        final List<String> one = new ArrayList<>(flags);
        one.addAll(List.of("-o", shipped.toString(), SOURCE.toString()));
        final List<String> two = new ArrayList<>(flags);
        two.addAll(List.of("-DKVPOOL_CHECKSUM_MIN_CHUNK_LOG2=4", "-o", smallChunks.toString(), SOURCE.toString()));
        others = WORK.resolve("emulate_kernels");
        final List<String> three = new ArrayList<>(List.of("g++", "-O2", "-std=c++17", "-fno-strict-aliasing", "-Wall", "-Werror"));
        three.addAll(List.of("-o", others.toString(), OTHER_KERNELS.toString()));
        // all at once (each takes a couple of seconds)
        final List<java.util.concurrent.CompletableFuture<String>> builds = new ArrayList<>();
        for (List<String> cmd : List.of(one, two, three)) {
            builds.add(java.util.concurrent.CompletableFuture.supplyAsync(() -> {
                try {
                    return run(cmd, null);
                } catch (InterruptedException e) {
                    Thread.currentThread().interrupt();
                    return "interrupted";
                }
            }));
        }
        for (java.util.concurrent.CompletableFuture<String> b : builds) {
            final String err = b.join();
            assertTrue(err == null, () -> "compiling the kernels with g++ failed: " + err);
        }
    }

    @Test
    void theOtherKernelsMatchTheirByteReference() throws InterruptedException {
        final StringBuilder out = new StringBuilder();
        final String err = run(List.of(others.toAbsolutePath().toString()), out);
        assertTrue(err == null, () -> "emulate_kernels.cpp reports failures: " + err);
        assertEquals("OK (0 failures)", out.toString().strip());
    }

    /** {@link NativeTools#run} with this test's timeout ({@value #TIMEOUT_S} s). */
    private static String run(List<String> cmd, StringBuilder out) throws InterruptedException {
        return NativeTools.run(cmd, out, TIMEOUT_S);
    }

    /** A device arena plus a batch of (slot, key) to checksum, with each key's arguments for KvChecksum. */
    static final class Batch {
        final DeviceLayout dl;
        final MemorySegment arena;
        final int[] slots;
        final long[] requestIds;
        final int[] pageIndices;
        final int[] tokenCounts;
        final ChecksumKeys keys;

        Batch(DeviceLayout dl, MemorySegment arena, int[] slots, long[] requestIds, int[] pageIndices, int[] tokenCounts) {
            this.dl = dl;
            this.arena = arena;
            this.slots = slots;
            this.requestIds = requestIds;
            this.pageIndices = pageIndices;
            this.tokenCounts = tokenCounts;
            this.keys = new ChecksumKeys(dl.layout(), slots.length);
            for (int i = 0; i < slots.length; i++) {
                keys.add(requestIds[i], pageIndices[i], tokenCounts[i]);
            }
        }

        /** Page {@code slot} in host layout: its planes one after another (DeviceLayout's definition). */
        MemorySegment hostPage(int slot, Arena a) {
            final MemorySegment page = a.allocate(dl.layout().bytesPerPage(), 16);
            for (int q = 0; q < dl.planes(); q++) {
                MemorySegment.copy(arena, q * dl.planeBytes() + slot * dl.pageStride(), page, dl.hostOffset(q), dl.pageStride());
            }
            return page;
        }

        /** @return KvChecksum.of for every page of the batch, on its host-layout copy */
        int[] expected() {
            final int[] want = new int[slots.length];
            try (Arena a = Arena.ofConfined()) {
                for (int i = 0; i < want.length; i++) {
                    want[i] = KvChecksum.of(dl.layout(), hostPage(slots[i], a), requestIds[i], pageIndices[i], tokenCounts[i]);
                }
            }
            return want;
        }

        /** @return a slot of the arena that is not in the batch */
        int spareSlot() {
            for (int s = 0; s < dl.pages(); s++) {
                final int slot = s;
                if (Arrays.stream(slots).noneMatch(x -> x == slot)) {
                    return s;
                }
            }
            throw new AssertionError("no spare slot");
        }
    }

    /**
     * Two requests over random distinct slots of an arena of random bytes: request A's pages in order (its
     * last page partial when {@code tokensA} says so), then request B's pages in reverse order.
     */
    static Batch batch(KvLayout layout, int tokensA, int tokensB, SplittableRandom r, Arena a) {
        final int tpp = layout.tokensPerPage();
        final int pagesA = (tokensA + tpp - 1) / tpp;
        final int pagesB = (tokensB + tpp - 1) / tpp;
        final int n = pagesA + pagesB;
        final DeviceLayout dl = DeviceLayout.of(layout, n + 3);
        final MemorySegment arena = a.allocate(dl.arenaBytes(), 16);
        for (long o = 0; o < arena.byteSize(); o += 8) {
            arena.set(ValueLayout.JAVA_LONG_UNALIGNED, o, r.nextLong());
        }
        final int[] perm = new int[dl.pages()];
        for (int i = 0; i < perm.length; i++) {
            perm[i] = i;
        }
        for (int i = perm.length - 1; i > 0; i--) {
            final int j = r.nextInt(i + 1);
            final int t = perm[i];
            perm[i] = perm[j];
            perm[j] = t;
        }
        final long idA = r.nextLong();
        final long idB = -1L - r.nextInt(1000); // a negative id too
        final long[] ids = new long[n];
        final int[] pageIndex = new int[n];
        final int[] tokens = new int[n];
        for (int i = 0; i < n; i++) {
            final boolean inA = i < pagesA;
            ids[i] = inA ? idA : idB;
            pageIndex[i] = inA ? i : pagesB - 1 - (i - pagesA);
            tokens[i] = inA ? tokensA : tokensB;
        }
        return new Batch(dl, arena, Arrays.copyOf(perm, n), ids, pageIndex, tokens);
    }

    /** Runs the emulated kernel on the batch with the given key bytes: one result array per launch of {@link #LAUNCHES}. */
    static int[][] emulate(Path binary, Batch b, ByteBuffer keyBytes) throws IOException, InterruptedException {
        final DeviceLayout dl = b.dl;
        final int n = b.slots.length;
        final ByteBuffer in = ByteBuffer.allocate(Math.toIntExact(64 + 12L * LAUNCHES.length + dl.arenaBytes() + 20L * n))
            .order(ByteOrder.LITTLE_ENDIAN);
        in.putInt(dl.planes()).putLong(dl.pageStride()).putLong(dl.planeBytes()).putLong(dl.layout().bytesPerTokenVector())
            .putInt(dl.layout().tokensPerPage()).putInt(n).putInt(LAUNCHES.length);
        for (int[] l : LAUNCHES) {
            in.putInt(l[0]).putInt(l[1]).putInt(l[2]);
        }
        in.putLong(dl.arenaBytes());
        in.put(b.arena.asByteBuffer());
        for (int s : b.slots) {
            in.putInt(s);
        }
        in.put(keyBytes.duplicate());
        final Path file = Files.createTempFile(WORK, "batch", ".bin");
        try {
            Files.write(file, Arrays.copyOf(in.array(), in.position()));
            final StringBuilder out = new StringBuilder();
            final String err = run(List.of(binary.toAbsolutePath().toString(), file.toString()), out);
            assertTrue(err == null, err);
            final String[] lines = out.toString().strip().split("\n");
            assertEquals(LAUNCHES.length, lines.length, out::toString);
            final int[][] got = new int[lines.length][];
            for (int l = 0; l < lines.length; l++) {
                final String[] parts = lines[l].split(":", 2);
                assertEquals(LAUNCHES[l][0] + " " + LAUNCHES[l][1] + " " + LAUNCHES[l][2], parts[0], "launch " + l);
                final String[] hex = parts[1].strip().split(" ");
                assertEquals(n, hex.length, lines[l]);
                got[l] = new int[n];
                for (int i = 0; i < n; i++) {
                    got[l][i] = Integer.parseUnsignedInt(hex[i], 16);
                }
            }
            return got;
        } finally {
            Files.deleteIfExists(file);
        }
    }

    /** @return every (launch, page) whose result differs from {@code want} */
    static List<String> mismatches(int[] want, int[][] got) {
        final List<String> bad = new ArrayList<>();
        for (int l = 0; l < got.length; l++) {
            for (int i = 0; i < want.length; i++) {
                if (got[l][i] != want[i]) {
                    bad.add("launch " + Arrays.toString(LAUNCHES[l]) + " page " + i + ": kernel 0x" + Integer.toHexString(got[l][i])
                        + ", KvChecksum 0x" + Integer.toHexString(want[i]));
                }
            }
        }
        return bad;
    }

    /** Page shapes: all dtypes, odd tokens per page, vectors of 8, 24, 48 bytes (not multiples of 16). */
    static final KvLayout[] LAYOUTS = {
        new KvLayout(2, 1, 4, DType.FP32, 4),      // 16 B vectors (KvChecksumTest's layout)
        new KvLayout(3, 3, 4, DType.FP16, 2),      // 24 B vectors, 48 B planes
        new KvLayout(5, 3, 8, DType.BF16, 2),      // 48 B vectors, 10 planes
        new KvLayout(2, 1, 8, DType.FP8, 6),       // 8 B vectors, 6 tokens per page
        new KvLayout(3, 1, 16, DType.FP8, 5),      // 5 tokens per page
        new KvLayout(2, 3, 16, DType.FP8, 3),      // 48 B vectors, 3 tokens per page
        new KvLayout(1, 8, 128, DType.FP8, 16),    // 1 KiB vectors, 16 KiB planes
        new KvLayout(4, 8, 128, DType.BF16, 16),   // 256 KiB pages: every thread of a 256-thread block busy
    };

    @Test
    void theKernelComputesKvChecksumForEveryShapeLaunchAndAlignment() throws Exception {
        final SplittableRandom r = new SplittableRandom(42);
        int compared = 0;
        for (KvLayout layout : LAYOUTS) {
            final int tpp = layout.tokensPerPage();
            // A: 4 pages (2 if big), the last holding 1 token; B: whole pages only
            final boolean big = layout.bytesPerPage() > 65536;
            final int tokensA = (big ? 1 : 3) * tpp + 1;
            final int tokensB = (big ? 1 : 2) * tpp;
            try (Arena a = Arena.ofConfined()) {
                final Batch b = batch(layout, tokensA, tokensB, r, a);
                final int[] want = b.expected();
                for (Path binary : new Path[] {shipped, smallChunks}) {
                    final List<String> bad = mismatches(want, emulate(binary, b, b.keys.buffer()));
                    assertTrue(bad.isEmpty(), () -> layout + " (" + binary.getFileName() + "), " + bad.size() + " mismatches: "
                        + bad.subList(0, Math.min(5, bad.size())));
                    compared += want.length * LAUNCHES.length;
                }
            }
        }
        assertTrue(compared > 500, "compared " + compared + " results");
    }

    @Test
    void partialPagesOfEveryLengthMatch() throws Exception {
        final SplittableRandom r = new SplittableRandom(43);
        final KvLayout layout = LAYOUTS[3]; // 6 tokens per page, 8-byte vectors
        for (int last = 1; last <= layout.tokensPerPage(); last++) {
            try (Arena a = Arena.ofConfined()) {
                final Batch b = batch(layout, layout.tokensPerPage() + last, layout.tokensPerPage() * 2 + last, r, a);
                final List<String> bad = mismatches(b.expected(), emulate(smallChunks, b, b.keys.buffer()));
                assertTrue(bad.isEmpty(), () -> "last page of " + b.tokenCounts[0] + " tokens: " + bad);
            }
        }
    }

    @Test
    void theKernelGivesKvChecksumTestsGoldenValue() throws Exception {
        // KvChecksumTest's page: byte i of the host page is (i * 37 + 11), request 0x0102030405060708, page 1 of 7 tokens
        final KvLayout layout = LAYOUTS[0];
        try (Arena a = Arena.ofConfined()) {
            final DeviceLayout dl = DeviceLayout.of(layout, 3);
            final MemorySegment arena = a.allocate(dl.arenaBytes(), 16);
            final int slot = 2;
            for (int q = 0; q < dl.planes(); q++) {
                for (long o = 0; o < dl.pageStride(); o++) {
                    final long h = dl.hostOffset(q) + o;
                    arena.set(ValueLayout.JAVA_BYTE, q * dl.planeBytes() + slot * dl.pageStride() + o, (byte) (h * 37 + 11));
                }
            }
            final Batch b = new Batch(dl, arena, new int[] {slot}, new long[] {0x0102_0304_0506_0708L}, new int[] {1}, new int[] {7});
            for (Path binary : new Path[] {shipped, smallChunks}) {
                for (int[] got : emulate(binary, b, b.keys.buffer())) {
                    assertEquals(0x1470AE3C, got[0], () -> "golden value, got 0x" + Integer.toHexString(got[0]));
                }
            }
        }
    }

    /**
     * The harness can fail: a byte flipped in a valid token of one page and a request id changed in one key
     * (both only in what the kernel sees) are reported as exactly those two mismatches under every launch;
     * a byte flipped in a partial page's invalid tail or in a page outside the batch changes nothing, as
     * for {@link KvChecksum}.
     */
    @Test
    void theComparisonCatchesAFlippedByteAndAFlippedKeyAndIgnoresWhatKvChecksumIgnores() throws Exception {
        final SplittableRandom r = new SplittableRandom(5);
        final KvLayout layout = LAYOUTS[1]; // 24-byte vectors, 2 tokens per page
        try (Arena a = Arena.ofConfined()) {
            final Batch b = batch(layout, 7, 4, r, a); // A: pages 0..3, page 3 holds 1 of 2 tokens; B: 2 full pages
            final int[] want = b.expected();
            final DeviceLayout dl = b.dl;
            assertEquals(1, b.keys.validTokens(3), "page 3 of request A is partial");

            // a valid byte of page 1 (layer 2's V, token 1) and the request id of key 4
            final long flip = dl.offset(b.slots[1], 2, 1) + layout.bytesPerTokenVector() + 5;
            b.arena.set(ValueLayout.JAVA_BYTE, flip, (byte) (b.arena.get(ValueLayout.JAVA_BYTE, flip) ^ 0x10));
            final ByteBuffer keys = ByteBuffer.allocate(ChecksumKeys.BYTES * b.slots.length).order(ByteOrder.LITTLE_ENDIAN);
            keys.put(b.keys.buffer()).flip();
            keys.putLong(4 * ChecksumKeys.BYTES, keys.getLong(4 * ChecksumKeys.BYTES) ^ 1L);
            // an invalid tail byte of page 3 (token 1 of layer 0's K) and a byte of a slot outside the batch
            final long tail = dl.offset(b.slots[3], 0, 0) + layout.bytesPerTokenVector();
            b.arena.set(ValueLayout.JAVA_BYTE, tail, (byte) (b.arena.get(ValueLayout.JAVA_BYTE, tail) ^ 0xFF));
            final long spare = dl.offset(b.spareSlot(), 1, 0);
            b.arena.set(ValueLayout.JAVA_BYTE, spare, (byte) (b.arena.get(ValueLayout.JAVA_BYTE, spare) ^ 0x5A));

            for (Path binary : new Path[] {shipped, smallChunks}) {
                final int[][] got = emulate(binary, b, keys);
                final List<String> bad = mismatches(want, got);
                assertEquals(2 * LAUNCHES.length, bad.size(), () -> binary.getFileName() + ": " + bad);
                for (int l = 0; l < got.length; l++) {
                    for (int i = 0; i < want.length; i++) {
                        if (i == 1 || i == 4) {
                            assertNotEquals(want[i], got[l][i], "launch " + l + " page " + i + " must differ");
                        } else {
                            assertEquals(want[i], got[l][i], "launch " + l + " page " + i);
                        }
                    }
                }
            }
        }
    }

    @Test
    void aKeyTheHostRefusesNeverReachesTheKernelAndTheKernelReadsNothingForOne() throws Exception {
        final KvLayout layout = LAYOUTS[0];
        final IllegalArgumentException e = assertThrows(IllegalArgumentException.class, () -> new ChecksumKeys(layout, 1).add(1, 2, 8));
        assertTrue(e.getMessage().contains("page 2") && e.getMessage().contains("8-token"), e.getMessage());
        // bytes that bypass the Java check (0 valid tokens; more than a page) make the kernel write 0
        try (Arena a = Arena.ofConfined()) {
            final DeviceLayout dl = DeviceLayout.of(layout, 2);
            final Batch b = new Batch(dl, a.allocate(dl.arenaBytes(), 16), new int[] {0, 1}, new long[] {7, 7}, new int[] {0, 1},
                new int[] {8, 8});
            final ByteBuffer bad = ByteBuffer.allocate(32).order(ByteOrder.LITTLE_ENDIAN);
            bad.putLong(0, 7).putInt(8, 0).putInt(12, 0).putLong(16, 7).putInt(24, 0).putInt(28, layout.tokensPerPage() + 1);
            for (int[] got : emulate(shipped, b, bad)) {
                assertEquals(0, got[0]);
                assertEquals(0, got[1]);
            }
        }
    }
}
