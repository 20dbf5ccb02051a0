package io.kvpool.transfer.spi;

import io.kvpool.transfer.TransferException;

/** A link is down, or was used in a way it cannot honour. */
public final class LinkFailedException extends TransferException {
    private static final long serialVersionUID = 1L;

    /** @param message what failed, naming the link */
    public LinkFailedException(String message) {
        super(message);
    }

    /** @param message what failed, naming the link; @param cause the underlying failure */
    public LinkFailedException(String message, Throwable cause) {
        super(message, cause);
    }
}
