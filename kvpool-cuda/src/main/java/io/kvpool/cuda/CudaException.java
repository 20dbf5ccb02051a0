package io.kvpool.cuda;

import jcuda.driver.CUresult;

/** A CUDA driver call failed: the message names the call, the {@code CUresult} and the numbers involved. */
public final class CudaException extends RuntimeException {
    private static final long serialVersionUID = 1L;

    private final int result;

    /**
     * Creates the exception; its message names the call, the result code and its name, and the detail.
     *
     * @param call   the driver call, e.g. {@code "cuMemAlloc(1073741824 bytes)"}
     * @param result its {@code CUresult}
     * @param detail what was being done, with the numbers (may be empty)
     */
    public CudaException(String call, int result, String detail) {
        super(call + " failed: " + CUresult.stringFor(result) + " (" + result + ")" + (detail.isEmpty() ? "" : "; " + detail));
        this.result = result;
    }

    /** {@return the {@code CUresult} code} */
    public int result() {
        return result;
    }

    /** CUresult codes by JCuda's name for them (JCuda's own exceptions carry only the name). */
    private static final java.util.Map<String, Integer> CODES = codes();

    private static java.util.Map<String, Integer> codes() {
        final java.util.Map<String, Integer> m = new java.util.HashMap<>();
        for (int c = 0; c <= 1000; c++) {
            final String name = CUresult.stringFor(c);
            if (!name.startsWith("INVALID")) {
                m.putIfAbsent(name, c);
            }
        }
        return m;
    }

    /**
     * Runs one driver call and returns its {@code CUresult}, whatever JCuda's JVM-wide exception switch says: with
     * JCuda's exceptions on (a host application may turn them on), a non-zero result arrives as a
     * {@code jcuda.CudaException} naming it, which is turned back into the code — so kvpool-cuda's own handling
     * (a batch still running, cleanup that ignores errors, messages with the numbers) stays the same either way.
     *
     * @param call the driver call, e.g. {@code () -> JCudaDriver.cuCtxSynchronize()}
     * @return the call's {@code CUresult} ({@code CUDA_ERROR_UNKNOWN} for a name JCuda does not map)
     */
    public static int code(java.util.function.IntSupplier call) {
        try {
            return call.getAsInt();
        } catch (jcuda.CudaException e) {
            return CODES.getOrDefault(e.getMessage() == null ? "" : e.getMessage().strip(), CUresult.CUDA_ERROR_UNKNOWN);
        }
    }

    /** Throws unless {@code result} is {@code CUDA_SUCCESS}. */
    static void check(int result, String call) {
        if (result != CUresult.CUDA_SUCCESS) {
            throw new CudaException(call, result, "");
        }
    }
}
