package io.kvpool.examples.server.api;

import java.util.regex.Pattern;

/**
 * The example's authentication: {@code Authorization: Bearer sk-<tenant>}, where the tenant is
 * {@code [A-Za-z0-9_-]{1,64}}. The key <em>is</em> the tenant name — enough to show isolation between
 * tenants; a real deployment would look keys up in a table of secrets.
 */
public final class Auth {

    /** A tenant name: what a key names, and what the roles' internal endpoints accept. */
    public static final Pattern TENANT = Pattern.compile("[A-Za-z0-9_-]{1,64}");
    private static final Pattern KEY = Pattern.compile("sk-(" + TENANT.pattern() + ")");

    private Auth() {
    }

    /**
     * @param authorization every {@code Authorization} line of the request
     * @return the tenant
     * @throws ApiError 401 if there is none, more than one (two keys: which one is meant depends on who reads them), or
     *                  the one is not a well-formed key
     */
    public static String tenant(java.util.List<String> authorization) throws ApiError {
        if (authorization.size() > 1) {
            throw ApiError.of(401, "authentication_error", "invalid_api_key",
                "more than one Authorization header: send exactly one, Authorization: Bearer sk-<tenant>");
        }
        return tenant(authorization.isEmpty() ? null : authorization.get(0));
    }

    /**
     * @param authorization the {@code Authorization} header, or {@code null}
     * @return the tenant
     * @throws ApiError 401 if the header is missing or not a well-formed key
     */
    public static String tenant(String authorization) throws ApiError {
        if (authorization == null || authorization.isBlank()) {
            throw ApiError.of(401, "authentication_error", "missing_api_key",
                "no API key: send Authorization: Bearer sk-<tenant>, tenant = [A-Za-z0-9_-]{1,64}");
        }
        final String h = authorization.strip();
        if (h.length() < 7 || !h.regionMatches(true, 0, "Bearer ", 0, 7)) {
            throw ApiError.of(401, "authentication_error", "invalid_api_key",
                "the Authorization header is not a Bearer key: send Authorization: Bearer sk-<tenant>");
        }
        final var m = KEY.matcher(h.substring(7).strip());
        if (!m.matches()) {
            throw ApiError.of(401, "authentication_error", "invalid_api_key",
                "malformed API key: expected sk-<tenant> with tenant = [A-Za-z0-9_-]{1,64}");
        }
        return m.group(1);
    }
}
