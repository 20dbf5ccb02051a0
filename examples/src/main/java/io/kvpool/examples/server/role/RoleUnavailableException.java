package io.kvpool.examples.server.role;

/**
 * A role in this process cannot take a call now: it is closed (stopping), or its duty thread did not answer in
 * time. Waiting can help (a restarted or replaced role, a duty thread that catches up), so a role's endpoint answers
 * it 503 with {@code Retry-After}. Any other {@link IllegalStateException} from a role is a fault of the role (its
 * storage failed, a bug) and is answered 500, which the router turns into 502 {@code role_error}.
 */
public final class RoleUnavailableException extends IllegalStateException {
    private static final long serialVersionUID = 1L;

    /** @param message names the role and why it cannot take the call */
    public RoleUnavailableException(String message) {
        super(message);
    }
}
