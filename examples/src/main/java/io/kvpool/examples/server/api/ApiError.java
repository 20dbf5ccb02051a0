package io.kvpool.examples.server.api;

import io.kvpool.examples.http.InternalErrors;
import io.kvpool.examples.server.role.DecodeCall;
import io.kvpool.examples.server.role.DuplicateRequestException;
import io.kvpool.examples.server.role.Rejection;

import java.util.LinkedHashMap;
import java.util.Locale;
import java.util.Map;
import java.util.Objects;

/**
 * An error answered to the client as JSON:
 * <pre>
 * {"error":{"type":"invalid_request_error","reason":"context_too_long","message":"…",
 *           "role":"router","requested_tokens":5000,"max_context_tokens":4096, …}}
 * </pre>
 * {@code type} is the OpenAI-style class, {@code reason} the precise cause; the numbers behind the
 * decision follow as fields. 429 and 503 carry {@code Retry-After}.
 */
public final class ApiError extends Exception {
    private static final long serialVersionUID = 1L;

    private final int status;
    private final String type;
    private final String reason;
    private final Map<String, Object> fields;
    private final int retryAfterSeconds;

    public ApiError(int status, String type, String reason, String message, Map<String, ?> fields, int retryAfterSeconds) {
        super(Objects.requireNonNull(message, "message"), null, false, false);
        this.status = status;
        this.type = Objects.requireNonNull(type, "type");
        this.reason = Objects.requireNonNull(reason, "reason");
        this.fields = java.util.Collections.unmodifiableMap(new LinkedHashMap<>(fields));
        this.retryAfterSeconds = retryAfterSeconds;
    }

    /** @return the HTTP status */
    public int status() {
        return status;
    }

    /** @return the error class ({@code invalid_request_error}, {@code rate_limit_error} …) */
    public String type() {
        return type;
    }

    /** @return the precise cause ({@code context_too_long}, {@code malformed_json} …) */
    public String reason() {
        return reason;
    }

    /** @return the numbers and names behind the decision */
    public Map<String, Object> fields() {
        return fields;
    }

    /** @return seconds for {@code Retry-After}, or 0 for none */
    public int retryAfterSeconds() {
        return retryAfterSeconds;
    }

    /** @return the body's {@code error} object */
    public Map<String, Object> body() {
        final Map<String, Object> e = new LinkedHashMap<>();
        e.put("type", type);
        e.put("reason", reason);
        e.put("message", getMessage());
        e.putAll(fields);
        return Map.of("error", e);
    }

    public static ApiError badRequest(String reason, String message) {
        return new ApiError(400, "invalid_request_error", reason, message, Map.of(), 0);
    }

    public static ApiError of(int status, String type, String reason, String message) {
        return new ApiError(status, type, reason, message, Map.of(), 0);
    }

    /**
     * A 500 for an unexpected exception (a bug): logged at ERROR under a fresh error id, answered with the id and
     * never with the exception's text, which may name other requests, tenants or peers.
     *
     * @param what what failed, for the log line
     * @return 500 {@code server_error}/{@code internal_error} with {@code error_id}
     */
    public static ApiError internal(System.Logger log, String what, Throwable e) {
        final String id = InternalErrors.log(log, what, e);
        return new ApiError(500, "server_error", "internal_error", InternalErrors.message(id), Map.of("error_id", id), 0);
    }

    /** @return the 409 a role endpoint answers for a request id already in flight there */
    public static ApiError of(DuplicateRequestException e) {
        return of(409, "conflict", DuplicateRequestException.REASON, e.getMessage());
    }

    /**
     * A role's admission refusal: 400, 413, 429 or 503 by its reason, with its numbers. Only 429 and 503 carry
     * {@code Retry-After}: they are the refusals that waiting can lift (see examples/docs/example-server-refusals.md).
     */
    public static ApiError of(Rejection r) {
        final Map<String, Object> f = new LinkedHashMap<>();
        f.put("role", r.role());
        f.putAll(r.numbers());
        final String reason = r.reason().name().toLowerCase(Locale.ROOT);
        return switch (r.reason()) {
            case CONTEXT_TOO_LONG -> new ApiError(400, "invalid_request_error", reason, r.message(), f, 0);
            case EXCEEDS_POOL, EXCEEDS_TRANSFER -> new ApiError(413, "request_too_large", reason, r.message(), f, 0);
            case RETRY_LATER -> new ApiError(429, "rate_limit_error", reason, r.message(), f, 1);
            // the refusing role names it: decode without a prefill link, or prefill that had the request aborted first
            case UNAVAILABLE -> new ApiError(503, "service_unavailable", (r.role().equals("prefill") ? "prefill" : "decode")
                + "_unavailable", r.message(), f, 1);
        };
    }

    /**
     * A transfer that did not commit: 503 when decode said the same request can succeed later
     * ({@link DecodeCall.TransferOutcome#retryLater()}: prefill's sender aborted it because a write or flush of its
     * failed, and a retry, on a fresh link if that one was retired, can succeed) or the link or the decode process was
     * lost; 504 on a deadline; else 502 (the pages arrived wrong: a length, canary or checksum mismatch, a bad
     * completion; decode's own abort; a sender abort for another cause).
     */
    public static ApiError transferFailed(long requestId, DecodeCall.TransferOutcome o) {
        final String failure = o.failure() == null ? "unknown" : o.failure().toLowerCase(Locale.ROOT);
        final Map<String, Object> f = Map.of("request_id", requestId);
        final String message = "KV transfer of request " + requestId + " failed (" + failure + "): " + o.message();
        if (o.retryLater()) {
            return new ApiError(503, "service_unavailable", failure, message, f, 1);
        }
        return switch (failure) {
            case "peer_lost", "role_lost" -> new ApiError(503, "service_unavailable", failure, message, f, 1);
            case "timeout" -> new ApiError(504, "timeout", failure, message, f, 0);
            default -> new ApiError(502, "transfer_failed", failure, message, f, 0);
        };
    }
}
