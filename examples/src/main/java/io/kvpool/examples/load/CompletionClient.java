package io.kvpool.examples.load;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;

import java.io.BufferedReader;
import java.io.ByteArrayInputStream;
import java.io.IOException;
import java.io.InputStream;
import java.io.InputStreamReader;
import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.Objects;
import java.util.Set;

/**
 * Sends {@link Shot}s to {@code POST /v1/completions} with the JDK's {@link HttpClient} (HTTP/1.1, one
 * connection per concurrent caller) and turns each answer into an {@link Outcome}: its class, latencies,
 * tokens, and the leak checks — other tenants' {@link Markers} anywhere in what came back, and whether the
 * KV the server read ({@code kvpool.kv_text}) is exactly the prompt that was sent.
 *
 * <p>A streamed response is read line by line as it arrives, and after {@code [DONE]} to its end; an abort
 * closes the response stream, which closes the connection, and the server notices at its next write (a
 * heartbeat or a token) and aborts the request on both roles. Thread-safe: {@link #send} may be called from
 * any thread; a load generator gives each of its clients a {@link #session()} instead, with connections of
 * its own.
 *
 * <p>Why sessions, and why read past {@code [DONE]}: the JDK client puts a connection back in its pool as
 * soon as a response is whole, and a response stream closed after that moment still closes the connection,
 * under whichever request took it from the pool next. That request then fails with "HTTP/1.1 header parser
 * received no bytes", and the server sees only a client that closed an idle connection. Against a bare
 * {@code HttpFront} (16 threads, 64,000 requests a run, half of them short streams) closing each stream at
 * {@code [DONE]} gave 7 such failures in 4 runs and ~1,500 client closes a run; reading to the end of the
 * stream gave 1 in 6 runs; reading to the end with a client per thread gave none in 3 runs.
 */
public final class CompletionClient implements AutoCloseable {

    private static final ObjectMapper JSON = new ObjectMapper();

    private final URI endpoint;
    private final Duration timeout;
    private final int maxBodyBytes;
    private final HttpClient http;

    /**
     * @param base         the server, {@code http://host:port/}
     * @param timeout      longest wait for one response
     * @param maxBodyBytes the server's body limit (for the huge-body garbage)
     */
    public CompletionClient(URI base, Duration timeout, int maxBodyBytes) {
        this.endpoint = Objects.requireNonNull(base, "base").resolve("/v1/completions");
        this.timeout = Objects.requireNonNull(timeout, "timeout");
        this.maxBodyBytes = maxBodyBytes;
        this.http = newHttpClient();
    }

    /** @return the body of a completion request */
    static String body(String prompt, int maxTokens, boolean stream) {
        try {
            return JSON.writeValueAsString(Map.of("prompt", prompt, "max_tokens", maxTokens, "stream", stream));
        } catch (IOException e) {
            throw new IllegalStateException(e);
        }
    }

    /** Sends one request and waits for its end (or disconnects, as the shot says). Never throws for what the server does. */
    public Outcome send(Shot s) throws InterruptedException {
        return send(http, s);
    }

    /**
     * {@return a client of its own for one caller: its requests go on its own connections} Close it when done.
     * A load generator's client uses one, so that another client's late close never lands under its request.
     * Each session's JDK client runs a selector thread and a small thread pool (platform threads) while it is open.
     */
    public Session session() {
        return new Session(newHttpClient());
    }

    /** One caller's requests on connections of their own ({@link #session()}). Not thread-safe; close is idempotent. */
    public final class Session implements AutoCloseable {
        private final HttpClient own;

        private Session(HttpClient own) {
            this.own = own;
        }

        /** As {@link CompletionClient#send}, on this session's connections. */
        public Outcome send(Shot s) throws InterruptedException {
            return CompletionClient.this.send(own, s);
        }

        @Override
        public void close() {
            own.close();
        }
    }

    /**
     * A JDK client with its default executor: a selector thread and a small pool of platform threads of its own.
     * Not the load's virtual threads, which are not preempted: with the clients' tasks on them, one fault run on
     * 2 cores lost a refused 1 MiB body's 413 to a reset (the server drains a refused body for at most 2 s), which
     * no run on the default executors showed.
     */
    private static HttpClient newHttpClient() {
        return HttpClient.newBuilder().version(HttpClient.Version.HTTP_1_1).connectTimeout(Duration.ofSeconds(5)).build();
    }

    private Outcome send(HttpClient http, Shot s) throws InterruptedException {
        final long t0 = System.nanoTime();
        try {
            if (s.kind() == Shot.Kind.GARBAGE) {
                return garbage(http, s, t0);
            }
            final HttpRequest req = HttpRequest.newBuilder(endpoint).timeout(timeout).header("Authorization", "Bearer sk-" + s.tenant())
                .header("Content-Type", "application/json")
                .POST(HttpRequest.BodyPublishers.ofString(body(s.prompt(), s.maxTokens(), s.stream()))).build();
            if (!s.stream()) {
                final HttpResponse<InputStream> r = http.send(req, HttpResponse.BodyHandlers.ofInputStream());
                try (InputStream in = r.body()) {
                    return whole(s, r.statusCode(), readGuarded(in, r.statusCode(), s.maxTokens()), t0);
                }
            }
            if (!s.aborts()) {
                return streamed(http, s, req, t0);
            }
            // An abort closes the response stream early, and the JDK client may by then have put the connection back
            // in its pool (the response was whole) yet still close it: the next request on it would get no answer
            // (see the class comment). So each abort gets a client, and a connection, of its own.
            final HttpClient own = newHttpClient();
            try {
                return streamed(own, s, req, t0);
            } finally {
                own.shutdownNow();
            }
        } catch (BodyStalled e) {
            return unexpected(s, e.status, "body_stalled", System.nanoTime() - t0, Set.of(), e.getMessage());
        } catch (IOException | RuntimeException e) {
            return new Outcome(s, Outcome.Kind.UNEXPECTED, 0, "client_error", -1, System.nanoTime() - t0, 0, Set.of(), List.of(), false,
                e.toString());
        }
    }

    /** The body of an answer stopped coming for the client's timeout, or kept coming past {@link StallGuard}'s bound. */
    private static final class BodyStalled extends IOException {
        private static final long serialVersionUID = 1L;
        final int status;

        BodyStalled(int status, String why, IOException cause) {
            super("the body of a " + status + " answer was given up: " + why, cause);
            this.status = status;
        }
    }

    /**
     * Reads a whole body as UTF-8 under a {@link StallGuard}: a body whose headers came but whose bytes stop (a server
     * frozen mid-answer, a path cut) must not hold a load thread past the client's timeout.
     *
     * @throws BodyStalled if nothing came for the timeout
     */
    private String readGuarded(InputStream in, int status, int maxTokens) throws IOException {
        final StallGuard guard = new StallGuard(in, maxTokens);
        try (guard) {
            final java.io.ByteArrayOutputStream out = new java.io.ByteArrayOutputStream();
            final byte[] buf = new byte[8192];
            for (int n; (n = in.read(buf)) >= 0; ) {
                out.write(buf, 0, n);
                guard.progress();
            }
            return out.toString(StandardCharsets.UTF_8);
        } catch (IOException e) {
            if (guard.fired()) {
                throw new BodyStalled(status, guard.why(), e);
            }
            throw e;
        }
    }

    private Outcome streamed(HttpClient client, Shot s, HttpRequest req, long t0) throws IOException, InterruptedException {
        final HttpResponse<InputStream> r = client.send(req, HttpResponse.BodyHandlers.ofInputStream());
        try (InputStream in = r.body()) { // closing it early closes the connection: the abort
            if (r.statusCode() != 200) {
                return whole(s, r.statusCode(), readGuarded(in, r.statusCode(), s.maxTokens()), t0);
            }
            return stream(s, in, t0);
        }
    }

    /**
     * @return whether a 400/413 refuses the request for its size: too long for the context, for the pool, or (a
     *         long prompt) for the server's body limit — the only refusals a well-formed request may get
     */
    static boolean sizeRefusal(String reason) {
        return reason.equals("context_too_long") || reason.equals("exceeds_pool") || reason.equals("body_too_large");
    }

    /**
     * @return whether an error is one the server is built to give when a transfer or a role fails (502
     *         {@code transfer_failed} with the transfer's reason, 504 {@code timeout}, 502 {@code role_lost}): anything
     *         else — a 500 {@code internal_error} above all — is unexpected, not a failure the test tolerates
     */
    static boolean knownFailure(String type, String reason) {
        return type.equals("transfer_failed") || type.equals("timeout") || reason.equals("role_lost");
    }

    /** A non-streamed answer (or a refused stream): JSON, a completion or an error. */
    private Outcome whole(Shot s, int status, String body, long t0) {
        final long total = System.nanoTime() - t0;
        final Set<String> foreign = Markers.foreign(s.tenant(), body);
        final JsonNode root = parse(body);
        if (status == 200) {
            final JsonNode kv = root.path("kvpool");
            if (!kv.isObject()) {
                return unexpected(s, 200, "no_kvpool_section", total, foreign, body);
            }
            final String malformed = kvMalformed(kv);
            if (malformed != null) {
                return unexpected(s, 200, "malformed_kvpool_section", total, foreign, malformed + ": " + body);
            }
            final JsonNode count = root.path("usage").path("completion_tokens");
            if (!count.isIntegralNumber() || !count.canConvertToInt() || count.intValue() < 0) {
                return unexpected(s, 200, "malformed_usage", total, foreign, "usage.completion_tokens is " + count + ": " + body);
            }
            final int completionTokens = count.intValue();
            if (completionTokens > s.maxTokens()) { // past the reservation the request was admitted for
                return unexpected(s, 200, "too_many_tokens", total, foreign, completionTokens + " completion tokens for max_tokens "
                    + s.maxTokens());
            }
            // the text is the echo model's, as a stream's is: another request's text of the same tenant holds no foreign marker
            final boolean mismatch = kvMismatch(s, kv) || !echoes(s, root.path("choices").path(0).path("text").asText(""), completionTokens);
            return new Outcome(s, Outcome.Kind.COMPLETED, 200, null, -1, total, completionTokens,
                foreign, tenants(kv), mismatch, mismatch ? cut(kv.path("kv_text").asText()) : null);
        }
        final JsonNode e = root.path("error");
        final String reason = e.path("reason").asText("");
        final Outcome.Kind kind = switch (status) {
            // a well-formed request is refused for good only for its size (sizeRefusal); any other 4xx is the server's mistake
            case 400, 413 -> sizeRefusal(reason) ? Outcome.Kind.REJECTED : Outcome.Kind.UNEXPECTED;
            case 429, 503 -> Outcome.Kind.RETRY_LATER;
            // a failure the protocol names (a transfer that failed its checks or timed out, a role lost) — not a 500
            case 502, 504 -> knownFailure(e.path("type").asText(""), reason) ? Outcome.Kind.FAILED : Outcome.Kind.UNEXPECTED;
            default -> Outcome.Kind.UNEXPECTED;
        };
        return new Outcome(s, kind, status, e.path("reason").asText("?"), -1, total, 0, foreign, List.of(), false,
            e.path("message").asText(cut(body)));
    }

    /**
     * Closes a stream that sent nothing for the client's timeout (the request's own timeout ends with the headers): a
     * request hung in the server must not hold a load thread, and with it the run's report, for ever. Heartbeat comments
     * are not progress: a stream of nothing else for the timeout is stalled too. Nor may an answer that keeps coming
     * (a body trickling for ever): past {@code maxTokens + 2} timeouts in all it is closed too, whatever it sent.
     */
    private final class StallGuard implements AutoCloseable {
        private volatile long lastProgress = System.nanoTime();
        /** The longest an answer may take in all: {@code maxTokens + 2} timeouts. */
        private final Duration limit;
        private volatile boolean fired, overran;
        private final Thread watcher;

        StallGuard(InputStream in, int maxTokens) {
            limit = timeout.multipliedBy(maxTokens + 2L);
            final long deadline = lastProgress + limit.toNanos();
            watcher = Thread.ofVirtual().start(() -> {
                try {
                    long now;
                    while ((now = System.nanoTime()) - lastProgress < timeout.toNanos() && now - deadline < 0) {
                        Thread.sleep(Duration.ofNanos(Math.min(timeout.toNanos() - (now - lastProgress), deadline - now)));
                    }
                    overran = now - lastProgress < timeout.toNanos(); // it ended on the limit, not on a stall
                    fired = true;
                    in.close(); // unblocks the read
                } catch (InterruptedException | IOException e) {
                    // the stream ended first, or was closed already
                }
            });
        }

        void progress() {
            lastProgress = System.nanoTime();
        }

        boolean fired() {
            return fired;
        }

        /** {@return why it closed the answer} Once {@link #fired}. */
        String why() {
            return overran ? "it was still coming after " + limit.toMillis() + " ms in all"
                : "nothing came for " + timeout.toMillis() + " ms";
        }

        @Override
        public void close() {
            watcher.interrupt();
        }
    }

    /**
     * A stream: comments, one chunk per token ({@code finish_reason} null, no {@code kvpool}), one final chunk (a
     * {@code finish_reason}, with {@code usage} and {@code kvpool}), {@code [DONE]}; or an error event for the final chunk.
     * Any other chunk (no {@code finish_reason} key, a second final chunk, a token after the final one, a {@code kvpool}
     * section on a token chunk) makes the answer {@code malformed_chunk}: its text or KV would escape the checks.
     */
    private Outcome stream(Shot s, InputStream in, long t0) throws IOException {
        final StallGuard guard = new StallGuard(in, s.maxTokens());
        try (guard) {
            return stream(s, in, t0, guard);
        } catch (IOException e) {
            if (guard.fired()) {
                return unexpected(s, 200, "stream_stalled", System.nanoTime() - t0, Set.of(),
                    "the stream was given up: " + guard.why() + ": " + e);
            }
            throw e;
        }
    }

    private Outcome stream(Shot s, InputStream in, long t0, StallGuard guard) throws IOException {
        final BufferedReader r = new BufferedReader(new InputStreamReader(in, StandardCharsets.UTF_8));
        final StringBuilder text = new StringBuilder();
        final StringBuilder raw = new StringBuilder();
        long ttft = -1;
        int tokens = 0;
        JsonNode last = null;
        JsonNode error = null;
        String offShape = null; // the first chunk out of the stream's shape; the stream is still read to [DONE]
        for (String line; (line = r.readLine()) != null; ) {
            if (line.startsWith("data: ") || line.startsWith(": admitted")) {
                guard.progress(); // not the heartbeat comments: they keep the connection alive, the answer does not move
            }
            if (line.startsWith(": admitted") && s.abortAfter() == 0) {
                return aborted(s, t0, ttft, tokens, text, raw);
            }
            if (!line.startsWith("data: ")) {
                if (!line.isEmpty()) { // not the documented stream's, but read for markers all the same: a leak is a leak
                    raw.append(line).append('\n');
                }
                continue;
            }
            final String data = line.substring(6);
            if (data.equals("[DONE]")) {
                final long total = System.nanoTime() - t0;
                final AfterDone after = rest(r, in, s.tenant());
                // what came after [DONE], comments included, was read for markers too: another tenant's there is a leak
                final Set<String> foreign = new java.util.TreeSet<>(Markers.foreign(s.tenant(), raw.append(text)));
                foreign.addAll(after.foreign());
                if (after.reason() != null) {
                    return unexpected(s, 200, after.reason(), total, foreign, cut(after.detail()));
                }
                if (offShape != null) {
                    return unexpected(s, 200, "malformed_chunk", total, foreign, offShape);
                }
                if (error != null) {
                    final String type = error.path("type").asText();
                    final Outcome.Kind kind = type.equals("rate_limit_error") || type.equals("service_unavailable") ? Outcome.Kind.RETRY_LATER
                        : knownFailure(type, error.path("reason").asText("")) ? Outcome.Kind.FAILED : Outcome.Kind.UNEXPECTED;
                    return new Outcome(s, kind, 200, error.path("reason").asText("?"), ttft, total, tokens, foreign, List.of(), !echoes(s, text, tokens),
                        error.path("message").asText());
                }
                final JsonNode kv = last == null ? JSON.missingNode() : last.path("kvpool");
                if (!kv.isObject()) {
                    return unexpected(s, 200, "no_kvpool_section", total, foreign, raw.toString());
                }
                final String malformed = kvMalformed(kv);
                if (malformed != null) {
                    return unexpected(s, 200, "malformed_kvpool_section", total, foreign, malformed + ": " + raw);
                }
                final boolean mismatch = kvMismatch(s, kv) || !echoes(s, text, tokens);
                return new Outcome(s, Outcome.Kind.COMPLETED, 200, null, ttft, total, tokens, foreign, tenants(kv), mismatch,
                    mismatch ? cut(kv.path("kv_text").asText()) : null);
            }
            raw.append(data).append('\n');
            final JsonNode chunk = parse(data);
            if (chunk.has("error")) {
                error = chunk.get("error");
                continue;
            }
            final JsonNode choice = chunk.path("choices").path(0);
            final JsonNode finish = choice.path("finish_reason");
            final String wrong = finish.isMissingNode() ? "a chunk without a finish_reason"
                : !finish.isNull() && !finish.isTextual() ? "a chunk whose finish_reason is " + finish
                : last != null ? "a chunk after the final chunk"
                : finish.isNull() && chunk.has("kvpool") ? "a kvpool section on a token chunk" : null;
            if (wrong != null) {
                if (offShape == null) {
                    offShape = wrong + ": " + cut(data);
                }
                continue;
            }
            if (finish.isNull()) {
                if (ttft < 0) {
                    ttft = System.nanoTime() - t0;
                }
                tokens++;
                text.append(choice.path("text").asText());
                if (tokens > s.maxTokens()) { // a stream that runs past its reservation: said at once, not read for ever
                    return unexpected(s, 200, "too_many_tokens", System.nanoTime() - t0,
                        Markers.foreign(s.tenant(), raw.append(text)), tokens + " tokens streamed for max_tokens " + s.maxTokens());
                }
                if (tokens == s.abortAfter()) {
                    return aborted(s, t0, ttft, tokens, text, raw);
                }
            } else {
                last = chunk;
            }
        }
        return new Outcome(s, Outcome.Kind.UNEXPECTED, 200, "stream_cut", ttft, System.nanoTime() - t0, tokens,
            Markers.foreign(s.tenant(), raw.append(text)), List.of(), false, "the stream ended without [DONE]: " + cut(raw.toString()));
    }

    /**
     * What came past {@code [DONE]}: {@code reason} for the outcome and {@code detail} (its first 1,000 characters) for its
     * message if it was wrong, else both {@code null}; and every other tenant's marker in all of it, comments included.
     */
    private record AfterDone(String reason, String detail, Set<String> foreign) {
    }

    /**
     * Reads a stream past {@code [DONE]} to its end: closing it before would race the JDK client's pool (class
     * comment). The wait is bounded by the client's timeout (the request's own timeout ends with the headers): a
     * stream not ended by then is closed.
     *
     * @return no reason if nothing but blank and comment lines followed; else {@code data_after_done} with what did, or
     *         {@code no_end_after_done} with why the read ended. Comment lines are no data, but are read for markers
     */
    private AfterDone rest(BufferedReader r, InputStream in, String tenant) {
        final Thread guard = Thread.ofVirtual().start(() -> {
            try {
                Thread.sleep(timeout);
                in.close(); // unblocks the read below
            } catch (InterruptedException | IOException e) {
                // ended in time, or already closed
            }
        });
        final StringBuilder after = new StringBuilder(); // the start of it, for the report
        final Set<String> foreign = new java.util.TreeSet<>(); // read in all of it, however long
        boolean data = false;
        try {
            for (String more; (more = r.readLine()) != null; ) {
                foreign.addAll(Markers.foreign(tenant, more));
                if (!more.isEmpty() && !more.startsWith(":")) {
                    data = true;
                    if (after.length() < 1000) {
                        after.append(more).append('\n');
                    }
                }
            }
        } catch (IOException e) {
            return new AfterDone("no_end_after_done", "the stream did not end after [DONE]: " + e
                + (data ? "; after [DONE] it sent: " + after : ""), foreign);
        } finally {
            guard.interrupt();
        }
        return data ? new AfterDone("data_after_done", after.toString(), foreign) : new AfterDone(null, null, foreign);
    }

    /** A stream the client ended: {@code text} its tokens' text, {@code raw} every other line it read, both read for markers. */
    private static Outcome aborted(Shot s, long t0, long ttft, int tokens, CharSequence text, CharSequence raw) {
        return new Outcome(s, Outcome.Kind.ABORTED, 200, null, ttft, System.nanoTime() - t0, tokens,
            Markers.foreign(s.tenant(), new StringBuilder(raw).append(text)), List.of(), !echoes(s, text, tokens), null);
    }

    /**
     * @return whether the server's KV read is not exactly the prompt: another text (another request's, of any tenant),
     *         the prompt's own tokens at other positions ({@code kv_misplaced_tokens}), which a repeated marker hides from the
     *         text, or tokens in the last page past the prompt ({@code kv_tail_tokens}: an earlier tenancy's KV)
     */
    static boolean kvMismatch(Shot s, JsonNode kv) {
        return !kv.path("kv_text").isTextual() || !s.prompt().equals(kv.path("kv_text").asText()) || !zero(kv.path("kv_misplaced_tokens"))
            || kv.has("kv_tail_tokens") && !zero(kv.path("kv_tail_tokens"));
    }

    /** @return whether {@code n} is the JSON integer 0, whatever its size: a missing, null, fractional or text count is not */
    private static boolean zero(JsonNode n) {
        return n.isIntegralNumber() && n.bigIntegerValue().signum() == 0;
    }

    /**
     * @return what is wrong with the form of a completion's {@code kvpool} section, or {@code null} if it is as the server
     *         writes it: {@code kv_text} a string, {@code kv_tenants} a non-empty list of names (the only check that sees
     *         tokens whose text every tenant's prompt shares, such as {@code " SECRET-"}), {@code kv_misplaced_tokens} an
     *         integer, and {@code kv_tail_tokens} an integer where present (a decode role of an older build leaves it out).
     *         A check field that is not there, or not a count, proves nothing about the KV
     */
    static String kvMalformed(JsonNode kv) {
        if (!kv.path("kv_text").isTextual()) {
            return "kv_text is " + kv.path("kv_text");
        }
        final JsonNode tenants = kv.path("kv_tenants");
        boolean names = tenants.isArray() && !tenants.isEmpty();
        for (JsonNode t : tenants) {
            names &= t.isTextual();
        }
        if (!names) {
            return "kv_tenants is " + tenants;
        }
        if (!kv.path("kv_misplaced_tokens").isIntegralNumber()) {
            return "kv_misplaced_tokens is " + kv.path("kv_misplaced_tokens");
        }
        if (kv.has("kv_tail_tokens") && !kv.path("kv_tail_tokens").isIntegralNumber()) {
            return "kv_tail_tokens is " + kv.path("kv_tail_tokens");
        }
        return null;
    }

    /**
     * @return whether {@code tokens} streamed tokens are the echo model's: generated token i is the prompt's token
     *         i mod n. Streams that end early (aborted, failed) have no {@code kvpool} section: this is their KV check, so
     *         that another request's text of the same tenant is a finding there too
     */
    static boolean echoes(Shot s, CharSequence text, int tokens) {
        final List<byte[]> prompt = io.kvpool.examples.server.echo.EchoTokenizer.encode(s.prompt());
        if (prompt.isEmpty()) {
            return tokens == 0;
        }
        final StringBuilder want = new StringBuilder();
        for (int i = 0; i < tokens; i++) {
            want.append(io.kvpool.examples.server.echo.EchoTokenizer.text(prompt.get(i % prompt.size())));
        }
        return want.toString().contentEquals(text);
    }

    private static Outcome unexpected(Shot s, int status, String reason, long total, Set<String> foreign, String body) {
        return new Outcome(s, Outcome.Kind.UNEXPECTED, status, reason, -1, total, 0, foreign, List.of(), false, cut(body));
    }

    private Outcome garbage(HttpClient http, Shot s, long t0) throws IOException, InterruptedException {
        final Garbage g = s.garbage();
        final byte[] body = g.body(s.prompt(), maxBodyBytes).getBytes(StandardCharsets.UTF_8);
        final HttpRequest.Builder b = HttpRequest.newBuilder(endpoint).timeout(timeout).header("Content-Type", "application/json")
            .POST(g == Garbage.HUGE_CHUNKED_BODY ? HttpRequest.BodyPublishers.ofInputStream(() -> new ByteArrayInputStream(body))
                : HttpRequest.BodyPublishers.ofByteArray(body));
        if (g != Garbage.MISSING_KEY) {
            b.header("Authorization", "Bearer sk-" + s.tenant());
        }
        final int status;
        final String answer;
        try {
            final HttpResponse<InputStream> r = http.send(b.build(), HttpResponse.BodyHandlers.ofInputStream());
            try (InputStream in = r.body()) {
                status = r.statusCode();
                answer = readGuarded(in, status, s.maxTokens());
            }
        } catch (BodyStalled e) {
            return unexpected(s, e.status, "body_stalled", System.nanoTime() - t0, Set.of(), e.getMessage());
        } catch (IOException e) {
            return new Outcome(s, Outcome.Kind.UNEXPECTED, 0, "client_error", -1, System.nanoTime() - t0, 0, Set.of(), List.of(), false,
                "the connection failed (" + e + ") where " + g + " expected " + g.status() + " " + g.reason());
        }
        final String reason = parse(answer).path("error").path("reason").asText(null);
        final boolean ok = status == g.status() && g.reason().equals(reason);
        return new Outcome(s, ok ? Outcome.Kind.GARBAGE_REFUSED : Outcome.Kind.UNEXPECTED, status, reason, -1,
            System.nanoTime() - t0, 0, Markers.foreign(s.tenant(), answer), List.of(), false,
            ok ? null : g + " expected " + g.status() + " " + g.reason() + ": " + cut(answer));
    }

    private static JsonNode parse(String body) {
        try {
            final JsonNode n = JSON.readTree(body);
            return n == null ? JSON.missingNode() : n;
        } catch (IOException e) {
            return JSON.missingNode();
        }
    }

    private static List<String> tenants(JsonNode kv) {
        final List<String> out = new ArrayList<>();
        kv.path("kv_tenants").forEach(t -> out.add(t.asText()));
        return out;
    }

    private static String cut(String s) {
        return s.length() <= 300 ? s : s.substring(0, 300) + "…";
    }

    /** Closes the HTTP client (idempotent). */
    @Override
    public void close() {
        http.close();
    }
}
