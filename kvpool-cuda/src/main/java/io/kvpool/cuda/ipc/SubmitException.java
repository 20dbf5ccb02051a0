package io.kvpool.cuda.ipc;

/** The device refused a batch ({@link IpcEngine#submit}); says whether its copy may run anyway. */
final class SubmitException extends RuntimeException {
    private static final long serialVersionUID = 1L;

    private final boolean enqueued;
    private final int code;

    /**
     * @param message  the call that failed, with the numbers
     * @param code     its error code ({@code CUresult})
     * @param enqueued whether the copy was enqueued before the failure (it may then land, untracked)
     */
    SubmitException(String message, int code, boolean enqueued) {
        super(message);
        this.code = code;
        this.enqueued = enqueued;
    }

    /** @return whether the copy was enqueued and may land although the batch cannot be tracked */
    boolean enqueued() {
        return enqueued;
    }

    /** @return the error code */
    int code() {
        return code;
    }
}
