package io.kvpool.cuda;

import org.junit.jupiter.api.Assumptions;

import static org.junit.jupiter.api.Assertions.fail;

/** GPU tests skip with the reason when no device can be used, and fail instead under {@code -Dkvpool.gpu.required=true}. */
public final class GpuAssume {
    private GpuAssume() {
    }

    public static void gpu() {
        final String reason = Cuda.unavailableReason();
        if (reason == null) {
            holdPrimaryContext();
            return;
        }
        if (Boolean.getBoolean("kvpool.gpu.required")) {
            fail("kvpool.gpu.required=true but " + reason);
        }
        Assumptions.abort("no GPU: " + reason);
    }

    private static jcuda.driver.CUcontext held;

    /**
     * Retains device 0's primary context for the rest of the test JVM. Each storage releases its own
     * reference on close; without this one the driver would tear the context down and build it again for
     * every test (dozens of times a run), which costs the GPU visit's time budget, not correctness.
     */
    private static synchronized void holdPrimaryContext() {
        if (held == null) {
            final jcuda.driver.CUdevice d = new jcuda.driver.CUdevice();
            CudaException.check(jcuda.driver.JCudaDriver.cuDeviceGet(d, 0), "cuDeviceGet(0)");
            final jcuda.driver.CUcontext c = new jcuda.driver.CUcontext();
            CudaException.check(jcuda.driver.JCudaDriver.cuDevicePrimaryCtxRetain(c, d), "cuDevicePrimaryCtxRetain");
            held = c;
        }
    }
}
