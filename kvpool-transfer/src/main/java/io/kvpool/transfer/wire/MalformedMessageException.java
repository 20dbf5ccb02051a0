package io.kvpool.transfer.wire;

import io.kvpool.transfer.TransferException;

/** A control frame that does not decode exactly; the link that carried it must be closed. */
public final class MalformedMessageException extends TransferException {
    private static final long serialVersionUID = 1L;

    /**
     * Creates the exception for a frame that does not decode.
     *
     * @param message what is wrong, with the offending values
     */
    public MalformedMessageException(String message) {
        super(message);
    }
}
