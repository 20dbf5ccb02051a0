package io.kvpool.cuda;

import java.io.IOException;
import java.io.InputStream;
import java.io.UncheckedIOException;
import java.util.List;
import java.util.Properties;

/**
 * The batched page kernels of {@code src/main/cuda/kvpool_kernels.cu}: their names, and the ONE
 * committed fatbin that holds them all, the pool's ({@link DevicePageStorage}) and the CUDA IPC
 * transport's put ({@code io.kvpool.cuda.ipc}) (SASS for sm_80, sm_90, sm_100 and PTX for compute_100,
 * built by {@code kvpool-cuda/build-kernels.sh}, rebuilt by the build where {@code nvcc} is installed
 * and the source changed; the GPU machines have no nvcc; {@code FatbinResourceTest} guards against
 * drift). Every kernel is launched once per batch of pages, never once per page, and uses grid-stride
 * loops, so any grid size (at least one block) is correct.
 *
 * <h2>Device arena</h2>
 * The pool's device memory is ONE arena of {@code planes = layers * 2} planes; plane
 * {@code q = layer * 2 + kv} (K = 0, V = 1) starts at {@code arena + q * planeBytes}, and page
 * {@code p} of a plane is the {@code pageStride} bytes at {@code + p * pageStride}:
 * <pre>
 * arena
 * +-------------------- plane 0 (layer 0, K) --------------------+-- plane 1 (layer 0, V) --+-- ... --+
 * | page 0       | page 1       | ... | page p       | ...       | page 0 | page 1 | ...     |   q*planeBytes
 * +--------------+--------------+-----+--------------+-----------+--------+--------+---------+
 * ^ arena        ^ +pageStride        ^ +p*pageStride            ^ arena + 1*planeBytes
 *
 * inside one page of one plane: [tokensPerPage][kvHeads][headDim]
 * | token 0 vector | token 1 vector | ... |      token t at plane offset t * tokenVectorBytes
 * </pre>
 * The <em>host layout</em> of a page is its planes one after another: the byte at plane offset
 * {@code o} of plane {@code q} is at host offset {@code q * pageStride + o}:
 * <pre>
 * | plane 0 (pageStride bytes) | plane 1 | ... | plane planes-1 |      planes * pageStride bytes
 * </pre>
 * The caller guarantees that the arena, {@code planeBytes}, {@code pageStride},
 * {@code tokenVectorBytes} and every host buffer are multiples of 16 bytes: the kernels then move
 * 16-byte vectors ({@code uint4}); otherwise they fall back to (slow, still correct) byte loops.
 * Since {@code pageStride} is a multiple of 16, a plane offset and its host offset have the same
 * phase modulo 8, which is what the fill pattern is keyed to.
 *
 * <h2>Kernels (C parameter order, as launched)</h2>
 * <ul>
 *   <li>{@value #COPY_PAGES}{@code (const int* src, const int* dst, int n, unsigned char* arena,
 *       long long planeBytes, int planes, long long pageStride)}: for {@code i < n}, in every
 *       plane, page {@code dst[i]} &larr; page {@code src[i]}; pairs never overlap.</li>
 *   <li>{@value #GATHER_PAGES}{@code (const int* pages, int n, const unsigned char* arena,
 *       long long planeBytes, int planes, long long pageStride, unsigned char* out)}: {@code out}
 *       (contiguous, may be mapped pinned host memory) receives page {@code pages[i]} in host
 *       layout at {@code out + i * planes * pageStride} (plane {@code q} at {@code + q * pageStride}).</li>
 *   <li>{@value #SCATTER_PAGES}{@code (const int* pages, int n, unsigned char* arena,
 *       long long planeBytes, int planes, long long pageStride, const unsigned char* in)}: the
 *       reverse of gather.</li>
 *   <li>{@value #FILL_PAGES}{@code (const int* pages, int n, unsigned char* arena,
 *       long long planeBytes, int planes, long long pageStride, unsigned long long pattern)}: every
 *       byte at host offset {@code h} of each listed page becomes
 *       {@code (unsigned char)(pattern >> (8 * (h & 7)))}; pattern 0 is a zero fill.</li>
 *   <li>{@value #FIRST_CANARY_TOKEN}{@code (const int* pages, int n, const unsigned char* arena,
 *       long long planeBytes, int planes, long long pageStride, long long tokenVectorBytes,
 *       int fromToken, int toToken, unsigned long long pattern, int* out)}: {@code out[i]} = the
 *       smallest token {@code t} in {@code [fromToken, toToken)} of page {@code pages[i]} such that
 *       in ANY plane the whole token vector ({@code tokenVectorBytes} bytes at plane offset
 *       {@code t * tokenVectorBytes}) equals the pattern bytes (phase as in fill), else -1: the
 *       same answer as {@link io.kvpool.storage.HostPageStorage#firstCanaryToken}. One block per
 *       page (grid-stride over pages); the block's threads test the (token, plane) vectors and
 *       {@code atomicMin} a matching token into a shared int that the block initialises per page.</li>
 *   <li>{@value #PAGE_CHECKSUMS}{@code (const int* pages, const unsigned char* keys, int n,
 *       const unsigned char* arena, long long planeBytes, int planes, long long pageStride,
 *       long long tokenVectorBytes, int tokensPerPage, unsigned int* out)}: {@code out[i]} = the
 *       position-keyed checksum {@link io.kvpool.transfer.KvChecksum} of page {@code pages[i]} under the
 *       16-byte key at {@code keys + 16 i} ({@link ChecksumKeys}: the checksum's first input bytes, whose
 *       last four are the valid tokens {@code v}): CRC32C of the key and then, plane by plane in host order,
 *       the page's first {@code v · tokenVectorBytes} bytes of that plane. A key with {@code v} outside
 *       {@code [1, tokensPerPage]} gives 0 and reads nothing. One block per page (grid-stride over pages);
 *       each thread hashes one range of the page (table-driven slicing-by-8, tables in shared memory) and
 *       the partial CRCs are combined by multiplying each by {@code x^(8 · bytes after it)} mod the
 *       polynomial and xoring; the derivation is drawn in the {@code .cu}.</li>
 *   <li>{@value #IPC_PUT_PAGES}{@code (const int* src, const int* dst, int n, const unsigned char* srcArena,
 *       long long srcPlaneBytes, unsigned char* dstArena, long long dstPlaneBytes, int planes,
 *       long long pageStride)}: for {@code i < n}, in every plane {@code q}, the {@code pageStride} bytes at
 *       {@code dstArena + q·dstPlaneBytes + dst[i]·pageStride} &larr; those at
 *       {@code srcArena + q·srcPlaneBytes + src[i]·pageStride}: {@value #COPY_PAGES} between two arenas (the
 *       same code), this process's and a peer's opened by CUDA IPC. Both are laid out as {@link DeviceLayout}
 *       draws, for the same page layout and any page counts.</li>
 * </ul>
 */
public final class Kernels {

    /** Classpath resource of the fatbin (load it with {@code cuModuleLoadData}). */
    public static final String FATBIN_RESOURCE = "/io/kvpool/cuda/kvpool_kernels.fatbin";
    /** Classpath resource recording how the fatbin was built (source sha256, nvcc, archs, kernels). */
    public static final String PROPERTIES_RESOURCE = "/io/kvpool/cuda/kvpool_kernels.properties";

    /** Batched page copy inside the arena. */
    public static final String COPY_PAGES = "kvpool_copy_pages";
    /** Batched gather of arena pages into a contiguous host-layout buffer. */
    public static final String GATHER_PAGES = "kvpool_gather_pages";
    /** Batched scatter of a contiguous host-layout buffer into arena pages. */
    public static final String SCATTER_PAGES = "kvpool_scatter_pages";
    /** Batched pattern (or zero) fill of arena pages. */
    public static final String FILL_PAGES = "kvpool_fill_pages";
    /** Batched search for the first canary token vector of each page. */
    public static final String FIRST_CANARY_TOKEN = "kvpool_first_canary_token";

    /** Batched position-keyed page checksums ({@link io.kvpool.transfer.KvChecksum}). */
    public static final String PAGE_CHECKSUMS = "kvpool_page_checksums";

    /** Batched page copy from this process's arena into a peer's (the CUDA IPC transport's put). */
    public static final String IPC_PUT_PAGES = "kvpool_ipc_put_pages";

    /** Every kernel name, in the order the properties file lists them. */
    public static final List<String> NAMES =
            List.of(COPY_PAGES, GATHER_PAGES, SCATTER_PAGES, FILL_PAGES, FIRST_CANARY_TOKEN, PAGE_CHECKSUMS, IPC_PUT_PAGES);

    private Kernels() {
    }

    /**
     * {@return the fatbin's bytes followed by one 0 byte} The 0 byte is harmless to
     * {@code cuModuleLoadData}, which reads the fatbin header's own size.
     *
     * @throws UncheckedIOException if the resource is missing or unreadable
     */
    public static byte[] loadFatbin() {
        final byte[] raw = read(FATBIN_RESOURCE);
        final byte[] out = new byte[raw.length + 1];
        System.arraycopy(raw, 0, out, 0, raw.length);
        return out;
    }

    /**
     * {@return the build record written by {@code build-kernels.sh} beside the fatbin}
     *
     * @throws UncheckedIOException if the resource is missing or unreadable
     */
    public static Properties loadProperties() {
        final Properties p = new Properties();
        try (InputStream in = open(PROPERTIES_RESOURCE)) {
            p.load(in);
        } catch (IOException e) {
            throw new UncheckedIOException(e);
        }
        return p;
    }

    /**
     * {@return the oldest driver that loads the fatbin, as {@code cuDriverGetVersion} reports versions
     * (1000 × major + 10 × minor)} That is the CUDA release its {@code nvcc} came from: within a major
     * release a driver runs what any of its minor releases built, and an older major release's driver
     * does not.
     *
     * @param properties the build record ({@link #loadProperties()})
     * @throws IllegalStateException if its {@code nvcc.version} names no release
     */
    static int requiredDriverVersion(Properties properties) {
        final String nvcc = properties.getProperty("nvcc.version", "");
        final java.util.regex.Matcher m = NVCC_RELEASE.matcher(nvcc);
        if (!m.find()) {
            throw new IllegalStateException("the fatbin's build record names no CUDA release: nvcc.version='" + nvcc + "'");
        }
        return Integer.parseInt(m.group(1)) * 1000;
    }

    /**
     * @param driver   the driver's version, from {@code cuDriverGetVersion}
     * @param required {@link #requiredDriverVersion}
     * @return why a driver of that version cannot load the kernels, or {@code null} if it can
     */
    static String driverTooOld(int driver, int required) {
        if (driver >= required) {
            return null;
        }
        return "the CUDA driver supports CUDA " + release(driver) + " (cuDriverGetVersion " + driver + "), older than CUDA "
            + release(required) + ", which built kvpool's kernels: install a driver for CUDA " + release(required) + " or newer";
    }

    /** @return {@code 12.8} for 12080 */
    private static String release(int version) {
        return version / 1000 + "." + version % 1000 / 10;
    }

    /** "release 13.0" in nvcc's banner; only the major release decides which drivers load the fatbin. */
    private static final java.util.regex.Pattern NVCC_RELEASE = java.util.regex.Pattern.compile("release (\\d{1,3})\\.\\d{1,2}");

    private static byte[] read(String resource) {
        try (InputStream in = open(resource)) {
            return in.readAllBytes();
        } catch (IOException e) {
            throw new UncheckedIOException(e);
        }
    }

    private static InputStream open(String resource) throws IOException {
        final InputStream in = Kernels.class.getResourceAsStream(resource);
        if (in == null) {
            throw new IOException("missing classpath resource " + resource + " (run kvpool-cuda/build-kernels.sh)");
        }
        return in;
    }
}
