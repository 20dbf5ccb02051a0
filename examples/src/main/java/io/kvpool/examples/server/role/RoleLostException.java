package io.kvpool.examples.server.role;

/**
 * A role in another process could not be reached, or its stream broke: the process is gone, not listening,
 * or stopped answering. An {@link IllegalStateException}, so that the router answers 503 when it happens
 * before a request was admitted (as for a closed role); after the transfer committed it answers 502
 * ({@code role_lost}).
 */
public final class RoleLostException extends IllegalStateException {
    private static final long serialVersionUID = 1L;

    /** @param message names the role, its URL and what failed */
    public RoleLostException(String message, Throwable cause) {
        super(message, cause);
    }

    /** @param message names the role, its URL and what failed */
    public RoleLostException(String message) {
        super(message);
    }
}
