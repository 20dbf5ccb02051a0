package io.kvpool.examples.server.role;

/**
 * A role refused a request id that is already in flight there: another router (or a router that restarted)
 * in front of the same role processes used the same id. The role started nothing for the refused call, and
 * nothing of the request already in flight under that id was touched. Role endpoints answer it with
 * {@code 409} and the reason {@value #REASON}; the router turns it into a {@code 503} (retry: its next id differs).
 */
public final class DuplicateRequestException extends IllegalStateException {

    /** The JSON error's reason. */
    public static final String REASON = "duplicate_request_id";

    private static final long serialVersionUID = 1L;

    public DuplicateRequestException(String message) {
        super(message);
    }
}
