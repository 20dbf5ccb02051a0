package io.kvpool.transfer.spi;

import io.kvpool.transfer.TransferException;

/** A link is down, or was used in a way it cannot honour. */
public final class LinkFailedException extends TransferException {
    private static final long serialVersionUID = 1L;

    /**
     * Creates a link failure.
     *
     * @param message what failed, naming the link
     */
    public LinkFailedException(String message) {
        super(message);
    }

    /**
     * Creates a link failure caused by another exception.
     *
     * @param message what failed, naming the link
     * @param cause   the underlying failure
     */
    public LinkFailedException(String message, Throwable cause) {
        super(message, cause);
    }
}
