package io.kvpool.examples.load;

/**
 * Bad HTTP input the generator mixes in: each must be answered with its 4xx and reason, before anything
 * reaches a pool (the pool check at the end shows that nothing changed).
 */
public enum Garbage {
    /** A body cut off in the middle of a JSON object. */
    MALFORMED_JSON(400, "malformed_json"),
    /** {@code "max_tokens": -1}. */
    NEGATIVE_MAX_TOKENS(400, "invalid_max_tokens"),
    /** No {@code max_tokens}. */
    MISSING_MAX_TOKENS(400, "invalid_max_tokens"),
    /** {@code "prompt": 42}. */
    PROMPT_NOT_TEXT(400, "invalid_prompt"),
    /** No {@code Authorization} header. */
    MISSING_KEY(401, "missing_api_key"),
    /** A body one byte over the server's limit, with its {@code Content-Length}. */
    HUGE_BODY(413, "body_too_large"),
    /** A body one byte over the server's limit, chunked (no {@code Content-Length}: the server must count). */
    HUGE_CHUNKED_BODY(413, "body_too_large");

    private final int status;
    private final String reason;

    Garbage(int status, String reason) {
        this.status = status;
        this.reason = reason;
    }

    /** @return the status the server must answer */
    public int status() {
        return status;
    }

    /** @return the {@code error.reason} the server must answer */
    public String reason() {
        return reason;
    }

    /** @return the body to send ({@code maxBodyBytes}: the server's limit) */
    String body(String prompt, int maxBodyBytes) {
        return switch (this) {
            case MALFORMED_JSON -> "{\"prompt\": \"" + prompt + "\", \"max_tok";
            case NEGATIVE_MAX_TOKENS -> "{\"prompt\": \"" + prompt + "\", \"max_tokens\": -1}";
            case MISSING_MAX_TOKENS -> "{\"prompt\": \"" + prompt + "\"}";
            case PROMPT_NOT_TEXT -> "{\"prompt\": 42, \"max_tokens\": 4}";
            case MISSING_KEY -> "{\"prompt\": \"" + prompt + "\", \"max_tokens\": 4}";
            case HUGE_BODY, HUGE_CHUNKED_BODY -> {
                final String head = "{\"max_tokens\": 1, \"prompt\": \"";
                yield head + "x".repeat(Math.max(0, maxBodyBytes + 1 - head.length() - 2)) + "\"}";
            }
        };
    }
}
