package io.kvpool.cuda;

import jcuda.driver.CUresult;

/** A CUDA driver call failed: the message names the call, the {@code CUresult} and the numbers involved. */
public final class CudaException extends RuntimeException {
    private static final long serialVersionUID = 1L;

    private final int result;

    /**
     * @param call   the driver call, e.g. {@code "cuMemAlloc(1073741824 bytes)"}
     * @param result its {@code CUresult}
     * @param detail what was being done, with the numbers (may be empty)
     */
    public CudaException(String call, int result, String detail) {
        super(call + " failed: " + CUresult.stringFor(result) + " (" + result + ")" + (detail.isEmpty() ? "" : "; " + detail));
        this.result = result;
    }

    /** @return the {@code CUresult} code */
    public int result() {
        return result;
    }

    /** Throws unless {@code result} is {@code CUDA_SUCCESS}. */
    static void check(int result, String call) {
        if (result != CUresult.CUDA_SUCCESS) {
            throw new CudaException(call, result, "");
        }
    }
}
