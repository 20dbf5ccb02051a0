package io.kvpool.transfer;

/**
 * {@link TransferReceiver#start} could not allocate the pages of a request its pool admitted, for another reason than a
 * lack of them: the storage failed (a page whose fill failed when it was freed is filled again before reuse, and
 * that failed too) or an allocator invariant broke. A fault to investigate, not a refusal a client should retry. The
 * cause says what failed; nothing of the request is held.
 */
public final class AllocationFaultException extends TransferException {
    private static final long serialVersionUID = 1L;

    /**
     * Creates the fault.
     *
     * @param message what failed, with the request, its tokens and pages
     * @param cause   the storage's or the pool's exception
     */
    public AllocationFaultException(String message, Throwable cause) {
        super(message, cause);
    }
}
