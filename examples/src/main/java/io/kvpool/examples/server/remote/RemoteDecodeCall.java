package io.kvpool.examples.server.remote;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import io.kvpool.examples.server.echo.EchoDecoder;
import io.kvpool.examples.server.role.DecodeCall;
import io.kvpool.examples.server.role.DecodeRole;
import io.kvpool.examples.server.role.Rejection;
import io.kvpool.examples.server.role.RoleLostException;

import java.io.BufferedReader;
import java.io.IOException;
import java.io.InputStream;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.Map;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.LinkedBlockingQueue;
import java.util.concurrent.TimeUnit;

/**
 * One request on a decode role in another process: the {@code POST /internal/decode} stream, read by a
 * virtual thread into the call's state. The decode process writes one JSON object per line:
 * <pre>
 *   {"event":"waiting","heartbeat_ms":200}                 at once: the process's heartbeat, then
 *   {"event":"waiting"}                                    every heartbeat while admission or the transfer is pending
 *   {"event":"admitted"}  | {"event":"rejected","rejection":{…}}
 *   {"event":"transfer","committed":true} | {"event":"transfer","committed":false,"failure":"PEER_LOST","message":"…","retry_later":false}
 *   {"event":"token","text":"…"} …                         generation starts as soon as the KV committed
 *   {"event":"done","text":"…","completion_tokens":8,"kv":{…}} | {"event":"error","message":"…"[,"unavailable":true]}
 * </pre>
 * An {@code error} event ends whatever is still pending. With {@code unavailable} (the process was closed under the
 * call: waiting helps) it ends it as a lost stream does, below. Without, it is a fault of the process, which would
 * fail the same call the same way: the awaited future fails with an {@link IllegalStateException}, which the router
 * answers 502 {@code role_error}; during generation it is a {@link RoleLostException}. A JSON line the router cannot
 * read (an unknown event, reason or field: another build, or a broken one) is such a fault too; a line that is not
 * JSON at all is taken for one cut short by a process that died, and so as a lost stream.
 * A stream that breaks — the decode process died, or stopped answering — ends the call honestly: before
 * admission as a 503 refusal ({@code decode_unavailable}), before the transfer's outcome as a failed transfer
 * ({@code ROLE_LOST}, 503), during generation as a {@link RoleLostException}. Before the KV committed the process
 * writes a line at least every {@code --heartbeat-ms}: a stream silent for the call's silence limit then counts as
 * broken (a frozen process, a path that drops packets without a reset), not as a wait to the request's deadline. {@link #abort} tells the process
 * ({@code POST /internal/abort}), which ends the stream; the reader reads it to its end, so the connection goes back
 * to the client's pool whole. A stream not ended {@link #DROP_AFTER} after the abort, or after its last event, is
 * dropped; after an abort the process aborts on its own when it sees it gone.
 */
final class RemoteDecodeCall implements DecodeCall {

    private static final System.Logger LOG = System.getLogger("io.kvpool.examples.server");
    private final RoleClient client;
    private final AbortDelivery aborts;
    private final ObjectMapper json;
    private final long requestId;
    private final Duration stall;
    /**
     * Longest silence of the stream before the KV committed (heartbeats included) before it counts as broken; raised
     * to 25 of the process's heartbeats when it announces longer ones (at most the token stall limit).
     */
    private volatile long silenceNanos;
    private volatile long lastLineNanos = System.nanoTime();
    private final InputStream stream;
    private final CompletableFuture<Admitted> admission = new CompletableFuture<>();
    private final CompletableFuture<TransferOutcome> outcome = new CompletableFuture<>();
    private final LinkedBlockingQueue<Map.Entry<String, JsonNode>> events = new LinkedBlockingQueue<>();
    private volatile String lostBecause;
    private volatile boolean aborted;
    private volatile boolean ended;
    /** The stream's last event came: the process has ended the request; an abort has nothing left to tell it. */
    private volatile boolean finished;
    /** The abort's count of this stream as closing ({@link AbortDelivery#dropLater}), ended when the reader ends. */
    private volatile AbortDelivery.Closing closing;

    /**
     * How long after {@link #abort}, or after the stream's last event, a stream the process has not ended is dropped. Not at once: the JDK client may
     * already have put the connection back in its pool (the process ended the stream, the reader has not read that
     * far yet), and closing the stream then closes a pooled connection under the next request on it.
     */
    static final Duration DROP_AFTER = Duration.ofSeconds(1);

    private RemoteDecodeCall(RoleClient client, AbortDelivery aborts, ObjectMapper json, long requestId, Duration stall,
                             Duration silence, InputStream stream) {
        this.client = client;
        this.aborts = aborts;
        this.json = json;
        this.requestId = requestId;
        this.stall = stall;
        this.silenceNanos = silence.toNanos();
        this.stream = stream;
    }

    /** How many of decode's heartbeats a stream may miss before its KV committed before it counts as broken. */
    static final int SILENT_HEARTBEATS = 25;
    /** The shortest silence limit: 25 of the default 200 ms heartbeats. */
    static final Duration MIN_SILENCE = Duration.ofSeconds(5);

    /**
     * {@return how long a stream may stay silent before its KV committed: {@link #MIN_SILENCE}, or
     * {@link #SILENT_HEARTBEATS} of decode's heartbeats if those are longer, never more than {@code stall}}
     */
    static Duration silence(Duration heartbeat, Duration stall) {
        final Duration beats = heartbeat.multipliedBy(SILENT_HEARTBEATS);
        final Duration s = beats.compareTo(MIN_SILENCE) > 0 ? beats : MIN_SILENCE;
        return s.compareTo(stall) < 0 ? s : stall;
    }

    /** The silence limit when decode's heartbeat is not known: {@link #MIN_SILENCE}, at most {@code stall}. */
    static Duration defaultSilence(Duration stall) {
        return silence(Duration.ZERO, stall);
    }

    /** An admission refused because decode cannot be reached, or failed or lost the request. */
    private static Admitted unavailable(String msg) {
        return new Admitted(false, new Rejection(DecodeRole.ROLE, Rejection.Reason.UNAVAILABLE, msg, Map.of()));
    }

    /** {@link #open(RoleClient, ObjectMapper, AbortDelivery, long, String, int, int, Duration, Duration)} with an abort delivery of its own. */
    static RemoteDecodeCall open(RoleClient client, ObjectMapper json, long requestId, String tenant, int promptTokens,
                                 int maxNewTokens, Duration stall) {
        return open(client, json, new AbortDelivery(client, null), requestId, tenant, promptTokens, maxNewTokens, stall,
            defaultSilence(stall));
    }

    /**
     * @param stall   longest wait for the next token once generating
     * @param silence longest silence of the stream before the KV committed (the process writes a line every
     *                {@code --heartbeat-ms} while it waits)
     */
    static RemoteDecodeCall open(RoleClient client, ObjectMapper json, AbortDelivery aborts, long requestId, String tenant,
                                 int promptTokens, int maxNewTokens, Duration stall, Duration silence) {
        return open(client, json, aborts, requestId, tenant, promptTokens, maxNewTokens, 0, stall, silence);
    }

    /**
     * @param prefillInstance the prefill engine whose link decode must start the transfer on, or 0 for none named
     * @param stall           longest wait for the next token once generating
     * @param silence         longest silence of the stream before the KV committed
     */
    static RemoteDecodeCall open(RoleClient client, ObjectMapper json, AbortDelivery aborts, long requestId, String tenant,
                                 int promptTokens, int maxNewTokens, long prefillInstance, Duration stall, Duration silence) {
        final RemoteDecodeCall c = new RemoteDecodeCall(client, aborts, json, requestId, stall, silence, client.stream(
            "internal/decode", RoleJson.decodeRequest(requestId, tenant, promptTokens, maxNewTokens, prefillInstance)));
        Thread.ofVirtual().name("kvpool-decode-stream-" + requestId).start(c::read);
        return c;
    }

    private void read() {
        try (BufferedReader in = new BufferedReader(new InputStreamReader(stream, StandardCharsets.UTF_8))) {
            for (String line; (line = in.readLine()) != null; ) {
                lastLineNanos = System.nanoTime();
                if (!line.isBlank() && onEvent(json.readTree(line))) { // the last event: onEvent marked it finished
                    if (!admission.isDone() || !outcome.isDone()) { // a last event before the admission or the outcome
                        endWith(client.describe() + " ended request " + requestId + "'s stream with a last event before "
                            + (admission.isDone() ? "the transfer's outcome" : "its admission"), true);
                    }
                    // a process that never ends the stream after its last event keeps neither this thread nor the connection
                    CompletableFuture.delayedExecutor(DROP_AFTER.toMillis(), TimeUnit.MILLISECONDS).execute(this::dropUnlessEnded);
                    try {
                        while (in.readLine() != null) {
                            // the role ends the stream right after its last event: read to the end so the connection is reused
                        }
                    } catch (IOException dropped) {
                        // dropped after its last event: nothing was pending
                    }
                    return;
                }
            }
            lost("the stream ended before its last event");
        } catch (RuntimeException malformed) { // RoleJson's: JSON, but not what this router reads (another build, a bug)
            endWith(client.describe() + " sent request " + requestId + "'s stream a line this router cannot read: " + malformed, true);
        } catch (IOException e) { // Jackson's too: a line that is not JSON is most likely one cut short by a process that died
            // (the parser's message quotes the line: its bytes are no client's business)
            lost(e instanceof com.fasterxml.jackson.core.JacksonException ? "a line that is not JSON, as if cut short" : e.toString());
        } finally {
            ended = true;
            final AbortDelivery.Closing c = closing; // after ended: an abort that counted the stream either sees it or is seen
            if (c != null) {
                c.end();
            }
        }
    }

    /** @return whether this was the stream's last event */
    private boolean onEvent(JsonNode n) {
        final String event = RoleJson.text(n, "event");
        switch (event) {
            case "waiting" -> {
                if (n.has("heartbeat_ms")) { // the process's own --heartbeat-ms, which may be longer than this router's
                    final long beats = TimeUnit.MILLISECONDS.toNanos(Math.max(0, RoleJson.number(n, "heartbeat_ms"))) * SILENT_HEARTBEATS;
                    silenceNanos = Math.max(silenceNanos, Math.min(beats, stall.toNanos()));
                }
                return false;
            }
            case "admitted" -> admission.complete(Admitted.YES);
            // each last event marks the request finished before it wakes the router: the abort the router then sends for a
            // request that ended without a completion must find it finished, and tell the process nothing
            case "rejected" -> {
                final Rejection r = RoleJson.rejection(RoleJson.field(n, "rejection"));
                finished = true;
                admission.complete(new Admitted(false, r));
                outcome.complete(new TransferOutcome(false, "REJECTED", r.message()));
                return true;
            }
            case "transfer" -> {
                final boolean committed = RoleJson.bool(n, "committed");
                if (!committed) {
                    finished = true;
                }
                outcome.complete(committed ? TransferOutcome.COMMITTED
                    : new TransferOutcome(false, RoleJson.text(n, "failure"), RoleJson.text(n, "message"),
                        n.path("retry_later").asBoolean(false))); // absent from a decode of an older build
                return !committed;
            }
            case "error" -> {
                // the process failed the request: whatever the router still waits for ends now, not at its timeout
                final String msg = client.describe() + " failed request " + requestId + ": " + RoleJson.text(n, "message");
                final boolean unavailable = n.has("unavailable") && RoleJson.bool(n, "unavailable");
                finished = true;
                endWith(msg, !unavailable);
                return true;
            }
            case "token", "done" -> {
                if (event.equals("done")) {
                    finished = true;
                }
                events.add(Map.entry(event, n));
                return event.equals("done");
            }
            default -> throw new IllegalArgumentException("unknown event '" + event + "' in the decode stream");
        }
        return false;
    }

    private void lost(String why) {
        lostWith(lostMessage(why));
    }

    /** Ends whatever is still pending with {@code msg} (a {@link #lostMessage}), once: waiting may help (503). */
    private void lostWith(String msg) {
        endWith(msg, false);
    }

    /**
     * Ends whatever is still pending, once: a stream lost (the process is gone or closed under the call: 503 before the
     * commit), or with {@code fault} a fault of the process (the awaited future fails: 502 {@code role_error}). A call
     * that had committed learns it as a {@link RoleLostException} while it generates.
     */
    private synchronized void endWith(String msg, boolean fault) {
        if (aborted || lostBecause != null) {
            return; // we dropped the stream ourselves, or it was lost already (its silence, then the drop's exception)
        }
        lostBecause = msg;
        LOG.log(System.Logger.Level.WARNING, msg);
        if (fault) {
            final IllegalStateException e = new IllegalStateException(msg);
            admission.completeExceptionally(e);
            outcome.completeExceptionally(e);
        } else {
            admission.complete(unavailable(msg));
            outcome.complete(new TransferOutcome(false, "ROLE_LOST", msg));
        }
        events.add(Map.entry("lost", json.createObjectNode().put("message", msg)));
    }

    private String lostMessage(String why) {
        return client.describe() + ": the stream of request " + requestId + " broke: " + why;
    }

    @Override
    public Admitted awaitAdmission(Duration timeout) throws InterruptedException {
        final Admitted a = DecodeCall.await(admission, timeout, client.describe() + ": request " + requestId);
        return a != null || !lostToSilence(true) ? a : admission.getNow(null);
    }

    @Override
    public TransferOutcome awaitTransfer(Duration timeout) throws InterruptedException {
        final TransferOutcome o = DecodeCall.await(outcome, timeout, client.describe() + ": request " + requestId);
        return o != null || !lostToSilence(false) ? o : outcome.getNow(null);
    }

    /**
     * Ends the call as lost, and drops its stream, if the stream has been silent longer than the silence limit while
     * the router waits for admission or the transfer. Router's thread. The loss is decided by completing the awaited
     * future: a line the reader took meanwhile (the admission, the commit) wins, and then nothing is dropped.
     *
     * @param admissionPending whether the router waits for the admission, else for the transfer
     * @return whether it did
     */
    private boolean lostToSilence(boolean admissionPending) {
        final long silent = System.nanoTime() - lastLineNanos;
        if (ended || aborted || silent < silenceNanos) {
            return false;
        }
        final String msg = lostMessage("no line for " + TimeUnit.NANOSECONDS.toMillis(silent) + " ms before the KV committed "
            + "(the process writes one every heartbeat while it waits): the decode process stopped answering");
        final boolean won = admissionPending
            ? admission.complete(unavailable(msg))
            : outcome.complete(new TransferOutcome(false, "ROLE_LOST", msg));
        if (!won) {
            return false; // the line came after all
        }
        lostWith(msg);
        try {
            stream.close(); // the reader ends; a late line is read by nobody
        } catch (IOException ignored) {
            // dropping it
        }
        return true;
    }

    /**
     * Hands the streamed tokens to {@code sink} (the decode process generates as soon as the KV committed,
     * {@code maxTokens} as asked at start).
     *
     * @throws RoleLostException if the stream broke, the process failed the request, or no token came within the stall limit
     */
    @Override
    public Generation generate(int maxTokens, EchoDecoder.TokenSink sink) throws IOException, InterruptedException {
        final TransferOutcome o = outcome.getNow(null);
        if (o == null || !o.committed()) {
            if (aborted) {
                throw DecodeCall.abortedBeforeDecode(requestId);
            }
            throw new IllegalStateException("request " + requestId + " has no committed KV to decode (" + o + ")");
        }
        while (true) {
            final Map.Entry<String, JsonNode> e = events.poll(stall.toNanos(), TimeUnit.NANOSECONDS);
            if (e == null) {
                throw new RoleLostException(client.describe() + " sent no token of request " + requestId + " for " + stall.toMillis() + " ms");
            }
            final Generation done = onGenerationEvent(e.getKey(), e.getValue(), sink);
            if (done != null) {
                return done;
            }
        }
    }

    /** @return the generation a {@code done} event ends with, or {@code null} to read on; a malformed event is the role lost */
    private Generation onGenerationEvent(String kind, JsonNode n, EchoDecoder.TokenSink sink) throws IOException {
        try {
            switch (kind) {
                case "token" -> sink.token(RoleJson.text(n, "text"));
                case "done" -> {
                    return new Generation(RoleJson.text(n, "text"), (int) RoleJson.number(n, "completion_tokens"),
                        RoleJson.kv(RoleJson.field(n, "kv")));
                }
                case "aborted" -> throw new IOException("request " + requestId + " was aborted: " + RoleJson.text(n, "message"));
                default -> throw new RoleLostException(lostBecause);
            }
        } catch (IllegalArgumentException malformed) { // a decode of another build, or a broken one: as before the commit
            throw new RoleLostException(client.describe() + " sent a malformed '" + kind + "' event for request " + requestId
                + ": " + malformed.getMessage(), malformed);
        }
        return null;
    }

    /**
     * Tells the decode process (it aborts the transfer or stops generating) without waiting for it
     * ({@link AbortDelivery}), then drops the stream. Idempotent.
     */
    @Override
    public void abort(String why) {
        synchronized (this) { // the client's close and the request's own end may abort at once: one post, one drop
            if (aborted) {
                return;
            }
            aborted = true;
        }
        if (finished) { // the process ended the request itself (its last event came): nothing to tell it
            dropLaterUnlessEnded(); // but a process that never ends the stream after its last event does not keep the connection
            return;
        }
        events.add(Map.entry("aborted", json.createObjectNode().put("message", why))); // a generate() waiting ends now
        // so does a wait for admission or for the transfer (lost() stays silent once we dropped the stream)
        final String msg = "request " + requestId + " was aborted: " + why;
        admission.complete(unavailable(msg));
        outcome.complete(new TransferOutcome(false, "ABORTED", msg));
        aborts.send(requestId, why); // delivered (and retried) on its own thread: the caller does not wait for the role
        dropLaterUnlessEnded();
    }

    /**
     * Drops the stream {@link #DROP_AFTER} from now unless the reader read it to its end by then. A stream read to its end
     * already holds no connection (the client has it back, or closed it), so it is neither dropped nor counted as closing:
     * counting it would shrink the router's cap on requests for a second after every rejected or failed request.
     */
    private void dropLaterUnlessEnded() {
        if (!ended) {
            final AbortDelivery.Closing c = aborts.dropLater(DROP_AFTER, this::dropUnlessEnded);
            closing = c;
            if (ended) { // the reader ended it meanwhile, and may have looked for closing before it was set
                c.end();
            }
        }
    }

    /** @return whether the stream's last event came (for tests) */
    boolean finishedForTests() {
        return finished;
    }

    /** @return whether the reader read the stream to its end (or it broke) */
    boolean endedForTests() {
        return ended;
    }

    private void dropUnlessEnded() {
        if (ended) {
            return; // read to its end: the connection is whole, and may already carry another request
        }
        try {
            stream.close();
        } catch (IOException ignored) {
            // dropping it
        }
    }

    @Override
    public String toString() {
        return "RemoteDecodeCall[" + requestId + " at " + client.base() + (aborted ? ", aborted" : "") + "]";
    }
}
