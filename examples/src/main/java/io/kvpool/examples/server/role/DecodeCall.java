package io.kvpool.examples.server.role;

import io.kvpool.examples.server.echo.EchoDecoder;

import java.io.IOException;
import java.time.Duration;

/**
 * One request on the decode side: admission, the KV transfer, then generation. Used by one router thread.
 */
public interface DecodeCall {

    /**
     * Waits for the decode pool's admission.
     *
     * @return {@link Admitted#YES}, a refusal, or {@code null} if undecided after {@code timeout}
     */
    Admitted awaitAdmission(Duration timeout) throws InterruptedException;

    /**
     * Waits for the transfer to end.
     *
     * @return the outcome, or {@code null} if still receiving after {@code timeout}
     */
    TransferOutcome awaitTransfer(Duration timeout) throws InterruptedException;

    /**
     * After a commit: reconstructs the prompt from the received KV and generates {@code maxTokens} tokens
     * into the sequence, handing each to {@code sink}. Releases the sequence when done or failed.
     *
     * @throws IOException           what the sink threw (the client is gone)
     * @throws IllegalStateException if the transfer did not commit; a {@link java.util.concurrent.CancellationException}
     *                               (one) if the call was aborted first
     */
    Generation generate(int maxTokens, EchoDecoder.TokenSink sink) throws IOException, InterruptedException;

    /** @return what {@link #generate} throws for a call whose abort came first */
    static java.util.concurrent.CancellationException abortedBeforeDecode(long requestId) {
        return new java.util.concurrent.CancellationException("request " + requestId + " was aborted before its decode began");
    }

    /**
     * Aborts the request (half of a paired abort): a transfer still receiving fails and its pages drain;
     * a committed sequence not yet generating is released; a running generation stops at its next token.
     * Idempotent.
     */
    void abort(String why);

    /**
     * The decode pool's admission decision.
     *
     * @param admitted  whether the transfer started
     * @param rejection the refusal otherwise
     */
    record Admitted(boolean admitted, Rejection rejection) {
        /** The request was admitted and its transfer started. */
        public static final Admitted YES = new Admitted(true, null);
    }

    /**
     * How the transfer ended.
     *
     * @param committed whether decode holds the verified KV
     * @param failure   otherwise the transfer's failure reason ({@link io.kvpool.transfer.FailureReason} name)
     * @param message   the failure's explanation with the numbers
     * @param retryLater whether the same request sent again can succeed where this transfer failed
     *                   ({@link io.kvpool.transfer.IncomingTransfer#retryLater()}): a write of prefill's failed
     */
    record TransferOutcome(boolean committed, String failure, String message, boolean retryLater) {
        public static final TransferOutcome COMMITTED = new TransferOutcome(true, null, null);

        /** A failure that says nothing of a retry ({@code retryLater} false). */
        public TransferOutcome(boolean committed, String failure, String message) {
            this(committed, failure, message, false);
        }
    }

    /**
     * What decode produced.
     *
     * @param text             the generated text
     * @param completionTokens tokens generated
     * @param kv               the prompt as decode read it from the KV
     */
    record Generation(String text, int completionTokens, EchoDecoder.Reconstruction kv) {
    }

    /**
     * Waits for one of a call's futures, for the implementations.
     *
     * @param what names the call in the exception
     * @return its value, or {@code null} if the timeout elapsed first
     * @throws RoleUnavailableException if the future failed because the role could not take the call (closed under it)
     * @throws IllegalStateException     if it failed for another reason, a fault of the role (its cause attached)
     */
    static <T> T await(java.util.concurrent.CompletableFuture<T> f, Duration timeout, String what) throws InterruptedException {
        try {
            return f.get(timeout.toNanos(), java.util.concurrent.TimeUnit.NANOSECONDS);
        } catch (java.util.concurrent.TimeoutException e) {
            return null;
        } catch (java.util.concurrent.ExecutionException e) {
            final Throwable cause = e.getCause();
            // the kind survives the thread hop: callers answer an unavailable role 503 and a faulty one 502
            final IllegalStateException failed = cause instanceof RoleUnavailableException
                ? new RoleUnavailableException(what + " failed: " + cause.getMessage())
                : new IllegalStateException(what + " failed: " + cause);
            failed.initCause(cause);
            throw failed;
        }
    }
}
