package io.kvpool.examples.server.role;

import io.kvpool.Admission;

import java.util.LinkedHashMap;
import java.util.Map;
import java.util.Objects;

/**
 * A role refused a request before any KV moved: its reason, a message with the numbers, and the numbers
 * themselves (for the JSON error body).
 *
 * @param role    the role that refused ("router", "prefill" or "decode")
 * @param reason  why
 * @param message one line with the numbers
 * @param numbers the numbers by name (e.g. {@code requested_tokens}, {@code max_context_tokens}, {@code pages_needed})
 */
public record Rejection(String role, Reason reason, String message, Map<String, Long> numbers) {

    /** Why a request was refused; each maps to one HTTP status (see {@link io.kvpool.examples.server.api.ApiError#of(Rejection)}). */
    public enum Reason {
        /** prompt + max_tokens exceeds the context (400): the request is wrong, do not retry. */
        CONTEXT_TOO_LONG,
        /** The request needs more pages than the pool has in service even when empty (413). */
        EXCEEDS_POOL,
        /**
         * The prompt needs more pages than one KV transfer descriptor carries ({@link io.kvpool.examples.server.config.ServerConfig#MAX_PAGES_PER_TRANSFER}):
         * it can never be transferred (413, no Retry-After). The startup check keeps a consistent deployment from
         * advertising such a context; this is the answer when a role's layout or context differs from the router's.
         */
        EXCEEDS_TRANSFER,
        /** It fits, but not now: pages or transfer slots are taken (429, Retry-After). */
        RETRY_LATER,
        /** The decode side cannot take transfers now: no prefill link is up (503, Retry-After). */
        UNAVAILABLE
    }

    public Rejection {
        Objects.requireNonNull(role, "role");
        Objects.requireNonNull(reason, "reason");
        Objects.requireNonNull(message, "message");
        numbers = java.util.Collections.unmodifiableMap(new LinkedHashMap<>(numbers));
    }

    /** A pool's typed admission refusal, with its numbers. */
    static Rejection of(String role, Admission a) {
        final Reason reason = switch (a.decision()) {
            case REJECTED_CONTEXT_TOO_LONG -> Reason.CONTEXT_TOO_LONG;
            case REJECTED_EXCEEDS_POOL -> Reason.EXCEEDS_POOL;
            case RETRY_LATER -> Reason.RETRY_LATER;
            case ADMITTED -> throw new IllegalArgumentException("an admitted request is not a rejection");
        };
        final Map<String, Long> n = new LinkedHashMap<>();
        n.put("requested_tokens", a.requestedTokens());
        n.put("max_context_tokens", a.maxContextTokens());
        n.put("pages_needed", a.pagesNeeded());
        n.put("pages_available", a.pagesAvailable());
        n.put("pages_in_service", a.pagesInService());
        return new Rejection(role, reason, role + " pool: " + a.message(), n);
    }
}
