package io.kvpool.examples.server.remote;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import io.kvpool.examples.http.HttpCall;
import io.kvpool.examples.http.InternalErrors;
import io.kvpool.examples.server.api.ApiError;
import io.kvpool.examples.server.api.Http;
import io.kvpool.examples.server.config.ServerConfig;
import io.kvpool.examples.server.role.DecodeCall;
import io.kvpool.examples.server.role.DecodeRole;
import io.kvpool.examples.server.role.DuplicateRequestException;
import io.kvpool.examples.server.role.Rejection;
import io.kvpool.examples.server.role.RoleUnavailableException;

import java.io.IOException;
import java.time.Duration;
import java.util.LinkedHashMap;
import java.util.Map;
import java.util.Objects;
import java.util.concurrent.ConcurrentHashMap;

/**
 * The decode role process's internal endpoints (besides {@link RoleEndpoint}'s):
 * {@code POST /internal/reserve} {@code {"request_id":7,"tenant":"alice","prompt_tokens":5,"max_new_tokens":8}}
 * admits the request ahead of prefill ({@link DecodeRole#reserve}) and answers {@code {"admitted":true}} or
 * {@code {"admitted":false,"rejection":{…}}}, or 409 for an id decoding here or reserving in another call;
 * {@code POST /internal/unreserve} {@code {"request_id":7}} gives a reservation back (204 for any id, known or not; it
 * never touches a call under way, which may be another router's request under a reused id).
 * {@code POST /internal/decode} {@code {"request_id":7,"tenant":"alice","prompt_tokens":5,"max_new_tokens":8}}
 * starts the request on the {@link DecodeRole} and answers 200 at once (so the router's abort that may
 * follow finds the call), then streams its events, one JSON object per line, as {@link RemoteDecodeCall}
 * reads them: heartbeats while admission and the transfer are pending, the admission, the transfer's
 * outcome, then — if the KV committed — the generated tokens and the result. An id already decoding here, or
 * whose reserve call is under way, is refused with 409 ({@value DuplicateRequestException#REASON}) <b>before</b> the
 * role starts anything for it.
 *
 * <p>Both calls may name the prefill engine that computes the request, {@code "prefill_instance":"a1b2c3d4e5f60718"}
 * (16 hex digits, its status's {@code instance}): decode then reserves only while a link to that engine is up and starts
 * the transfer on it, and refuses the request ({@code UNAVAILABLE}, which the router answers 503) when none is. Without
 * it, decode takes its newest prefill link while links from one engine are up, and refuses the request while links
 * from several are. A value that is not 16 hex digits, or all zeros, is refused with 400 {@code bad_field}.
 *
 * <p>A router that closes the stream's connection aborts the request here as it happens (the HTTP front sees
 * the close without writing); the router's {@code POST /internal/abort} usually comes too.
 */
public final class DecodeEndpoint extends RoleEndpoint {

    private static final System.Logger LOG = System.getLogger("io.kvpool.examples.server");

    private final DecodeRole role;
    private final Duration heartbeat;
    private final ConcurrentHashMap<Long, Slot> calls = new ConcurrentHashMap<>();
    /**
     * <b>Test hook</b>: runs in a {@code /internal/reserve} call, with its request id, between its duplicate check and
     * its admission; {@code null} outside tests.
     */
    volatile java.util.function.LongConsumer beforeReserve;

    public DecodeEndpoint(DecodeRole role, ObjectMapper json, ServerConfig config) {
        Objects.requireNonNull(role, "role"); // before the method references below, for the message
        super(DecodeRole.ROLE, json, config, new Readouts(role::pool, role::status, role::activeTransfers, role::ready));
        this.role = role;
        this.heartbeat = config.heartbeat();
    }

    @Override
    void abort(long requestId, String why) {
        final Slot s = calls.get(requestId);
        if (s != null) {
            s.abort(why);
        }
    }

    /** @return a field that must be an int (a cast would wrap 2^32 + 5 to 5 and start a transfer for 5 tokens) */
    private static int intField(JsonNode b, String name) throws ApiError {
        final long v = RoleJson.number(b, name);
        if (v < Integer.MIN_VALUE || v > Integer.MAX_VALUE) {
            throw ApiError.badRequest("bad_field", name + " " + v + " is not an int");
        }
        return (int) v;
    }

    @Override
    boolean route(HttpCall ex, String path) throws ApiError, IOException {
        if (path.equals("/internal/unreserve")) {
            Http.method(ex, "POST");
            final JsonNode b = body(ex);
            final long offeredBy;
            try {
                offeredBy = RoleJson.prefillInstance(b);
            } catch (IllegalArgumentException e) {
                throw ApiError.badRequest("bad_field", "prefill_instance: " + e.getMessage());
            }
            role.unreserve(requestId(b), b.path("why").asText("the router gave the reservation back"), offeredBy);
            ex.respond(204, "application/json", new byte[0]);
            return true;
        }
        final boolean reserve = path.equals("/internal/reserve");
        if (!reserve && !path.equals("/internal/decode")) {
            return false;
        }
        Http.method(ex, "POST");
        final JsonNode b = body(ex);
        final long id = requestId(b);
        final String tenant = tenant(b);
        final int prompt = intField(b, "prompt_tokens");
        final int maxNew = intField(b, "max_new_tokens");
        if (prompt < 1) { // checked here, before the 200: the receiver's own check would come as an error event after it
            throw ApiError.badRequest("bad_field", "prompt_tokens must be ≥ 1, was " + prompt);
        }
        if (maxNew < 0) {
            throw ApiError.badRequest("bad_field", "max_new_tokens must be ≥ 0, was " + maxNew);
        }
        final long prefillInstance;
        try {
            prefillInstance = RoleJson.prefillInstance(b);
        } catch (IllegalArgumentException e) {
            throw ApiError.badRequest("bad_field", "prefill_instance: " + e.getMessage());
        }
        if (reserve) {
            // the id is claimed for the admission, as a decode call claims it: a reserve and a decode call of one id never
            // both pass, whichever claims first; the claim goes before the answer, so the router's decode call that
            // follows finds the id free (and the reservation, which the role keeps by id)
            final Slot claim = new Slot();
            if (calls.putIfAbsent(id, claim) != null) { // a reused id: its reservation would be taken by no call of ours
                throw ApiError.of(new DuplicateRequestException("decode: request id " + id + " is already decoding or reserving "
                    + "here (two routers, or a restarted one, reusing an id); not reserved"));
            }
            final Rejection r;
            try {
                final java.util.function.LongConsumer hook = beforeReserve;
                if (hook != null) {
                    hook.accept(id);
                }
                r = reserve(id, tenant, prompt, maxNew, prefillInstance);
            } finally {
                calls.remove(id, claim);
            }
            Http.sendJson(ex, json, 200, RoleJson.admission(r));
            return true;
        }
        final Slot slot = new Slot();
        if (calls.putIfAbsent(id, slot) != null) { // claimed before the role starts anything: a duplicate sends no descriptor
            throw ApiError.of(new DuplicateRequestException("decode: request id " + id + " is already decoding or reserving here "
                + "(two routers, or a restarted one, reusing an id); refused without touching the request in flight"));
        }
        try {
            final DecodeCall call;
            try {
                call = role.start(id, tenant, prompt, maxNew, prefillInstance);
            } catch (IllegalStateException e) {
                throw unavailableOr(e, role.isClosed(), "decode role: " + e.getMessage());
            }
            slot.set(call);
            stream(ex, id, call, maxNew);
        } finally {
            calls.remove(id, slot);
        }
        return true;
    }

    /** @return the role's refusal, or {@code null} once the pages are promised */
    private Rejection reserve(long id, String tenant, int prompt, int maxNew, long prefillInstance) throws ApiError {
        try {
            return role.reserve(id, tenant, prompt, maxNew, prefillInstance);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            throw closed("decode role: interrupted");
        } catch (IllegalStateException e) {
            throw unavailableOr(e, role.isClosed(), "decode role: " + e.getMessage());
        }
    }

    private void stream(HttpCall ex, long id, DecodeCall call, int maxNew) {
        ex.onClientGone(() -> call.abort("the router closed the stream of request " + id));
        final HttpCall out = ex;
        try {
            ex.startStream(200, "application/x-ndjson");
            // at once, with how often the next ones come: the router counts a stream silent for many of them as broken
            event(out, Map.of("event", "waiting", "heartbeat_ms", heartbeat.toMillis()));
            DecodeCall.Admitted a;
            while ((a = call.awaitAdmission(heartbeat)) == null) {
                event(out, Map.of("event", "waiting"));
            }
            if (!a.admitted()) {
                event(out, Map.of("event", "rejected", "rejection", RoleJson.rejection(a.rejection())));
                return;
            }
            event(out, Map.of("event", "admitted"));
            DecodeCall.TransferOutcome o;
            while ((o = call.awaitTransfer(heartbeat)) == null) {
                event(out, Map.of("event", "waiting"));
            }
            if (!o.committed()) {
                final Map<String, Object> m = new LinkedHashMap<>();
                m.put("event", "transfer");
                m.put("committed", false);
                m.put("failure", String.valueOf(o.failure()));
                m.put("message", String.valueOf(o.message()));
                m.put("retry_later", o.retryLater());
                event(out, m);
                return;
            }
            event(out, Map.of("event", "transfer", "committed", true));
            final DecodeCall.Generation g = call.generate(maxNew, t -> event(out, Map.of("event", "token", "text", t)));
            final Map<String, Object> done = new LinkedHashMap<>();
            done.put("event", "done");
            done.put("text", g.text());
            done.put("completion_tokens", g.completionTokens());
            done.put("kv", RoleJson.kv(g.kv()));
            event(out, done);
        } catch (IOException gone) {
            call.abort("the router's stream of request " + id + " broke: " + gone.getMessage());
        } catch (InterruptedException e) {
            call.abort("decode role interrupted");
            Thread.currentThread().interrupt();
        } catch (RuntimeException e) {
            call.abort("decode of request " + id + " failed: " + e.getMessage());
            // the router answers "unavailable" 503 (a retry may find decode back) and anything else as a fault, 502
            final boolean unavailable = e instanceof RoleUnavailableException || role.isClosed();
            final Map<String, Object> error = new LinkedHashMap<>();
            error.put("event", "error");
            if (e instanceof java.util.concurrent.CancellationException || unavailable) {
                // an abort that came first (the router's, for a client that left) is routine; a closing role, expected
                LOG.log(System.Logger.Level.DEBUG, "decode: request " + id + " failed: " + e);
                error.put("message", String.valueOf(e.getMessage()));
            } else { // a fault: its text stays in this log, under the id the router passes on
                error.put("message", InternalErrors.message(InternalErrors.log(LOG, "decode of request " + id, e)));
            }
            if (unavailable) {
                error.put("unavailable", true);
            }
            try {
                event(out, error);
            } catch (IOException ignored) {
                // the router is gone too
            }
        }
    }

    /** A request id claimed here: its call once started, and an abort that came before it (a reserve's claim never has a
     * call: an abort it records goes with it, as one finding no claim would). */
    private static final class Slot {
        private DecodeCall call;
        private String abortedBecause;

        synchronized void set(DecodeCall c) {
            call = c;
            if (abortedBecause != null) {
                c.abort(abortedBecause);
            }
        }

        synchronized void abort(String why) {
            if (call != null) {
                call.abort(why);
            } else if (abortedBecause == null) {
                abortedBecause = why;
            }
        }
    }

    private void event(HttpCall out, Map<String, ?> m) throws IOException {
        out.write(json.writeValueAsString(m) + "\n");
    }
}
