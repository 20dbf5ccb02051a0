package io.kvpool.examples.server.router;

import io.kvpool.examples.http.InternalErrors;
import io.kvpool.examples.server.api.ApiError;
import io.kvpool.examples.server.config.ServerConfig;
import io.kvpool.examples.server.echo.EchoTokenizer;
import io.kvpool.examples.server.role.DecodeCall;
import io.kvpool.examples.server.role.DecodeService;
import io.kvpool.examples.server.role.DuplicateRequestException;
import io.kvpool.examples.server.role.PrefillService;
import io.kvpool.examples.server.role.Rejection;
import io.kvpool.examples.server.role.RoleLostException;
import io.kvpool.examples.server.role.RoleRefusedException;
import io.kvpool.examples.server.role.RoleUnavailableException;

import java.io.IOException;
import java.time.Duration;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Objects;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.atomic.AtomicLong;

/**
 * The router: one completion from tenant and prompt to generated text, knowing nothing of HTTP. It
 * tokenizes, checks the advertised context, has decode admit the request (a reservation: prefill computes nothing
 * for a decode with no room), asks prefill to admit and compute, asks decode to receive into what it reserved,
 * waits for the transfer, and has decode generate. Every refusal is typed ({@link ApiError});
 * and whenever a request ends without success — client gone, refusal, failed transfer, timeout — it
 * aborts <b>both</b> roles for that request (paired aborts), so neither side keeps pages for it.
 *
 * <pre>
 *   tokenize ─ context check (400) ─ decode.reserve (typed refusal) ─ prefill.prefill (typed refusal) ─ decode.start
 *     ─ admission (typed refusal: a decode that does not reserve admits here)
 *     ─ sink.admitted() ─ wait for the transfer (sink.heartbeat() while waiting) ─ sink.committed() ─ generate (sink.token())
 *   any IOException from the sink, or the sink's client gone = the client is gone → decode.abort + prefill.abort → {@link ClientGone}
 * </pre>
 * A client's close is seen as it happens ({@link Sink#onClientGone}). While prefill computes, decode's reservation
 * is given back at once, and the request ends when prefill answers: the answer names the engine that holds the offer,
 * which decode's give-back then tells (behind a balancer the router's own abort may reach another process). Once
 * decode's call exists, it is aborted at once, which ends whichever wait the request is in. Either way the router
 * then finds {@link Sink#clientGone} and ends the request as the client's abort.
 * Thread-safe: one call per request thread.
 */
public final class Router implements AutoCloseable {

    private static final System.Logger LOG = System.getLogger(Router.class.getName());

    /** What the HTTP side does at each step; any {@link IOException} means the client is gone. */
    interface Sink {
        /** Both roles admitted request {@code requestId}: a streaming response sends its headers now. */
        void admitted(long requestId) throws IOException;

        /** Called every heartbeat while the transfer runs; a streaming response writes a keep-alive. */
        void heartbeat() throws IOException;

        /**
         * The KV transfer committed: from here on the answer is a success unless generation itself fails (the
         * server closing, a decode process lost). Nothing is written by default: a non-streaming response is
         * written whole once its outcome is known, and notices a client that left through {@link #clientGone}.
         */
        default void committed(long requestId) throws IOException {
        }

        /** One generated token. */
        void token(String text) throws IOException;

        /** @return whether the client is known to be gone (seen without writing); any thread */
        default boolean clientGone() {
            return false;
        }

        /** Runs {@code action} once, on a thread of its own, when the client goes away (at once if it is gone). */
        default void onClientGone(Runnable action) {
        }
    }

    /** The client went away; both roles were told to abort the request. */
    static final class ClientGone extends Exception {
        private static final long serialVersionUID = 1L;

        ClientGone(long requestId, IOException cause) {
            super("client of request " + requestId + " is gone: " + cause.getMessage(), cause);
        }
    }

    /**
     * A request as the HTTP side parsed it.
     *
     * @param prompt    the prompt text
     * @param maxTokens tokens to generate, ≥ 0
     * @param stream    whether the response streams
     */
    record Request(String prompt, long maxTokens, boolean stream) {
    }

    /**
     * A finished completion.
     *
     * @param requestId    the router's id for it
     * @param tenant       whose request it was
     * @param promptTokens tokens of the prompt
     * @param generation   what decode produced
     */
    record Completion(long requestId, String tenant, int promptTokens, DecodeCall.Generation generation) {
    }

    private final ServerConfig config;
    private final PrefillService prefill;
    private final DecodeService decode;
    private final RouterCounters counters = new RouterCounters();
    private final AtomicLong ids;
    private final ConcurrentHashMap<Long, DecodeCall> inFlight = new ConcurrentHashMap<>();
    /** Requests between decode's reservation and their decode call (with prefill): close gives theirs back at once. */
    private final java.util.Set<Long> reservedOnly = ConcurrentHashMap.newKeySet();
    /** Requests whose paired abort went out, by close() or by the request's own end: each goes once. */
    private final java.util.Set<Long> pairedAbortSent = ConcurrentHashMap.newKeySet();
    /**
     * Threads inside a call to a role (reserve, prefill, start), which a stuck role process holds up to its call
     * timeout: close() interrupts them, so that the request ends now as 503 {@code server_closing}. Guarded by itself.
     */
    private final java.util.Set<Thread> inRoleCall = new java.util.HashSet<>();

    /** A call to a role that close() may interrupt. */
    @FunctionalInterface
    private interface RoleCall<T> {
        T call() throws InterruptedException;
    }

    /**
     * Runs a call to a role so that {@link #close} can interrupt it. A call that close() interrupted throws as the role
     * does (RoleLostException from a remote role, InterruptedException from one in this JVM); the caller maps that to
     * {@code server_closing} because {@link #closed} is set. No interrupt from close() survives the call.
     */
    private <T> T roleCall(RoleCall<T> c) throws InterruptedException {
        final Thread me = Thread.currentThread();
        synchronized (inRoleCall) {
            if (closed) { // close() swept the calls already: this one would run in full, to a role being closed
                throw new InterruptedException("the router is closed");
            }
            inRoleCall.add(me);
        }
        try {
            return c.call();
        } finally {
            synchronized (inRoleCall) {
                inRoleCall.remove(me);
            }
            if (closed) {
                Thread.interrupted(); // close() may have interrupted the call as it returned: the request's clean-up must not see it
            }
        }
    }
    private volatile boolean closed;
    private volatile boolean draining;

    public Router(ServerConfig config, PrefillService prefill, DecodeService decode) {
        this.config = Objects.requireNonNull(config, "config");
        this.prefill = Objects.requireNonNull(prefill, "prefill");
        this.decode = Objects.requireNonNull(decode, "decode");
        this.ids = new AtomicLong(firstId(ID_EPOCHS));
    }

    /** Where each router draws its id epoch: a process-wide CSPRNG (router processes started together get different epochs). */
    private static final java.util.random.RandomGenerator ID_EPOCHS = new java.security.SecureRandom();

    /** Bits of a request id below the epoch: a router issues up to 2^32 ids before it runs into the next epoch. */
    static final int ID_COUNTER_BITS = 32;
    /** Largest request id: ids stay exact as JSON numbers everywhere (JavaScript included); the wire format's i64 holds them. */
    static final long MAX_ID = (1L << 53) - 1;

    /**
     * Request ids are unique per router <b>instance</b>, not only per process: the role processes key offers,
     * descriptors and decode calls by request id, and two routers in front of the same roles (or a router
     * restarted while its last requests still linger there) must not meet. Each router starts at a random
     * epoch in bits 32..52 (1 .. 2^21−1; never 0) and counts up from there:
     * <pre>
     *   bit 63..53  52 ............ 32  31 ............ 0
     *       0       epoch (random, ≠ 0)   counter (from 1)
     * </pre>
     * Positive, at most {@link #MAX_ID}. Two routers share an epoch with odds 1 in 2^21 − 1; even then a
     * clash is refused by the roles ({@link DuplicateRequestException}, a 503 here), never answered with
     * another request's KV: each request's decode calls name the prefill engine that computed it
     * ({@link PrefillService#instance()}), and decode starts the transfer on the link to that engine only.
     *
     * @return the id before a router's first
     */
    static long firstId(java.util.random.RandomGenerator random) {
        final long epoch = 1 + random.nextLong(MAX_ID >>> ID_COUNTER_BITS); // 1 .. 2^21 − 1
        return epoch << ID_COUNTER_BITS;
    }

    public RouterCounters counters() {
        return counters;
    }

    /**
     * Runs one completion. Every request ends in exactly one counted outcome: completed, aborted, rejected, failed or
     * timed out. An interrupt of the calling thread (the HTTP front interrupts its handlers as it stops) ends the
     * request as the server's closing does, 503, and the thread's interrupt status is kept. An unexpected exception (a
     * bug) is logged with its stack trace and answered 500 {@code internal_error} by an error id, never by its text.
     *
     * @throws ApiError   a typed refusal or failure (nothing of the request is left in either pool, or
     *                    what is left drains on its own)
     * @throws ClientGone the sink failed: the client is gone, both roles were told to abort
     */
    Completion complete(String tenant, Request req, Sink sink) throws ApiError, ClientGone {
        counters.requests.increment();
        final long[] id = {0}; // the request's id once drawn: 0 before
        try {
            return run(tenant, req, sink, id);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt(); // after the paired abort: whoever interrupted the thread still sees it
            throw id[0] == 0 ? unavailable("router", "server_closing", "the server is shutting down") : serverClosing(id[0]);
        } catch (RuntimeException e) {
            throw internalError(id[0], e);
        }
    }

    /**
     * {@link #complete}, less the answer to an interrupt or an unexpected exception.
     *
     * @param drawn where the request's id goes once drawn
     */
    private Completion run(String tenant, Request req, Sink sink, long[] drawn) throws ApiError, ClientGone, InterruptedException {
        refuseIfSurelyTooLong(req);
        final List<byte[]> tokens = EchoTokenizer.encode(req.prompt());
        if (tokens.isEmpty()) {
            counters.rejected("router", "empty_prompt"); // counted in requests above: every request has one outcome
            throw ApiError.badRequest("empty_prompt", "prompt must contain at least one character");
        }
        // saturates: a max_tokens near Long.MAX_VALUE must not wrap to a request that fits
        final long requested = req.maxTokens() > Long.MAX_VALUE - tokens.size() ? Long.MAX_VALUE : tokens.size() + req.maxTokens();
        if (requested > config.contextTokens()) {
            final Map<String, Long> n = new LinkedHashMap<>();
            n.put("prompt_tokens", (long) tokens.size());
            n.put("max_tokens", req.maxTokens());
            n.put("requested_tokens", requested);
            n.put("max_context_tokens", config.contextTokens());
            throw reject(new Rejection("router", Rejection.Reason.CONTEXT_TOO_LONG, "request of "
                + (requested == Long.MAX_VALUE ? "more than " + Long.MAX_VALUE : Long.toString(requested))
                + " tokens (" + tokens.size() + " prompt + " + req.maxTokens() + " max_tokens) exceeds the max context of "
                + config.contextTokens() + " tokens", n));
        }
        final int maxTokens = Math.toIntExact(req.maxTokens()); // within the context, checked above
        if (closed) {
            throw unavailable("router", "server_closing", "the server is shutting down");
        }
        if (draining) {
            counters.rejected("router", "draining");
            throw new ApiError(503, "service_unavailable", "server_draining", "the server is stopping: it finishes the requests "
                + "in flight and takes no new ones", Map.of(), 1);
        }
        refuseIfKnownDown();
        enterInFlight();
        final long id = ids.incrementAndGet();
        drawn[0] = id;
        DecodeCall call = null;
        boolean done = false;
        final java.util.concurrent.atomic.AtomicBoolean completed = new java.util.concurrent.atomic.AtomicBoolean();
        boolean askedDecode = false, askedPrefill = false;
        long offeredBy = 0; // the prefill engine that holds the request's offer, once its answer named it
        // armed while decode's reservation waits for prefill: a client that leaves then gets it back at once (the hook
        // below); disarmed by whichever comes first, that hook or this thread on its way to decode's call or out
        final java.util.concurrent.atomic.AtomicBoolean reservationWaits = new java.util.concurrent.atomic.AtomicBoolean();
        try {
            // the engine the probe read names the one decode must be linked to before prefill computes (the reservation);
            // the decode call names the engine prefill's answer names, which took the offer (behind a balancer, another)
            final long prefillInstance = prefill.instance();
            final Rejection noRoom;
            try {
                askedDecode = true; // from here a reservation may exist (even if the call fails): the end gives it back
                noRoom = roleCall(() -> decode.reserve(id, tenant, tokens.size(), maxTokens, prefillInstance));
            } catch (DuplicateRequestException e) {
                done = true; // decode reserved nothing under our id: the request decoding there under it is not ours
                throw unavailable("decode", "duplicate_request_id", e.getMessage());
            } catch (RoleRefusedException e) {
                throw refusedByRole(e);
            } catch (IllegalStateException e) { // the role was lost during the call, or closed with this router
                throw failedAtRole(id, "decode", e, this::decodeUnavailable);
            } catch (InterruptedException e) {
                throw interruptedAtRole(id, e);
            }
            if (noRoom != null) {
                done = true; // decode holds nothing for the request, and prefill was never asked
                throw reject(noRoom);
            }
            reservedOnly.add(id);
            if (closed) { // close() ran during the reservation: its sweep of reservedOnly missed us
                throw serverClosing(id);
            }
            reservationWaits.set(true);
            sink.onClientGone(() -> {
                // Prefill's call is not cut: its answer names the engine that holds the offer, which behind a balancer
                // only decode's give-back (in the finally below) reaches. Decode's pages need not wait for it.
                if (reservationWaits.compareAndSet(true, false)) {
                    decode.unreserve(id, "the client of request " + id + " closed its connection while prefill computed");
                }
            });
            final PrefillService.Answer answered;
            throwIfGone(sink); // prefill computes nothing for a client gone already
            try {
                askedPrefill = true;
                answered = roleCall(() -> prefill.computeAndOffer(id, tenant, tokens));
            } catch (DuplicateRequestException e) {
                done = true; // nothing was offered under our id: the request in flight there under it is not ours to abort
                decode.unreserve(id, "prefill refused request " + id + ": " + e.getMessage());
                throw unavailable("prefill", "duplicate_request_id", e.getMessage());
            } catch (RoleRefusedException e) {
                throw refusedByRole(e);
            } catch (IllegalStateException e) { // the role was lost during the call: what refuseIfKnownDown says once known
                throw failedAtRole(id, "prefill", e, this::prefillUnavailable);
            } catch (InterruptedException e) {
                throw interruptedAtRole(id, e);
            }
            final Rejection refused = answered.refusal();
            if (refused != null) {
                done = true; // nothing was offered
                decode.unreserve(id, "prefill refused request " + id + ": " + refused.message());
                // close() aborted it at prefill while the call was on its way: the server's shutdown, not prefill's
                throw closed ? serverClosing(id) : reject(refused);
            }
            offeredBy = answered.instance() != 0 ? answered.instance() : prefillInstance;
            throwIfGone(sink);
            if (!reservationWaits.compareAndSet(true, false)) { // its client left, and the reservation went back
                throw new IOException("the client closed the connection while prefill computed");
            }
            try {
                final long engine = offeredBy;
                call = roleCall(() -> decode.start(id, tenant, tokens.size(), maxTokens, engine));
            } catch (DuplicateRequestException e) { // decode is up: it names a call of that id already running there
                throw unavailable("decode", "duplicate_request_id", e.getMessage());
            } catch (RoleRefusedException e) {
                throw refusedByRole(e);
            } catch (IllegalStateException e) { // as for prefill
                throw failedAtRole(id, "decode", e, this::decodeUnavailable);
            } catch (InterruptedException e) {
                throw interruptedAtRole(id, e);
            }
            inFlight.put(id, call);
            reservedOnly.remove(id);
            final DecodeCall started = call;
            sink.onClientGone(() -> { // the hook stays registered: a client that leaves after its answer aborts nothing
                if (!completed.get()) {
                    started.abort("the client of request " + id + " closed its connection");
                }
            });
            if (closed) { // close() ran while this request was still with prefill: its sweep of inFlight missed us
                throw serverClosing(id);
            }
            final long deadline = System.nanoTime() + config.requestTimeout().toNanos();
            DecodeCall.Admitted admitted;
            while ((admitted = awaitAdmission(call, id, deadline)) == null) {
                throwIfGone(sink);
                if (System.nanoTime() - deadline >= 0) {
                    throw timeout(id, "decode admission");
                }
            }
            throwIfGone(sink);
            if (!admitted.admitted()) {
                if (closed) { // refused because close() aborted it: the server's shutdown, not decode's pool
                    throw serverClosing(id);
                }
                throw reject(admitted.rejection());
            }
            sink.admitted(id);
            DecodeCall.TransferOutcome outcome;
            while ((outcome = awaitTransfer(call, id, deadline)) == null) {
                throwIfGone(sink);
                if (System.nanoTime() - deadline >= 0) {
                    throw timeout(id, "KV transfer");
                }
                sink.heartbeat();
            }
            throwIfGone(sink);
            if (!outcome.committed()) {
                if (closed) { // the transfer was aborted by the server's own close, not by a fault
                    throw serverClosing(id);
                }
                counters.failed(outcome.failure() == null ? "unknown" : outcome.failure().toLowerCase(java.util.Locale.ROOT));
                throw ApiError.transferFailed(id, outcome);
            }
            sink.committed(id);
            final DecodeCall.Generation g;
            try {
                g = generateApart(call, maxTokens, sink);
            } catch (RoleLostException e) {
                counters.failed("role_lost");
                throw new ApiError(502, "server_error", "role_lost", "request " + id + ": " + e.getMessage(),
                    Map.of("request_id", id), 0);
            } catch (java.util.concurrent.CancellationException aborted) {
                // an abort between the commit and generate's start released the KV first: the client's or close()'s
                throwIfGone(sink);
                if (closed) {
                    throw serverClosing(id);
                }
                // or decode's own (its close): nothing was generated, and a retry may find decode back
                LOG.log(System.Logger.Level.WARNING, "request " + id + ": decode dropped its KV before generation began: "
                    + aborted.getMessage());
                counters.failed("role_lost");
                throw new ApiError(503, "service_unavailable", "role_lost", "request " + id + ": the decode role dropped its KV "
                    + "before generation began (closed under it); a retry may find decode back", Map.of("request_id", id), 1);
            } catch (IllegalStateException e) { // a fault of decode's own, or decode closed under the call
                throw failedAtRole(id, "decode", e, why -> {
                    counters.failed("role_lost");
                    return new ApiError(502, "server_error", "role_lost", "request " + id + ": " + why, Map.of("request_id", id), 0);
                });
            }
            done = true;
            completed.set(true);
            counters.completed.increment();
            return new Completion(id, tenant, tokens.size(), g);
        } catch (IOException gone) {
            if (closed) { // the server's own abort (close() cut the request short), not the client's
                throw serverClosing(id);
            }
            counters.aborted.increment();
            throw new ClientGone(id, gone);
        } finally {
            reservationWaits.set(false); // a client that leaves from now on finds the request over, or decode's call to abort
            try {
                if (!done) {
                    // paired abort: whatever ended this request, neither role keeps anything for it
                    final String why = "request " + id + " ended without a completion";
                    final DecodeCall started = call;
                    if (started != null) {
                        // always (idempotent): a call started while close() swept may be known to no one else
                        abortHalf(id, "decode's abort", () -> started.abort(why));
                    }
                    final boolean first = pairedAbortSent.add(id); // close() may have sent these already
                    if (call == null && askedDecode && (first || offeredBy != 0)) {
                        // and decode tells the engine holding the offer, which the abort below may not reach: also after
                        // close()'s give-back, which could not name it
                        final long engine = offeredBy;
                        abortHalf(id, "decode's give-back", () -> decode.unreserve(id, why, engine));
                    }
                    if (first && askedPrefill) {
                        abortHalf(id, "prefill's abort", () -> abortAtPrefill(id, why));
                    }
                }
            } finally { // whatever an abort threw: the request leaves the count, or the cap would shrink for good
                if (call != null) {
                    inFlight.remove(id);
                }
                reservedOnly.remove(id);
                // last; a close() whose sweep read the id before this may still add it back, once (the router is closing)
                pairedAbortSent.remove(id);
                counters.inFlight.decrementAndGet();
            }
        }
    }

    /**
     * {@link DecodeCall#awaitAdmission} for one slice of the request's time. A call that failed is answered as
     * {@link #failedAtRole} says, and counted, not a 500: a decode that cannot take it now (closed under it, lost) is a
     * 503 to retry, a fault of decode a 502.
     */
    private DecodeCall.Admitted awaitAdmission(DecodeCall call, long id, long deadline) throws InterruptedException, ApiError {
        try {
            return call.awaitAdmission(slice(deadline));
        } catch (IllegalStateException e) {
            throw failedAtRole(id, "decode", e, this::decodeUnavailable);
        }
    }

    /**
     * {@link DecodeCall#awaitTransfer} for one slice; a call that failed because decode could not go on (closed under
     * it, lost) is a failed transfer, 503 {@code role_lost}; a fault of decode is {@link #failedAtRole}'s 502. Counted.
     */
    private DecodeCall.TransferOutcome awaitTransfer(DecodeCall call, long id, long deadline) throws InterruptedException, ApiError {
        try {
            return call.awaitTransfer(slice(deadline));
        } catch (IllegalStateException e) {
            throw failedAtRole(id, "decode", e, why -> {
                counters.failed("role_lost");
                return ApiError.transferFailed(id, new DecodeCall.TransferOutcome(false, "ROLE_LOST", why));
            });
        }
    }

    /** Longest a request waits for the re-checks of roles known down, both together (the goal for a fast 503). */
    static final java.time.Duration KNOWN_DOWN_WAIT = java.time.Duration.ofMillis(100);

    /**
     * Answers at once (503, Retry-After) for a role known down, before anything is asked of either: prefill
     * unreachable, or decode unable to take the KV — no prefill computes for a decode that cannot take it.
     * Costs no call to a healthy role; the roles known down are re-checked for at most {@link #KNOWN_DOWN_WAIT} together.
     */
    private void refuseIfKnownDown() throws ApiError, InterruptedException {
        // one deadline for both re-checks: a prefill that comes back ready late must not give decode's a second wait
        final long until = System.nanoTime() + KNOWN_DOWN_WAIT.toNanos();
        final String prefillDown = prefill.unavailable(until);
        if (prefillDown != null) {
            throw prefillUnavailable(prefillDown);
        }
        final String decodeDown = decode.unavailable(until);
        if (decodeDown != null) {
            throw decodeUnavailable(decodeDown);
        }
    }

    /**
     * Sends half of a paired abort. A failure is logged, not thrown: the other half still goes, and the request keeps
     * the answer and the outcome it ended with.
     */
    private static void abortHalf(long id, String what, Runnable half) {
        try {
            half.run();
        } catch (RuntimeException e) {
            InternalErrors.log(LOG, what + " of request " + id, e);
        }
    }

    /**
     * 500 {@code internal_error} for an unexpected exception (a bug), counted as a failure for that reason: logged with
     * its stack trace under a fresh error id, answered with that id and the request's ({@code id}, 0 if none was drawn),
     * never with the exception's text, which may name other requests, tenants or peers.
     */
    private ApiError internalError(long id, RuntimeException e) {
        counters.failed("internal_error");
        final String request = id == 0 ? "a completion request" : "request " + id;
        final String errorId = InternalErrors.log(LOG, request, e);
        final Map<String, Object> f = new LinkedHashMap<>();
        f.put("error_id", errorId);
        if (id != 0) {
            f.put("request_id", id);
        }
        return new ApiError(500, "server_error", "internal_error", request + " failed: " + InternalErrors.message(errorId), f, 0);
    }

    /** An interrupt during a call to a role: close()'s (the server's shutdown), or the caller's own, passed on. */
    private ApiError interruptedAtRole(long id, InterruptedException e) throws InterruptedException {
        if (closed) {
            return serverClosing(id);
        }
        throw e;
    }

    private ApiError serverClosing(long id) {
        counters.failed("server_closing");
        return new ApiError(503, "service_unavailable", "server_closing", "request " + id + " was cut short: the server is shutting down",
            Map.of("request_id", id), 1);
    }

    /**
     * Generates on a thread of its own while this one writes the tokens to the client, so that a client that
     * stops reading holds no decode pages: its write waits (up to the front's stall timeout) but generation
     * runs to its end and frees the sequence; the tokens wait here. A client that is gone (a write failed), or
     * this thread interrupted, stops generation at its next token.
     */
    private static DecodeCall.Generation generateApart(DecodeCall call, int maxTokens, Sink sink) throws IOException, InterruptedException {
        final java.util.concurrent.LinkedBlockingQueue<Object> tokens = new java.util.concurrent.LinkedBlockingQueue<>();
        final Object end = new Object();
        final java.util.concurrent.atomic.AtomicReference<IOException> gone = new java.util.concurrent.atomic.AtomicReference<>();
        final java.util.concurrent.CompletableFuture<DecodeCall.Generation> result = new java.util.concurrent.CompletableFuture<>();
        Thread.ofVirtual().name("kvpool-generate").start(() -> {
            try {
                result.complete(call.generate(maxTokens, t -> {
                    final IOException g = gone.get();
                    if (g != null) {
                        throw g;
                    }
                    tokens.add(t);
                }));
            } catch (Throwable e) {
                result.completeExceptionally(e);
            } finally {
                tokens.add(end);
            }
        });
        try {
            for (Object t; (t = tokens.take()) != end; ) {
                sink.token((String) t);
            }
        } catch (IOException e) {
            gone.set(e);
            throw e;
        } catch (InterruptedException e) {
            gone.set(new IOException("the request's thread was interrupted", e));
            throw e;
        }
        try {
            return result.join();
        } catch (java.util.concurrent.CompletionException e) {
            throwIfGone(sink); // generation stopped because the client's close aborted the call
            switch (e.getCause()) {
                case IOException io -> throw io;
                case InterruptedException ie -> throw ie;
                case RuntimeException re -> throw re;
                case Error err -> throw err;
                default -> throw new IllegalStateException(e.getCause());
            }
        }
    }

    /** @throws IOException if the sink's client is gone */
    private static void throwIfGone(Sink sink) throws IOException {
        if (sink.clientGone()) {
            throw new IOException("the client closed the connection");
        }
    }

    private Duration slice(long deadline) {
        final long left = deadline - System.nanoTime();
        return Duration.ofNanos(Math.max(1, Math.min(left, config.heartbeat().toNanos())));
    }

    private ApiError reject(Rejection r) {
        counters.rejected(r.role(), r.reason().name().toLowerCase(java.util.Locale.ROOT));
        return ApiError.of(r);
    }

    private ApiError timeout(long id, String what) {
        counters.timedOut.increment();
        return new ApiError(504, "timeout", "request_timeout", what + " of request " + id + " did not finish within "
            + config.requestTimeout().toMillis() + " ms", Map.of("request_id", id, "request_timeout_ms", config.requestTimeout().toMillis()), 0);
    }

    /** A role refused the call (4xx: 502 {@code role_refused}) or failed it (5xx but 503: 502 {@code role_error}); no retry. */
    private ApiError refusedByRole(RoleRefusedException e) {
        final String reason = e.status() / 100 == 4 ? "role_refused" : "role_error";
        counters.failed(reason);
        return new ApiError(502, "server_error", reason, e.getMessage(), Map.of("role_status", e.status()), 0);
    }

    /** 503 {@code prefill_unavailable}: the prefill role is down, known before the call or found during it. */
    private ApiError prefillUnavailable(String why) {
        counters.rejected("prefill", "unavailable");
        return new ApiError(503, "service_unavailable", "prefill_unavailable", why, Map.of("role", "prefill"), 1);
    }

    /** 503 {@code decode_unavailable}: the decode role is down or cannot take a transfer, known before the call or found during it. */
    private ApiError decodeUnavailable(String why) {
        return reject(new Rejection("decode", Rejection.Reason.UNAVAILABLE, why, Map.of()));
    }

    /** @return why a call to {@code role} failed: a lost role's message names it already */
    private static String lost(String role, IllegalStateException e) {
        return e instanceof RoleLostException ? e.getMessage() : role + " role: " + e.getMessage();
    }

    /**
     * What a role's call that threw {@code e} answers: the server's close (503 {@code server_closing}); a role lost
     * or unable to take calls now ({@code unavailable}: 503, Retry-After); any other failure is a fault of the role
     * itself (its storage, a bug, a malformed answer), 502 {@code role_error} without Retry-After, as a role process's
     * 500 is: the same call would fail the same way.
     */
    private ApiError failedAtRole(long id, String role, IllegalStateException e, java.util.function.Function<String, ApiError> unavailable) {
        if (closed) {
            return serverClosing(id);
        }
        if (e instanceof RoleLostException || e instanceof RoleUnavailableException) {
            return unavailable.apply(lost(role, e));
        }
        counters.failed("role_error");
        // logged here, answered by its id: the exception's text may name other requests or tenants
        final String errorId = InternalErrors.log(LOG, role + " role's call for request " + id, e);
        return new ApiError(502, "server_error", "role_error", role + " role failed request " + id + ": "
            + InternalErrors.message(errorId), Map.of("error_id", errorId), 0);
    }

    /**
     * Refuses a prompt that is longer than the context by its length alone, before tokenizing it: a token is at most
     * {@value EchoTokenizer#MAX_TOKEN_BYTES} bytes of UTF-8 and a char at least one, so a prompt of {@code n} chars is
     * at least {@code n / 8} tokens. A body of a few MiB of one-letter words would otherwise become that many token
     * arrays (tens of MiB a request) only to be refused. A prompt that might fit is tokenized and checked exactly.
     */
    private void refuseIfSurelyTooLong(Request req) throws ApiError {
        final long atLeast = (req.prompt().length() + (long) EchoTokenizer.MAX_TOKEN_BYTES - 1) / EchoTokenizer.MAX_TOKEN_BYTES;
        if (atLeast > config.contextTokens()) {
            final Map<String, Long> n = new LinkedHashMap<>();
            n.put("prompt_tokens_at_least", atLeast);
            n.put("max_tokens", req.maxTokens());
            n.put("max_context_tokens", config.contextTokens());
            throw reject(new Rejection("router", Rejection.Reason.CONTEXT_TOO_LONG, "a prompt of " + req.prompt().length()
                + " chars is at least " + atLeast + " tokens, more than the max context of " + config.contextTokens() + " tokens",
                n));
        }
    }

    /**
     * Counts a request in flight, or refuses it (503 {@code roles_busy}, Retry-After) when that many are already in
     * flight as the roles' connections allow ({@link io.kvpool.examples.server.role.DecodeService#maxRequestsInFlight}):
     * one more would find its connection closed on arrival, and the role taken for lost.
     */
    private void enterInFlight() throws ApiError {
        final int cap = Math.min(prefill.maxRequestsInFlight(), decode.maxRequestsInFlight());
        int n;
        do {
            n = counters.inFlight.get();
            if (n >= cap) {
                counters.rejected("router", "roles_busy");
                throw new ApiError(503, "service_unavailable", "roles_busy", "the router has " + n + " requests in flight, "
                    + "as many as the roles' connections allow (" + cap + ": the smaller role's --max-connections less those "
                    + "the router keeps for its probes and aborts); retry later",
                    Map.of("requests_in_flight", (long) n, "max_requests_in_flight", (long) cap), 1);
            }
        } while (!counters.inFlight.compareAndSet(n, n + 1));
    }

    /** 503 {@code unavailable}, counted as a refusal by {@code role} for {@code reason}. */
    private ApiError unavailable(String role, String reason, String why) {
        counters.rejected(role, reason);
        return new ApiError(503, "service_unavailable", "unavailable", why, Map.of(), 1);
    }

    /** Refuses new requests (503 {@code server_draining}, Retry-After) and lets those in flight finish. Idempotent. */
    public void drain() {
        draining = true;
    }

    /** Stops taking requests and aborts those in flight (their threads see the failure). Idempotent. */
    @Override
    public void close() {
        closed = true;
        synchronized (inRoleCall) { // a call to a stuck role process would hold its request up to the call timeout
            inRoleCall.forEach(Thread::interrupt);
        }
        // a request still with prefill gives decode's pages back now, not when prefill answers (the roles may be
        // closed by then, and a give-back then waits for the reservation to expire)
        reservedOnly.forEach(id -> {
            if (pairedAbortSent.add(id)) { // the request's own end sends nothing more
                decode.unreserve(id, "server closing");
                abortAtPrefill(id, "server closing");
            }
        });
        inFlight.forEach((id, call) -> {
            call.abort("server closing"); // idempotent
            if (pairedAbortSent.add(id)) {
                abortAtPrefill(id, "server closing");
            }
        });
    }

    /** Half of a paired abort; a prefill role that is closing aborts everything itself. */
    private void abortAtPrefill(long id, String why) {
        try {
            prefill.abort(id, why);
        } catch (IllegalStateException closedAlready) {
            // nothing left to abort there
        }
    }
}
