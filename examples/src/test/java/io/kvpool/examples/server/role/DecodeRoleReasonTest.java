package io.kvpool.examples.server.role;

import io.kvpool.Admission;
import io.kvpool.transfer.FailureReason;
import org.junit.jupiter.api.Test;

import static org.junit.jupiter.api.Assertions.assertEquals;

/** How decode names a refused transfer: a prompt over one descriptor is a 413 (EXCEEDS_TRANSFER), not a retry. */
class DecodeRoleReasonTest {

    @Test
    void aPromptOverOneDescriptorIsExceedsTransferNotARetry() {
        assertEquals(Rejection.Reason.EXCEEDS_TRANSFER, DecodeRole.reason(FailureReason.REJECTED, null, 65_537));
        assertEquals(Rejection.Reason.RETRY_LATER, DecodeRole.reason(FailureReason.REJECTED, null, 65_536), "transfer slots busy");
        assertEquals(Rejection.Reason.RETRY_LATER, DecodeRole.reason(FailureReason.REJECTED, Admission.Decision.RETRY_LATER, 8));
        assertEquals(Rejection.Reason.EXCEEDS_POOL, DecodeRole.reason(FailureReason.REJECTED, Admission.Decision.REJECTED_EXCEEDS_POOL, 8));
        assertEquals(Rejection.Reason.CONTEXT_TOO_LONG, DecodeRole.reason(FailureReason.REJECTED, Admission.Decision.REJECTED_CONTEXT_TOO_LONG, 8));
        assertEquals(Rejection.Reason.UNAVAILABLE, DecodeRole.reason(FailureReason.PEER_LOST, null, 8));
    }
}
