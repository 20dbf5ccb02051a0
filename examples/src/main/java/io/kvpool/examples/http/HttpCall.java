package io.kvpool.examples.http;

import io.netty.buffer.Unpooled;
import io.netty.channel.Channel;
import io.netty.channel.ChannelFuture;
import io.netty.handler.codec.http.DefaultHttpContent;
import io.netty.handler.codec.http.DefaultFullHttpResponse;
import io.netty.handler.codec.http.DefaultHttpHeaders;
import io.netty.handler.codec.http.DefaultHttpResponse;
import io.netty.handler.codec.http.FullHttpResponse;
import io.netty.handler.codec.http.HttpHeaderNames;
import io.netty.handler.codec.http.HttpHeaderValues;
import io.netty.handler.codec.http.HttpHeaders;
import io.netty.handler.codec.http.HttpResponse;
import io.netty.handler.codec.http.HttpResponseStatus;
import io.netty.handler.codec.http.HttpVersion;
import io.netty.handler.codec.http.LastHttpContent;

import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.Objects;
import java.util.concurrent.Executor;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.locks.Condition;
import java.util.concurrent.locks.ReentrantLock;

/**
 * One request, read whole, and its answer. Used by the one handler thread the front started for it; only
 * {@link #clientGone} and {@link #onClientGone} may be called from other threads.
 *
 * <pre>
 *   OPEN ──respond()──────────────────────────────▶ ANSWERED
 *     └──startStream()──▶ STREAMING ──endStream()──▶ ANSWERED
 * </pre>
 * A second answer throws {@link IllegalStateException}. Once the client is gone every write throws
 * {@link IOException}; a write waits while the client reads nothing (Netty's write buffer is past its high
 * water mark) for at most the front's stall timeout, then closes the connection and throws.
 */
public final class HttpCall {

    private static final System.Logger LOG = System.getLogger("io.kvpool.examples.http");

    private enum State { OPEN, STREAMING, ANSWERED }

    private final Connection connection;
    private final Channel channel;
    private final String method;
    private final String uri;
    private final HttpHeaders requestHeaders;
    private final byte[] body;
    private final boolean keepAlive;
    /** The request was HTTP/1.0: a streamed answer cannot be chunked, so it ends with the connection. */
    private final boolean http10;
    /** A streamed answer without framing was started: the connection closes after it. */
    private volatile boolean endsWithConnection;
    /** Set by the handler thread as the answer's head is built; read on the event loop once it is on the wire. */
    private volatile boolean saidClose;
    private final long stallNanos;
    private final Executor listeners;
    private final HttpHeaders responseHeaders = new DefaultHttpHeaders();
    private final ReentrantLock lock = new ReentrantLock();
    private final Condition writableOrGone = lock.newCondition();
    private final List<Runnable> goneActions = new ArrayList<>(1); // guarded by lock
    private volatile boolean gone;
    private State state = State.OPEN;
    private boolean lastIssued; // the answer's last write was handed to Netty: its listener ends the call

    HttpCall(Connection connection, Channel channel, String method, String uri, HttpHeaders requestHeaders, byte[] body,
             boolean keepAlive, boolean http10, long stallNanos, Executor listeners) {
        this.connection = connection;
        this.channel = channel;
        this.method = method;
        this.uri = uri;
        this.requestHeaders = requestHeaders;
        this.body = body;
        this.keepAlive = keepAlive;
        this.http10 = http10;
        this.stallNanos = stallNanos;
        this.listeners = listeners;
    }

    /** @return the request method, as sent ({@code GET}, {@code POST} …) */
    public String method() {
        return method;
    }

    /** @return the request target's path, still percent-encoded, without the query */
    public String path() {
        final int q = uri.indexOf('?');
        return q < 0 ? uri : uri.substring(0, q);
    }

    /** @return the request target as sent (path and query); an absolute-form target ({@code http://host/a?b}) as its path and query */
    public String uri() {
        return uri;
    }

    /** @return the first value of request header {@code name} (any case), or {@code null} */
    public String header(String name) {
        return requestHeaders.get(name);
    }

    /** @return every value of request header {@code name} (any case), in order; empty for none */
    public List<String> headers(String name) {
        return requestHeaders.getAll(name);
    }

    /** @return the request body (empty for none); within the front's body limit */
    public byte[] body() {
        return body;
    }

    /** Sets a response header; before the answer. */
    public void setHeader(String name, String value) {
        responseHeaders.set(name, value);
    }

    /**
     * Answers with a whole body ({@code Content-Length}; none is sent for {@code HEAD}).
     *
     * @throws IOException           if the client is gone
     * @throws IllegalStateException if the call was answered already
     */
    public void respond(int status, String contentType, byte[] content) throws IOException {
        Objects.requireNonNull(content, "content");
        Objects.requireNonNull(contentType, "contentType");
        begin(State.ANSWERED);
        final boolean head = "HEAD".equals(method);
        final FullHttpResponse r = new DefaultFullHttpResponse(HttpVersion.HTTP_1_1, HttpResponseStatus.valueOf(status),
            head || content.length == 0 ? Unpooled.EMPTY_BUFFER : Unpooled.wrappedBuffer(content));
        headers(r, contentType);
        if (status != 204 && status != 304) { // RFC 9110 §8.6: neither carries a Content-Length
            r.headers().setInt(HttpHeaderNames.CONTENT_LENGTH, content.length);
        } else {
            r.headers().remove(HttpHeaderNames.CONTENT_TYPE);
        }
        last(channel.writeAndFlush(r));
    }

    /** Answers a JSON error in the documented shape ({@code {"error":{…}}}), with {@code Retry-After} when positive. */
    public void respondError(int status, String type, String reason, String message, Map<String, ?> fields, int retryAfterSeconds)
        throws IOException {
        if (retryAfterSeconds > 0) {
            setHeader("Retry-After", Integer.toString(retryAfterSeconds));
        }
        respond(status, "application/json", ErrorBodies.of(type, reason, message, fields));
    }

    /**
     * Sends the status and headers of a streamed answer ({@code Transfer-Encoding: chunked}; to an HTTP/1.0 request,
     * which knows no chunks, unframed, with {@code Connection: close}: the close ends it); then {@link #write} and
     * {@link #endStream}.
     *
     * @throws IOException           if the client is gone
     * @throws IllegalStateException if the call was answered already, or is a {@code HEAD} request (answer it with
     *                               {@link #respond}, which sends no body)
     */
    public void startStream(int status, String contentType) throws IOException {
        Objects.requireNonNull(contentType, "contentType");
        if ("HEAD".equals(method)) { // the encoder would frame a body the client does not read
            throw new IllegalStateException("a HEAD request is answered with respond(), not a stream");
        }
        begin(State.STREAMING);
        final HttpResponse r = new DefaultHttpResponse(HttpVersion.HTTP_1_1, HttpResponseStatus.valueOf(status));
        headers(r, contentType);
        if (http10) { // RFC 9112 §6.1: no Transfer-Encoding in an answer to HTTP/1.0
            endsWithConnection = true;
            r.headers().set(HttpHeaderNames.CONNECTION, HttpHeaderValues.CLOSE);
        } else {
            r.headers().set(HttpHeaderNames.TRANSFER_ENCODING, HttpHeaderValues.CHUNKED);
        }
        channel.writeAndFlush(r);
    }

    /**
     * Writes and flushes one piece of a streamed answer. Waits while the client reads nothing, at most the
     * stall timeout.
     *
     * @throws IOException           if the client is gone, or read nothing for the stall timeout (the connection is closed)
     * @throws IllegalStateException unless streaming
     */
    public void write(byte[] piece) throws IOException {
        if (state != State.STREAMING) {
            throw new IllegalStateException("write() needs startStream() first; state " + state);
        }
        awaitWritable();
        channel.writeAndFlush(new DefaultHttpContent(Unpooled.wrappedBuffer(piece)));
    }

    /** {@link #write} of a string's UTF-8 bytes. */
    public void write(String piece) throws IOException {
        write(piece.getBytes(StandardCharsets.UTF_8));
    }

    /**
     * Ends a streamed answer.
     *
     * @throws IOException           if the client is gone
     * @throws IllegalStateException unless streaming
     */
    public void endStream() throws IOException {
        if (state != State.STREAMING) {
            throw new IllegalStateException("endStream() needs startStream() first; state " + state);
        }
        throwIfGone();
        state = State.ANSWERED;
        last(channel.writeAndFlush(LastHttpContent.EMPTY_LAST_CONTENT));
    }

    /** @return whether an answer began (a status line went out, or is on its way) */
    public boolean answered() {
        return state != State.OPEN;
    }

    /** @return whether the connection closed: the client left, or the front closed it (seen without writing) */
    public boolean clientGone() {
        return gone;
    }

    /**
     * Runs {@code action} once the client is gone, on a thread of its own (at once if it is gone already).
     * The connection's close is noticed as it happens, without a write. Any thread.
     */
    public void onClientGone(Runnable action) {
        Objects.requireNonNull(action, "action");
        lock.lock();
        try {
            if (!gone) {
                goneActions.add(action);
                return;
            }
        } finally {
            lock.unlock();
        }
        run(action);
    }

    /** Runs {@code action} on the front's executor, or on a thread of its own once that is shut down. */
    private void run(Runnable action) {
        try {
            listeners.execute(action);
        } catch (java.util.concurrent.RejectedExecutionException stopped) {
            Thread.ofVirtual().name("kvpool-http-gone").start(action);
        }
    }

    /** The connection closed: wakes a waiting writer, runs the actions. Event loop. */
    void markGone() {
        final List<Runnable> run;
        lock.lock();
        try {
            if (gone) {
                return;
            }
            gone = true;
            run = List.copyOf(goneActions);
            goneActions.clear();
            writableOrGone.signalAll();
        } finally {
            lock.unlock();
        }
        for (Runnable r : run) {
            run(() -> {
                try {
                    r.run();
                } catch (RuntimeException e) {
                    LOG.log(System.Logger.Level.WARNING, "an action on a gone client failed", e);
                }
            });
        }
    }

    /** The channel's writability changed: wakes a waiting writer. Event loop. */
    void writabilityChanged() {
        lock.lock();
        try {
            writableOrGone.signalAll();
        } finally {
            lock.unlock();
        }
    }

    /**
     * After the handler returned: ends what it left open. A stream is ended, unless the handler failed or was
     * interrupted: a stream ended with its terminal chunk reads as complete, so that one is cut instead. A call never
     * answered gets a 500 (a handler must answer; this one did not) that names the failure by its error id only, never
     * by its text. Handler thread.
     *
     * @param failure what the handler threw, or {@code null}
     * @param errorId the id {@code failure} was logged under ({@link InternalErrors#log}), or {@code null} if it was not
     *                logged (its client is gone)
     */
    void finish(Throwable failure, String errorId) {
        try {
            switch (state) {
                case STREAMING -> {
                    if (failure != null || Thread.currentThread().isInterrupted()) {
                        throw new IOException("the handler of " + method + " " + path() + (failure != null ? " failed: " + failure
                            : " was interrupted") + " mid-stream");
                    }
                    endStream();
                }
                case OPEN -> {
                    if (failure == null) {
                        respondError(500, "server_error", "internal_error", "the handler of " + method + " " + path()
                            + " returned without an answer", Map.of(), 0);
                    } else {
                        // no id: the client left and the failure was not logged (Connection logs every other one)
                        final String id = errorId != null ? errorId : InternalErrors.nextId();
                        respondError(500, "server_error", "internal_error", InternalErrors.message(id), Map.of("error_id", id), 0);
                    }
                }
                case ANSWERED -> {
                    if (!lastIssued) { // an answer that failed between its start and its last write
                        throw new IOException("the answer of " + method + " " + path() + " was cut short");
                    }
                }
            }
        } catch (IOException | RuntimeException e) {
            LOG.log(System.Logger.Level.DEBUG, "ending " + method + " " + path() + " failed: " + e);
            connection.close(Connection.Close.CUT); // the answer is cut short: the connection cannot carry another request
            connection.answered(this);
        }
    }

    private void begin(State next) throws IOException {
        if (state != State.OPEN) {
            throw new IllegalStateException(method + " " + path() + " was answered already (" + state + ")");
        }
        throwIfGone();
        state = next;
    }

    private void headers(HttpResponse r, String contentType) {
        r.headers().set(responseHeaders);
        r.headers().set(HttpHeaderNames.CONTENT_TYPE, contentType);
        r.headers().set(HttpHeaderNames.DATE, date());
        // the front stopping: the last answer says so, so the client sends no more here; one with requests read before
        // the stop queued behind it does not, since they are still answered and nothing may follow an answer that
        // said close (requests read after the stop do not count: they would let a pipelining client go on for ever)
        if (!keepAlive || (!connection.frontAccepting() && connection.nothingQueuedFromBeforeTheStop())) {
            r.headers().set(HttpHeaderNames.CONNECTION, HttpHeaderValues.CLOSE);
            saidClose = true;
        } else if (http10) {
            // an HTTP/1.0 client keeps the connection only when the answer says so (RFC 9112 §9.3, RFC 1945 practice);
            // otherwise it reads until the close, and the connection idles to its timeout
            r.headers().set(HttpHeaderNames.CONNECTION, HttpHeaderValues.KEEP_ALIVE);
        }
    }

    /** @return now, as an answer's {@code Date} header says it (RFC 9110 §6.6.1: a server with a clock sends one) */
    static String date() {
        return io.netty.handler.codec.DateFormatter.format(new java.util.Date());
    }

    /** The answer's last write: when it is on the wire, the connection takes its next request (or closes). */
    private void last(ChannelFuture f) {
        lastIssued = true;
        connection.armStall(f);
        f.addListener(done -> connection.answered(this));
    }

    /** @return whether the connection stays open after this answer */
    boolean keepAlive() {
        return keepAlive && !endsWithConnection;
    }

    /** @return whether this call's answer said {@code Connection: close} (then nothing more is answered on its connection) */
    boolean saidClose() {
        return saidClose;
    }

    private void throwIfGone() throws IOException {
        if (gone || !channel.isActive()) {
            throw new IOException("the client closed the connection");
        }
    }

    private void awaitWritable() throws IOException {
        throwIfGone();
        if (channel.isWritable()) {
            return;
        }
        lock.lock();
        try {
            long left = stallNanos;
            while (!gone && !channel.isWritable()) {
                if (left <= 0) {
                    connection.close(Connection.Close.CUT);
                    throw new IOException("the client read nothing for " + TimeUnit.NANOSECONDS.toMillis(stallNanos)
                        + " ms (the stall timeout) with " + channel.bytesBeforeWritable() + " bytes waiting; closed");
                }
                left = writableOrGone.awaitNanos(left);
            }
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            throw new IOException("interrupted while the client read nothing", e);
        } finally {
            lock.unlock();
        }
        throwIfGone();
    }
}
