package io.kvpool.examples.server.role;

/**
 * A role process answered the router's internal call with an error that says the role is up: a 4xx other than a
 * duplicate id's 409 (the role refused the call: malformed, or a path or method it does not serve, as in another build
 * or a wrong URL), or a 5xx other than 503 (the role took the call and failed it). The router answers the client a 502
 * <b>without</b> {@code Retry-After} and does not mark the role down, unlike a role that is unreachable or closing
 * ({@link RoleLostException}, 503). A 4xx never turns into a success on retry; a 5xx may, so background work such as
 * abort delivery retries it.
 */
public final class RoleRefusedException extends IllegalStateException {
    private static final long serialVersionUID = 1L;

    private final int status;

    public RoleRefusedException(String message, int status) {
        super(message);
        this.status = status;
    }

    /** @return the role's HTTP status: 4xx (it refused the call), or 5xx other than 503 (it failed the call) */
    public int status() {
        return status;
    }
}
