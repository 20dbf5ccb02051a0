package io.kvpool.transfer;

/** Base of the transfer layer's exceptions. */
public class TransferException extends RuntimeException {
    private static final long serialVersionUID = 1L;

    /**
     * Creates a transfer failure.
     *
     * @param message what went wrong, with the numbers
     */
    public TransferException(String message) {
        super(message);
    }

    /**
     * Creates a transfer failure caused by another exception.
     *
     * @param message what went wrong, with the numbers
     * @param cause   the underlying failure
     */
    public TransferException(String message, Throwable cause) {
        super(message, cause);
    }
}
