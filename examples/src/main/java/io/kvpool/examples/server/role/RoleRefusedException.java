package io.kvpool.examples.server.role;

/**
 * A role process answered the router's internal call with a 4xx (other than a duplicate id's 409): the router sent
 * something the role will never take — a malformed call, a path or method it does not serve (another build, a wrong
 * URL). Waiting does not change that, so the router answers it as a 502 <b>without</b> {@code Retry-After}, unlike a
 * role that is unreachable or closing ({@link RoleLostException}, 503).
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
