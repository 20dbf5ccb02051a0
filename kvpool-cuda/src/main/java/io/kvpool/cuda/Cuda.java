package io.kvpool.cuda;

import jcuda.driver.CUdevice;
import jcuda.driver.JCudaDriver;

/**
 * Whether a CUDA device can be used here, and why not. Probed once: JCuda's natives must load (they need
 * the driver's {@code libcuda.so.1}), {@code cuInit} must succeed, the driver must be of the CUDA release that
 * built the kernels or newer, and at least one device must exist.
 * Tests use {@link #unavailableReason()} to skip with the reason (or to fail when
 * {@code -Dkvpool.gpu.required=true}).
 *
 * <p>kvpool-cuda reads every driver call's {@code CUresult} through {@link CudaException#code}, so it leaves JCuda's
 * JVM-wide exception switch ({@code JCudaDriver.setExceptionsEnabled}) to the host application and works either way.
 */
public final class Cuda {
    private Cuda() {
    }

    private static final String REASON = probe();

    private static String probe() {
        try {
            final int init = CudaException.code(() -> JCudaDriver.cuInit(0));
            if (init != 0) {
                return "cuInit failed: " + jcuda.driver.CUresult.stringFor(init);
            }
            final int[] driver = new int[1];
            final int v = CudaException.code(() -> JCudaDriver.cuDriverGetVersion(driver));
            if (v != 0) {
                return "cuDriverGetVersion failed: " + jcuda.driver.CUresult.stringFor(v);
            }
            // an older driver refuses the fatbin at cuModuleLoadData with a code that does not say why
            final String old = Kernels.driverTooOld(driver[0], Kernels.requiredDriverVersion(Kernels.loadProperties()));
            if (old != null) {
                return old;
            }
            final int[] count = new int[1];
            final int r = CudaException.code(() -> JCudaDriver.cuDeviceGetCount(count));
            if (r != 0) {
                return "cuDeviceGetCount failed: " + jcuda.driver.CUresult.stringFor(r);
            }
            return count[0] == 0 ? "no CUDA device found (cuDeviceGetCount = 0)" : null;
        } catch (UnsatisfiedLinkError | NoClassDefFoundError | ExceptionInInitializerError e) {
            return "JCuda's native libraries cannot load (no CUDA driver here?): " + e;
        } catch (RuntimeException e) { // the kernels' build record unreadable: say so, not fail this class's loading
            return "cannot tell which driver the kernels need: " + e;
        }
    }

    /** {@return whether a device can be used} */
    public static boolean available() {
        return REASON == null;
    }

    /** {@return why no device can be used, or {@code null} if one can} */
    public static String unavailableReason() {
        return REASON;
    }

    /** @throws IllegalStateException with the reason, if no device can be used */
    static void requireAvailable() {
        if (REASON != null) {
            throw new IllegalStateException("CUDA is not available: " + REASON);
        }
    }

    /** @return the device's name */
    static String deviceName(CUdevice device) {
        final byte[] name = new byte[256];
        CudaException.check(CudaException.code(() -> JCudaDriver.cuDeviceGetName(name, name.length, device)), "cuDeviceGetName");
        int n = 0;
        while (n < name.length && name[n] != 0) {
            n++;
        }
        return new String(name, 0, n, java.nio.charset.StandardCharsets.UTF_8);
    }
}
