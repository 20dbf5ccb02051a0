package io.kvpool.examples.server.remote;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import io.kvpool.examples.server.api.Json;
import io.kvpool.examples.server.role.DuplicateRequestException;
import io.kvpool.examples.server.role.RoleLostException;
import io.kvpool.examples.server.role.RoleRefusedException;
import io.kvpool.examples.server.role.RoleUnavailableException;

import java.io.IOException;
import java.io.InputStream;
import java.io.UncheckedIOException;
import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.Objects;

/**
 * The router's HTTP client for one role process's internal endpoints ({@link io.kvpool.examples.server.RoleServer}): JSON in, JSON
 * or a line stream out. Every failure names the role, its URL and the call: a role that cannot be reached
 * is a {@link RoleLostException}; a role that answers with an error status is an
 * {@link IllegalStateException} carrying the role's own message. Thread-safe.
 */
public final class RoleClient implements AutoCloseable {

    /** Longest wait for a role to answer a call (prefill, abort); the decode stream has its own stall limit. */
    static final Duration CALL_TIMEOUT = Duration.ofSeconds(10);
    /** Longest wait for a role's status (the router's /metrics and live page wait for it). */
    static final Duration STATUS_TIMEOUT = Duration.ofSeconds(2);

    private final String role;
    private final URI base;
    private final ObjectMapper json;
    private final HttpClient http;
    /** The calls waiting for their answer's headers, with when each was sent ({@link System#nanoTime()}). */
    private final java.util.concurrent.ConcurrentHashMap<java.util.concurrent.CompletableFuture<?>, Long> waiting =
        new java.util.concurrent.ConcurrentHashMap<>();
    /** Why the last {@link #failCallsSentBefore} failed the calls it did. */
    private volatile String cutShort = "";
    /**
     * When a call's answer last arrived from the role ({@link System#nanoTime()}, the newest kept); {@link #NEVER} before
     * the first. A 2xx or 4xx only: a balancer in front of the role answers 502, 503 and 504 itself.
     */
    private final java.util.concurrent.atomic.AtomicLong lastAnswerAt = new java.util.concurrent.atomic.AtomicLong(NEVER);
    private static final long NEVER = Long.MIN_VALUE;

    public RoleClient(String role, URI base, ObjectMapper json) {
        this.role = Objects.requireNonNull(role, "role");
        this.base = Objects.requireNonNull(base, "base");
        this.json = Objects.requireNonNull(json, "json");
        this.http = HttpClient.newBuilder().version(HttpClient.Version.HTTP_1_1).connectTimeout(Duration.ofSeconds(2)).build();
    }

    /** @return the parser this client reads answers with */
    ObjectMapper json() {
        return json;
    }

    /** @return the role's base URL */
    URI base() {
        return base;
    }

    /** @return e.g. {@code decode role at http://127.0.0.1:8082/} */
    String describe() {
        return role + " role at " + base;
    }

    /**
     * POSTs {@code body} as JSON and reads a JSON answer ({@code null} for 204).
     *
     * @throws RoleLostException     if the role cannot be reached or does not answer within {@link #CALL_TIMEOUT}
     * @throws IllegalStateException if it answers with an error status (its message included); a
     *                               {@link DuplicateRequestException} for a 409 {@value DuplicateRequestException#REASON},
     *                               a {@link RoleRefusedException} for any other 4xx but 408 and for a 5xx other than
     *                               503, a {@link RoleUnavailableException} for a 503 or a 408 (the role's front timed
     *                               out the call's head or body: a stall on the way, which a later call need not meet)
     */
    JsonNode post(String path, Object body) {
        final HttpResponse<byte[]> r = postWhole(path, body);
        return answer("POST", path, r.statusCode(), r.body());
    }

    /**
     * POSTs {@code body} where the router needs no answer (an abort, a give-back): any 2xx is taken, whatever its body
     * (a proxy's or another build's 200 without one included), within {@link #CALL_TIMEOUT}.
     *
     * @throws RoleLostException / IllegalStateException for any other status, as {@link #post}
     */
    void postAccepted(String path, Object body) {
        final HttpResponse<byte[]> r = postWhole(path, body);
        if (r.statusCode() / 100 != 2) {
            answer("POST", path, r.statusCode(), r.body());
        }
    }

    /** POSTs {@code body}; the answer is read whole within {@link #CALL_TIMEOUT}. */
    private HttpResponse<byte[]> postWhole(String path, Object body) {
        return send(request(path, CALL_TIMEOUT).POST(publish(body)).build(), HttpResponse.BodyHandlers.ofByteArray());
    }

    /** GETs a JSON answer within {@link #STATUS_TIMEOUT}. @throws RoleLostException / IllegalStateException as {@link #post} */
    JsonNode get(String path) {
        final HttpResponse<byte[]> r = send(request(path, STATUS_TIMEOUT).GET().build(), HttpResponse.BodyHandlers.ofByteArray());
        return answer("GET", path, r.statusCode(), r.body());
    }

    /**
     * POSTs {@code body} and returns the answer's body as a stream once its headers arrived (within
     * {@link #CALL_TIMEOUT}; none on the body: the caller reads it for as long as the role streams, and closing
     * it drops the connection).
     *
     * An error status's body is read whole, within twice {@link #CALL_TIMEOUT}.
     *
     * @throws RoleLostException     if the role cannot be reached, or an error's body does not arrive within that bound
     * @throws IllegalStateException if it answers with an error status (as {@link #post} maps it)
     */
    InputStream stream(String path, Object body) {
        final HttpRequest req = request(path, CALL_TIMEOUT).POST(publish(body)).build(); // the timeout bounds the headers only
        // an error's body is read whole within send's bound, as any call's: a role that stalls mid-body must not hold us
        final HttpResponse<Object> r = send(req, info -> info.statusCode() == 200
            ? HttpResponse.BodySubscribers.mapping(HttpResponse.BodySubscribers.ofInputStream(), in -> (Object) in)
            : HttpResponse.BodySubscribers.mapping(HttpResponse.BodySubscribers.ofByteArray(), b -> (Object) b));
        if (r.statusCode() != 200) {
            answer("POST", path, r.statusCode(), (byte[]) r.body());
            throw new IllegalStateException(describe() + " answered " + r.statusCode() + " to POST /" + path + " instead of a stream");
        }
        return (InputStream) r.body();
    }

    private HttpRequest.Builder request(String path, Duration timeout) {
        return HttpRequest.newBuilder(base.resolve(path)).timeout(timeout).header("Content-Type", "application/json");
    }

    private HttpRequest.BodyPublisher publish(Object body) {
        try {
            return HttpRequest.BodyPublishers.ofByteArray(json.writeValueAsBytes(body));
        } catch (IOException e) {
            throw new UncheckedIOException(e);
        }
    }

    /**
     * Sends {@code req} and waits for what {@code handler} makes of the answer, at most twice the request's timeout:
     * that timeout ends with the headers, and a role frozen mid-body would otherwise hold its caller (and a status-read
     * permit) for ever. A handler that hands the body over as a stream is done with the headers.
     */
    private <T> HttpResponse<T> send(HttpRequest req, HttpResponse.BodyHandler<T> handler) {
        final String what = req.method() + " " + req.uri().getPath();
        final long whole = 2 * req.timeout().orElseThrow().toMillis();
        final long sentAt = System.nanoTime();
        final java.util.concurrent.CompletableFuture<HttpResponse<T>> f = http.sendAsync(req, handler);
        f.thenAccept(this::answered); // when the answer arrives, not when this thread resumes
        waiting.put(f, sentAt);
        try {
            return f.get(whole, java.util.concurrent.TimeUnit.MILLISECONDS);
        } catch (java.util.concurrent.CancellationException e) { // failCallsSentBefore: the role stopped answering
            throw cutShort(what, e);
        } catch (java.util.concurrent.ExecutionException e) {
            final Throwable c = e.getCause();
            if (c instanceof java.util.concurrent.CancellationException) { // the HttpClient's own cancel, from ours
                throw cutShort(what, c);
            }
            throw new RoleLostException(describe() + " is unreachable (" + what + "): "
                + (c instanceof IOException io ? why(io) : String.valueOf(c)), c);
        } catch (java.util.concurrent.TimeoutException e) {
            f.cancel(true);
            throw new RoleLostException(describe() + " is unreachable (" + what + "): its answer did not finish in " + whole + " ms", e);
        } catch (InterruptedException e) {
            f.cancel(true);
            Thread.currentThread().interrupt();
            throw new RoleLostException(describe() + ": interrupted while waiting for " + what, e);
        } finally {
            waiting.remove(f);
        }
    }

    /** @return the exception of a call {@link #failCallsSentBefore} failed, naming why */
    private RoleLostException cutShort(String what, Throwable cause) {
        return new RoleLostException(describe() + " is unreachable (" + what + "): " + cutShort, cause);
    }

    /**
     * Fails every call sent before {@code nanos} ({@link System#nanoTime()}) that still waits for its answer, at once,
     * with a {@link RoleLostException} carrying {@code why}: the role stopped answering (see
     * {@link RoleHealth}), and a frozen process would otherwise hold each of them for {@link #CALL_TIMEOUT}. A call
     * sent later is left alone (the role may have come back). Thread-safe.
     *
     * @return how many calls it failed
     */
    int failCallsSentBefore(long nanos, String why) {
        cutShort = Objects.requireNonNull(why, "why");
        int failed = 0;
        for (var e : waiting.entrySet()) {
            if (e.getValue() - nanos < 0 && e.getKey().cancel(true)) { // cancel(true) also aborts the HTTP exchange
                failed++;
            }
        }
        return failed;
    }

    /**
     * Whether a call through this client got an answer from the role (2xx or 4xx) at or after {@code nanos}: behind a
     * balancer, a process other than the one a status read found silent may be answering the calls. Thread-safe.
     *
     * @param nanos a {@link System#nanoTime()} reading
     * @return whether an answer arrived since
     */
    boolean answeredSince(long nanos) {
        final long at = lastAnswerAt.get();
        return at != NEVER && at - nanos >= 0;
    }

    /** Records an answer's arrival, if the role itself gave it; keeps the newest of racing arrivals. */
    private void answered(HttpResponse<?> r) {
        final int status = r.statusCode();
        if (status / 100 == 2 || status / 100 == 4) {
            final long now = System.nanoTime();
            lastAnswerAt.accumulateAndGet(now, (old, t) -> old == NEVER || t - old > 0 ? t : old);
        }
    }

    /** @return what went wrong, from the exception and its causes (the JDK's ConnectException carries no message) */
    static String why(IOException e) {
        if (e instanceof java.net.http.HttpTimeoutException) {
            return "no answer in time (" + e.getMessage() + ")";
        }
        final StringBuilder b = new StringBuilder(e.getClass().getSimpleName());
        for (Throwable t = e; t != null; t = t.getCause()) {
            if (t.getMessage() != null) {
                b.append(": ").append(t.getMessage());
                return b.toString();
            }
        }
        return b.append(e instanceof java.net.ConnectException ? ": connection refused (is the process running?)" : "").toString();
    }

    private JsonNode answer(String method, String path, int status, byte[] body) {
        if (status == 204) {
            return null;
        }
        JsonNode n;
        try {
            n = body.length == 0 ? null : Json.read(json, body);
        } catch (IOException e) {
            n = null;
        }
        if (status / 100 == 2 && n != null) {
            return n;
        }
        final JsonNode err = n == null ? null : n.path("error").path("message");
        final String what = err == null || err.isMissingNode() ? new String(body, StandardCharsets.UTF_8) : err.asText();
        final String msg = describe() + " answered " + status + " to " + method + " /" + path + ": " + what;
        if (status == 409 && n != null && DuplicateRequestException.REASON.equals(n.path("error").path("reason").asText())) {
            throw new DuplicateRequestException(msg);
        }
        if (status == 408) { // the role's front gave up on the call's head or body (a stall on the way): waiting can help
            throw new RoleUnavailableException(msg);
        }
        if (status / 100 == 4) { // the role will never take this call: no retry makes it
            throw new RoleRefusedException(msg, status);
        }
        if (status / 100 == 5 && status != 503) { // the role took the call and failed it (its 500): it is up, and says why
            throw new RoleRefusedException(msg, status);
        }
        if (status == 503) { // closing or busy: waiting can help
            throw new RoleUnavailableException(msg);
        }
        throw new IllegalStateException(msg); // a success the router cannot read: the role's fault (another build?)
    }

    /** Drops every connection at once (an open decode stream ends); idempotent. */
    @Override
    public void close() {
        http.shutdownNow();
    }
}
