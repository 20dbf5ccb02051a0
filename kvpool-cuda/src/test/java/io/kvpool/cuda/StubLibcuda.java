package io.kvpool.cuda;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.List;

import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * A stub {@code libcuda.so.1}, built here with gcc, for tests that run kvpool-cuda's driver calls without a GPU. A child
 * JVM loads it before JCuda's natives; the dynamic linker then satisfies JCuda's {@code DT_NEEDED libcuda.so.1} with it
 * (matched by soname), and only the entry points called are needed (lazy binding). It answers "one device"; a batch
 * is always still running ({@code cuEventQuery}: {@code CUDA_ERROR_NOT_READY}, 600) and {@code cuEventSynchronize} takes
 * 3 s; allocations get distinct fake addresses, and {@code cuMemAlloc}, {@code cuMemFree}, {@code cuIpcCloseMemHandle},
 * {@code cuEventDestroy} and the context release print a line each ({@code alloc 0x...}, {@code free 0x...}), so a test reads what the child
 * freed, in order with what the child prints. Kernels launch and copies copy nothing; pinned host memory is plain
 * memory. {@code cuStreamSynchronize} succeeds unless the child calls the stub's
 * {@code stub_set_stream_synchronize_result(int)} (through the FFM linker) for a failure; {@code cuCtxSynchronize} likewise
 * ({@code stub_set_ctx_synchronize_result(int)}), {@code cuCtxSetCurrent} too ({@code stub_set_ctx_set_current_result(int)},
 * or {@code stub_fail_ctx_set_current_after(int n, int result)} for only the call after the next {@code n};
 * a failed one leaves the current context as it was) and {@code cuEventSynchronize}
 * ({@code stub_set_event_synchronize_result(int)}: it then fails at once), and {@code cuMemFreeHost} prints {@code free host 0x...}. Built with a context per thread ({@link #build(Path, int, boolean)}), work on a thread without a current
 * context fails, as in the driver. A child keeps the stub out of the surefire JVM.
 */
public final class StubLibcuda {

    private StubLibcuda() {
    }

    private static final String SOURCE = """
        /* just enough of libcuda.so.1 for JCuda to load and for the calls kvpool-cuda's tests make */
        #include <stdio.h>
        #include <stdlib.h>
        #include <string.h>
        #include <unistd.h>
        #ifndef DRIVER_VERSION
        #define DRIVER_VERSION 13000
        #endif
        /* what cuCtxSetCurrent answers: 0 unless a test asks for a failure (stub_set_ctx_set_current_result); a failed call changes nothing */
        static int ctx_set_current_result;
        void stub_set_ctx_set_current_result(int r) { ctx_set_current_result = r; }
        /* or only one call fails: the next n calls succeed, the one after answers r, later ones succeed again
           (stub_fail_ctx_set_current_after) */
        static int ctx_set_current_fail_after = -1;
        static int ctx_set_current_fail_result;
        void stub_fail_ctx_set_current_after(int n, int r) { ctx_set_current_fail_after = n; ctx_set_current_fail_result = r; }
        static int ctx_set_current_answer(void) {
            if (ctx_set_current_result) return ctx_set_current_result;
            if (ctx_set_current_fail_after >= 0 && ctx_set_current_fail_after-- == 0) return ctx_set_current_fail_result;
            return 0;
        }
        #ifdef CONTEXT_PER_THREAD
        /* as the driver: the current context belongs to the OS thread, and work on a thread without one fails */
        static __thread void* current_ctx;
        static int need(const char* call) {
            if (current_ctx == 0) { printf("%s on a thread with no current context\\n", call); fflush(stdout); return 201; }
            return 0;
        }
        #define PRIMARY_CTX ((void*) 0x1000)
        int cuCtxSetCurrent(void* ctx) { int r = ctx_set_current_answer(); if (r) return r; current_ctx = ctx; return 0; }
        #else
        static int need(const char* call) { (void) call; return 0; }
        #define PRIMARY_CTX ((void*) 0)
        int cuCtxSetCurrent(void* ctx) { (void) ctx; return ctx_set_current_answer(); }
        #endif
        int cuInit(unsigned flags) { (void) flags; return 0; }
        int cuDriverGetVersion(int* v) { *v = DRIVER_VERSION; return 0; }
        int cuDeviceGetCount(int* count) { *count = 1; return 0; }
        int cuDeviceGet(int* dev, int ordinal) { *dev = ordinal; return 0; }
        int cuDeviceGetName(char* name, int len, int dev) { (void) dev; snprintf(name, len, "stub device"); return 0; }
        /* what cuCtxSynchronize answers (after the context check): 0 unless a test asks for a failure (stub_set_ctx_synchronize_result) */
        static int ctx_synchronize_result;
        void stub_set_ctx_synchronize_result(int r) { ctx_synchronize_result = r; }
        int cuCtxSynchronize(void) { int r = need("cuCtxSynchronize"); return r ? r : ctx_synchronize_result; }
        int cuEventQuery(void* event) { (void) event; return 600; /* CUDA_ERROR_NOT_READY: still running */ }
        /* a batch that takes 3 s to finish; a test sees a thread inside this call by its stack. A test may ask for a wait
           that fails at once instead (stub_set_event_synchronize_result) */
        static int event_synchronize_result;
        void stub_set_event_synchronize_result(int r) { event_synchronize_result = r; }
        int cuEventSynchronize(void* event) { (void) event; if (event_synchronize_result) return event_synchronize_result; sleep(3); return 0; }
        int cuDevicePrimaryCtxRetain(void** ctx, int dev) { (void) dev; *ctx = PRIMARY_CTX; return 0; }
        int cuDevicePrimaryCtxRelease(int dev) { puts("released context"); fflush(stdout); (void) dev; return 0; }
        int cuDevicePrimaryCtxRelease_v2(int dev) { puts("released context"); fflush(stdout); (void) dev; return 0; }
        int cuMemGetInfo_v2(size_t* free, size_t* total) { *free = 1ULL << 30; *total = 1ULL << 31; return 0; }
        static unsigned long long next_address = 0x100000000ULL;
        int cuMemAlloc_v2(unsigned long long* p, size_t bytes) {
            *p = next_address; next_address += ((bytes >> 20) + 1) << 20;
            printf("alloc 0x%llx\\n", *p); fflush(stdout); return 0;
        }
        int cuMemFree_v2(unsigned long long p) { printf("free 0x%llx\\n", p); fflush(stdout); return 0; }
        int cuModuleLoadData(void** m, const void* image) { (void) image; *m = (void*) 1; return 0; }
        int cuModuleGetFunction(void** f, void* m, const char* name) { (void) m; (void) name; *f = (void*) 2; return 0; }
        int cuModuleUnload(void* m) { (void) m; return 0; }
        int cuMemcpyHtoD_v2(unsigned long long dst, const void* src, size_t n) { (void) dst; (void) src; (void) n; return need("cuMemcpyHtoD"); }
        int cuLaunchKernel(void* f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                           unsigned shared, void* stream, void** params, void** extra) {
            (void) f; (void) gx; (void) gy; (void) gz; (void) bx; (void) by; (void) bz; (void) shared; (void) stream;
            (void) params; (void) extra; return need("cuLaunchKernel");
        }
        /* a 2D copy prints its geometry and the first 8 source bytes (host sources only), and copies nothing */
        typedef struct {
            size_t srcXInBytes, srcY; int srcMemoryType; const void* srcHost; unsigned long long srcDevice; void* srcArray;
            size_t srcPitch, dstXInBytes, dstY; int dstMemoryType; void* dstHost; unsigned long long dstDevice; void* dstArray;
            size_t dstPitch, WidthInBytes, Height;
        } memcpy2d;
        int cuMemcpy2D_v2(const memcpy2d* c) {
            const unsigned char* b = (const unsigned char*) c->srcHost;
            printf("memcpy2D dst 0x%llx dstPitch %zu srcPitch %zu width %zu height %zu src %02x%02x%02x%02x%02x%02x%02x%02x\\n",
                c->dstDevice, c->dstPitch, c->srcPitch, c->WidthInBytes, c->Height,
                b ? b[0] : 0, b ? b[1] : 0, b ? b[2] : 0, b ? b[3] : 0, b ? b[4] : 0, b ? b[5] : 0, b ? b[6] : 0, b ? b[7] : 0);
            fflush(stdout); return need("cuMemcpy2D");
        }
        /* pinned host memory: plain memory, its device address the host address */
        int cuMemHostAlloc(void** pp, size_t bytes, unsigned flags) { (void) flags; *pp = calloc(1, bytes); return *pp ? 0 : 2; }
        int cuMemHostGetDevicePointer_v2(unsigned long long* d, void* p, unsigned flags) { (void) flags; *d = (unsigned long long) p; return 0; }
        int cuMemFreeHost(void* p) { printf("free host %p\\n", p); fflush(stdout); free(p); return 0; }
        typedef struct { char reserved[64]; } ipc_handle;
        int cuIpcGetMemHandle(ipc_handle* h, unsigned long long p) { memset(h, 0, sizeof *h); memcpy(h->reserved, &p, sizeof p); return 0; }
        int cuIpcOpenMemHandle_v2(unsigned long long* p, ipc_handle h, unsigned flags) { (void) h; (void) flags; *p = 0x700000000ULL; return 0; }
        /* the allocation behind any opened handle: one 4 KiB block, whatever the handle claims */
        int cuMemGetAddressRange_v2(unsigned long long* base, unsigned long* size, unsigned long long p) {
            if (base) *base = p; if (size) *size = 4096; return 0;
        }
        int cuIpcCloseMemHandle(unsigned long long p) { (void) p; puts("closed mapping"); fflush(stdout); return 0; }
        /* a batch's completion: events and an asynchronous upload that do nothing, a stream with nothing to wait for */
        int cuEventCreate(void** e, unsigned flags) { (void) flags; *e = (void*) 3; return 0; }
        int cuEventRecord(void* e, void* stream) { (void) e; (void) stream; return 0; }
        int cuEventDestroy(void* e) { (void) e; puts("destroyed event"); fflush(stdout); return 0; }
        int cuEventDestroy_v2(void* e) { return cuEventDestroy(e); }
        int cuMemcpyHtoDAsync_v2(unsigned long long dst, const void* src, size_t n, void* stream) {
            (void) dst; (void) src; (void) n; (void) stream; return need("cuMemcpyHtoDAsync");
        }
        /* what cuStreamSynchronize answers: 0 unless a test asks for a failure (stub_set_stream_synchronize_result) */
        static int stream_synchronize_result;
        void stub_set_stream_synchronize_result(int r) { stream_synchronize_result = r; }
        int cuStreamSynchronize(void* stream) { (void) stream; return stream_synchronize_result; }
        int cuStreamCreate(void** s, unsigned flags) { (void) flags; *s = (void*) 5; return 0; }
        int cuStreamDestroy(void* s) { (void) s; return 0; }
        int cuStreamDestroy_v2(void* s) { return cuStreamDestroy(s); }
        /* every allocation is on device 0 (CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, the one attribute asked) */
        int cuPointerGetAttribute(void* data, int attribute, unsigned long long p) { (void) attribute; (void) p; *(int*) data = 0; return 0; }
        """;

    /**
     * Builds the stub into {@code dir}/libcuda.so.1, skipping the calling test (an assumption) without gcc.
     *
     * @param driverVersion what {@code cuDriverGetVersion} answers, e.g. 13000 for CUDA 13.0
     * @return the library's absolute path
     */
    public static Path build(Path dir, int driverVersion) throws IOException, InterruptedException {
        return build(dir, driverVersion, false);
    }

    /**
     * As {@link #build(Path, int)}; with {@code contextPerThread}, the current context belongs to the calling OS thread,
     * as in the driver, and {@code cuMemcpyHtoD}, {@code cuLaunchKernel} and {@code cuCtxSynchronize} on a thread with
     * none fail with {@code CUDA_ERROR_INVALID_CONTEXT} (201), printing which call it was.
     */
    static Path build(Path dir, int driverVersion, boolean contextPerThread) throws IOException, InterruptedException {
        NativeTools.assumeUsable("gcc", "to build a stub libcuda.so.1 for JCuda's natives");
        Files.createDirectories(dir);
        final Path src = dir.resolve("stub_cuda.c");
        Files.writeString(src, SOURCE);
        final Path lib = dir.resolve("libcuda.so.1").toAbsolutePath();
        final List<String> gcc = new java.util.ArrayList<>(List.of("gcc", "-shared", "-fPIC", "-DDRIVER_VERSION=" + driverVersion));
        if (contextPerThread) {
            gcc.add("-DCONTEXT_PER_THREAD");
        }
        gcc.addAll(List.of("-Wl,-soname,libcuda.so.1", "-o", lib.toString(), src.toString()));
        final String err = NativeTools.run(gcc, null, 60);
        assertTrue(err == null, () -> "building the stub failed: " + err);
        return lib;
    }

    /**
     * Runs {@code main} in a fresh JVM on this test's class path with {@code args = {libcuda, scenario}}; the child
     * loads the stub first ({@code System.load(args[0])}), and runs with {@code jvmOptions} before its class path.
     *
     * @return its output, stdout and stderr merged, stripped
     */
    public static String child(Path libcuda, Class<?> main, String scenario, String... jvmOptions) throws InterruptedException {
        final String java = Path.of(System.getProperty("java.home"), "bin", "java").toString();
        final StringBuilder out = new StringBuilder();
        final List<String> cmd = new java.util.ArrayList<>(List.of(java, "--enable-native-access=ALL-UNNAMED"));
        cmd.addAll(List.of(jvmOptions));
        cmd.addAll(List.of("-cp", System.getProperty("java.class.path"), main.getName(), libcuda.toString(), scenario));
        final String err = NativeTools.run(cmd, out, 60);
        assertTrue(err == null, () -> "the child JVM failed: " + err);
        return out.toString().strip();
    }
}
