package io.kvpool.examples.server.api;

import io.kvpool.examples.server.role.DecodeCall;
import io.kvpool.examples.server.role.Rejection;
import org.junit.jupiter.api.Test;

import java.util.Map;

import static org.junit.jupiter.api.Assertions.assertEquals;

/** Every refusal and transfer failure maps to one status, with its numbers in the body. */
class ApiErrorTest {

    @Test
    void refusalsMapToTheirStatus() {
        final Map<String, Long> n = Map.of("pages_needed", 9L);
        check(ApiError.of(new Rejection("decode", Rejection.Reason.CONTEXT_TOO_LONG, "m", n)), 400, "context_too_long", 0);
        check(ApiError.of(new Rejection("decode", Rejection.Reason.EXCEEDS_POOL, "m", n)), 413, "exceeds_pool", 0);
        check(ApiError.of(new Rejection("decode", Rejection.Reason.RETRY_LATER, "m", n)), 429, "retry_later", 1);
        check(ApiError.of(new Rejection("decode", Rejection.Reason.UNAVAILABLE, "m", n)), 503, "decode_unavailable", 1);
        check(ApiError.of(new Rejection("prefill", Rejection.Reason.UNAVAILABLE, "m", n)), 503, "prefill_unavailable", 1);
        final ApiError e = ApiError.of(new Rejection("prefill", Rejection.Reason.EXCEEDS_POOL, "needs 9 pages", n));
        @SuppressWarnings("unchecked") final Map<String, Object> body = (Map<String, Object>) e.body().get("error");
        assertEquals("prefill", body.get("role"));
        assertEquals(9L, body.get("pages_needed"));
        assertEquals("needs 9 pages", body.get("message"));
    }

    @Test
    void transferFailuresMapToTheirStatus() {
        check(ApiError.transferFailed(1, new DecodeCall.TransferOutcome(false, "PEER_LOST", "m")), 503, "peer_lost", 1);
        check(ApiError.transferFailed(1, new DecodeCall.TransferOutcome(false, "TIMEOUT", "m")), 504, "timeout", 0);
        // the decode process was lost before the KV committed (its stream broke or fell silent): nothing was generated,
        // and a retry reaches a restarted process, as one after a lost link does
        check(ApiError.transferFailed(1, new DecodeCall.TransferOutcome(false, "ROLE_LOST", "m")), 503, "role_lost", 1);
        // prefill's write or flush failed: the same request sent again succeeds (a retired link's successor serves it)
        check(ApiError.transferFailed(1, new DecodeCall.TransferOutcome(false, "SENDER_ABORTED", "m", true)), 503, "sender_aborted", 1);
        // a sender abort for another cause (a checksum it could not compute, a source page gone): the same again
        for (String r : new String[] {"LENGTH_MISMATCH", "CHECKSUM_MISMATCH", "CANARY", "BAD_COMPLETION", "ABORTED", "SENDER_ABORTED"}) {
            check(ApiError.transferFailed(1, new DecodeCall.TransferOutcome(false, r, "m")), 502, r.toLowerCase(), 0);
        }
    }

    private static void check(ApiError e, int status, String reason, int retryAfter) {
        assertEquals(status, e.status(), e::getMessage);
        assertEquals(reason, e.reason());
        assertEquals(retryAfter, e.retryAfterSeconds());
    }
}
