package io.kvpool.cuda.ipc;

import java.io.IOException;
import java.io.InputStream;
import java.io.UncheckedIOException;
import java.util.Properties;

/**
 * The CUDA IPC transport's kernel, {@value #PUT_PAGES} of {@code src/main/cuda/kvpool_ipc_kernels.cu}, in
 * its own committed fatbin (SASS sm_80, sm_90, sm_100 and PTX compute_100, built by
 * {@code kvpool-cuda/build-ipc-kernels.sh}, rebuilt by the build where {@code nvcc} is installed and the
 * source changed; {@code IpcFatbinResourceTest} guards against drift).
 *
 * <p>{@value #PUT_PAGES}{@code (const int* src, const int* dst, int n, const unsigned char* srcArena,
 * long long srcPlaneBytes, unsigned char* dstArena, long long dstPlaneBytes, int planes, long long pageStride)}:
 * for {@code i < n}, in every plane {@code q}, the {@code pageStride} bytes at
 * {@code dstArena + q·dstPlaneBytes + dst[i]·pageStride} ← those at {@code srcArena + q·srcPlaneBytes + src[i]·pageStride}.
 * Both arenas are laid out as {@link io.kvpool.cuda.DeviceLayout} draws, for the same page layout and any
 * page counts; one launch per batch, grid-stride, 16-byte vectors when everything is 16-byte aligned.
 */
final class IpcKernels {
    private IpcKernels() {
    }

    /** Classpath resource of the fatbin. */
    static final String FATBIN_RESOURCE = "/io/kvpool/cuda/ipc/kvpool_ipc_kernels.fatbin";
    /** Classpath resource recording how it was built. */
    static final String PROPERTIES_RESOURCE = "/io/kvpool/cuda/ipc/kvpool_ipc_kernels.properties";
    /** The batched cross-arena page copy. */
    static final String PUT_PAGES = "kvpool_ipc_put_pages";

    /** @return the fatbin followed by one 0 byte (harmless to {@code cuModuleLoadData}) */
    static byte[] loadFatbin() {
        final byte[] raw = read(FATBIN_RESOURCE);
        final byte[] out = new byte[raw.length + 1];
        System.arraycopy(raw, 0, out, 0, raw.length);
        return out;
    }

    /** @return the build record beside the fatbin */
    static Properties loadProperties() {
        final Properties p = new Properties();
        try (InputStream in = open(PROPERTIES_RESOURCE)) {
            p.load(in);
        } catch (IOException e) {
            throw new UncheckedIOException(e);
        }
        return p;
    }

    private static byte[] read(String resource) {
        try (InputStream in = open(resource)) {
            return in.readAllBytes();
        } catch (IOException e) {
            throw new UncheckedIOException(e);
        }
    }

    private static InputStream open(String resource) throws IOException {
        final InputStream in = IpcKernels.class.getResourceAsStream(resource);
        if (in == null) {
            throw new IOException("missing classpath resource " + resource + " (run kvpool-cuda/build-ipc-kernels.sh)");
        }
        return in;
    }
}
