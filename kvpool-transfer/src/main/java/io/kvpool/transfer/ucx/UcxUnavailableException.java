package io.kvpool.transfer.ucx;

import io.kvpool.transfer.TransferException;

/** UCX cannot be used in this process (libucp missing or incompatible); the message carries the loader's text. */
public final class UcxUnavailableException extends TransferException {
    private static final long serialVersionUID = 1L;

    /**
     * Creates the exception for a failed load of UCX.
     *
     * @param message why, with the loader's error text
     * @param cause   the loader's error
     */
    public UcxUnavailableException(String message, Throwable cause) {
        super(message, cause);
    }
}
