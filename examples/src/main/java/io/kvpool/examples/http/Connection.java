package io.kvpool.examples.http;

import io.netty.buffer.ByteBuf;
import io.netty.buffer.Unpooled;
import io.netty.channel.Channel;
import io.netty.channel.ChannelFuture;
import io.netty.channel.ChannelFutureListener;
import io.netty.channel.ChannelHandlerContext;
import io.netty.channel.ChannelInboundHandlerAdapter;
import io.netty.channel.ChannelOutboundBuffer;
import io.netty.handler.codec.DecoderResult;
import io.netty.handler.codec.http.DefaultFullHttpResponse;
import io.netty.handler.codec.http.FullHttpResponse;
import io.netty.handler.codec.http.HttpContent;
import io.netty.handler.codec.http.HttpHeaderNames;
import io.netty.handler.codec.http.HttpHeaderValues;
import io.netty.handler.codec.http.HttpMethod;
import io.netty.handler.codec.http.HttpRequest;
import io.netty.handler.codec.http.HttpResponseStatus;
import io.netty.handler.codec.http.HttpUtil;
import io.netty.handler.codec.http.HttpVersion;
import io.netty.handler.codec.http.LastHttpContent;
import io.netty.handler.codec.http.TooLongHttpHeaderException;
import io.netty.handler.codec.http.TooLongHttpLineException;
import io.netty.util.ReferenceCountUtil;
import io.netty.util.concurrent.ScheduledFuture;

import java.util.ArrayDeque;
import java.util.Arrays;
import java.util.LinkedHashMap;
import java.util.Map;
import java.util.concurrent.Executor;
import java.util.concurrent.TimeUnit;

/**
 * One client connection: reads requests whole, hands them to the handler one at a time, and enforces the
 * {@link HttpLimits}. Everything here runs on the connection's event loop, except {@link #answered} (any thread).
 *
 * <pre>
 *   reading:  NONE ──first byte──▶ HEAD ──head decoded──▶ BODY ──last content──▶ NONE   (the call is queued;
 *             (not CR or LF)                                                   HEAD if the decoder holds the next head)
 *                                    │ over a limit, malformed, too slow             │ body over the limit
 *                                    ▼                                               ▼
 *                                 REFUSED (error sent, then close)             DISCARD (413 sent; body read and
 *                                                                                  dropped, then close)
 *   refusals: an error found while a call is with the handler waits for the calls before it to be answered
 *             (HTTP/1.1 answers in order), then goes out; reading stops taking requests the moment it is found,
 *             and more than DRAIN_LIMIT bytes read while it waits close the connection (PIPELINE).
 *   busy:     a call is with the handler; the next queued call starts when its answer is on the wire.
 *   stopping: the requests read before the stop are answered; the answer with none of them queued behind it
 *             says {@code Connection: close}, and after an answer that said it nothing more is answered (RFC 9112
 *             §9.6): the connection closes, and a request read after the stop is the client's to send elsewhere.
 *             (A request read after the stop behind an answer that did not say close, because its head was
 *             built before the stop, is answered, saying close.) So a client that keeps pipelining cannot hold
 *             a connection open through the stop: at most the requests queued at the stop are answered first.
 *   timers:   none while busy; HEAD: the head's deadline (408); BODY: the whole body within the idle timeout
 *             of its head, or of its 100 Continue when that waited for the answer before it (408); NONE: idle
 *             between requests (close, nothing to answer).
 *   queued:   at most MAX_QUEUED pipelined requests and maxBodyBytes of their bodies behind the call in
 *             progress (beyond: close). Reading never stops: that is how a client's close is seen at once.
 * </pre>
 * A close from either side marks the call in progress gone ({@link HttpCall#markGone}) at once: the handler
 * learns it without writing.
 */
final class Connection {

    private static final System.Logger LOG = System.getLogger("io.kvpool.examples.http");

    /** Most bytes of a refused body read and dropped before the close, so the client reads its 413 instead of a reset. */
    static final long DRAIN_LIMIT = 64L << 20;
    /** How long a refused body is drained at most. */
    private static final long DRAIN_NANOS = TimeUnit.SECONDS.toNanos(2);
    /** Most requests a client may pipeline behind the one in progress. */
    static final int MAX_QUEUED = 16;

    private enum Reading { NONE, HEAD, BODY, REFUSED, DISCARD }

    /** RFC 9110 §7.2 / RFC 3986 §3.2.2: uri-host [ ":" port ], the host an IP-literal or a reg-name (possibly empty). */
    private static final java.util.regex.Pattern VALID_HOST =
        java.util.regex.Pattern.compile("(\\[[0-9A-Fa-f:.vV]+]|[A-Za-z0-9\\-._~%!$&'()*+,;=]*)(:[0-9]*)?");

    /** Why the server closed a connection (a client's own close is {@link #CLIENT}). */
    enum Close {
        /** the client closed it, or it broke */
        CLIENT,
        /** the request said {@code Connection: close}, or HTTP/1.0 without keep-alive */
        REQUESTED,
        /** idle between requests for the idle timeout */
        IDLE,
        /** after an error the front answered itself (431, 414, 413, 408, 400, 505) */
        REFUSED,
        /** an answer cut short: the client left, read nothing for the stall timeout, or the handler failed mid-answer */
        CUT,
        /**
         * more than {@link #MAX_QUEUED} pipelined requests, more than the body limit of their bodies, or more than
         * {@link #DRAIN_LIMIT} bytes sent behind a refusal that waits for a call in progress
         */
        PIPELINE,
        /** an exception in the connection's pipeline */
        FAILED,
        /** the front is stopping */
        STOPPING
    }

    private final HttpFront front;
    private final Channel channel;
    private final RequestDecoder decoder;
    private final HttpLimits limits;
    private final Executor executor;
    private final ArrayDeque<HttpCall> queued = new ArrayDeque<>();
    /**
     * How many of the queued calls were read before the front stopped: a prefix of the queue, since a front that
     * stopped never accepts again. Written on the event loop, read by handler threads ({@link #nothingQueuedFromBeforeTheStop}).
     */
    private volatile int queuedBeforeStop;
    /** {@code queued.size()}, for {@link HttpFront#queuedRequests()}; written on the event loop. */
    private volatile int queuedCalls;

    private Reading reading = Reading.NONE;
    /**
     * Whether a request whose head was read before the front stopped is still arriving (its body), counted in the
     * front's {@link HttpFront#requestsArriving()}: written on the event loop, read by handler threads.
     */
    private volatile boolean arrivalCounted;
    private HttpCall current;
    private ScheduledFuture<?> timer;
    private long headDeadline;      // 0: not started (a head that began while busy gets its deadline when the call ends)
    private long lastActivity;
    private long bodyStarted;
    private long queuedBytes;
    private boolean closed;
    private Close closeReason;

    private HttpRequest head;
    /** The body being read expects a 100 Continue that waits for the answer in progress. */
    private boolean continuePending;
    /**
     * The request being read is a HEAD: the front's own answer to it carries no body. Known once its head is decoded: a
     * 408 for a head that never completed carries its body, and the connection closes after it.
     */
    private boolean headMethod;
    private byte[] body;
    private int bodyLength;
    private long drained;
    private boolean refusalOnWire;
    private boolean drainDone;
    private FullHttpResponse deferred; // a refusal waiting for the calls before it (see "refusals" above)

    Connection(HttpFront front, Channel channel, RequestDecoder decoder, HttpLimits limits, Executor executor) {
        this.front = front;
        this.channel = channel;
        this.decoder = decoder;
        this.limits = limits;
        this.executor = executor;
        this.lastActivity = System.nanoTime();
        rearm();
    }

    /** Before the HTTP codec: notes when a request's first byte arrives. */
    final class Wire extends ChannelInboundHandlerAdapter {
        @Override
        public void channelRead(ChannelHandlerContext ctx, Object msg) {
            // blank lines between requests are no head, and no activity: a trickle of them must not keep the connection
            final boolean between = reading == Reading.NONE && msg instanceof ByteBuf;
            final boolean headStarts = between && RequestDecoder.startsRequest((ByteBuf) msg);
            if (!between || headStarts) {
                lastActivity = System.nanoTime();
            }
            if (headStarts) {
                reading = Reading.HEAD;
                headDeadline = current == null ? lastActivity + limits.headerTimeout().toNanos() : 0;
                rearm();
            }
            if ((reading == Reading.DISCARD || reading == Reading.REFUSED) && msg instanceof ByteBuf b) {
                drained += b.readableBytes(); // counted before the codec: its chunks may be held back
                if (deferred != null && drained > DRAIN_LIMIT) {
                    // a refusal waiting for a long call must not let the client stream on for as long as it lasts
                    LOG.log(System.Logger.Level.DEBUG, () -> "connection " + channel.remoteAddress() + ": " + drained
                        + " bytes sent behind a refusal waiting for a call in progress; closed");
                    ReferenceCountUtil.release(msg);
                    close(Close.PIPELINE);
                    return;
                }
            }
            ctx.fireChannelRead(msg);
        }
    }

    /** After the HTTP codec: requests, the close, writability. */
    final class Messages extends ChannelInboundHandlerAdapter {
        @Override
        public void channelRead(ChannelHandlerContext ctx, Object msg) {
            try {
                if (msg instanceof HttpRequest r) {
                    onHead(r);
                }
                if (msg instanceof HttpContent c) {
                    onContent(c);
                }
            } finally {
                ReferenceCountUtil.release(msg);
            }
        }

        @Override
        public void channelInactive(ChannelHandlerContext ctx) {
            closed = true;
            arrivalEnded();
            LOG.log(System.Logger.Level.TRACE, () -> "connection " + channel.remoteAddress() + " closed ("
                + (closeReason == null ? "by the client" : closeReason) + "), a call " + (current == null ? "not " : "") + "in progress, "
                + queued.size() + " queued, reading " + reading);
            front.connectionClosed(closeReason == null ? Close.CLIENT : closeReason);
            cancelTimer();
            if (current != null) {
                current.markGone();
            }
            front.callsDequeued(queued.size()); // never started: the stop waits for them no more
            queued.clear();
            queuedCalls = 0;
            queuedBeforeStop = 0;
            queuedBytes = 0;
            if (deferred != null) {
                ReferenceCountUtil.release(deferred);
                deferred = null;
            }
            ctx.fireChannelInactive();
        }

        @Override
        public void channelWritabilityChanged(ChannelHandlerContext ctx) {
            if (current != null) {
                current.writabilityChanged();
            }
            ctx.fireChannelWritabilityChanged();
        }

        @Override
        public void exceptionCaught(ChannelHandlerContext ctx, Throwable cause) {
            LOG.log(System.Logger.Level.DEBUG, "connection " + channel.remoteAddress() + " failed: " + cause);
            close(cause instanceof java.io.IOException ? Close.CLIENT : Close.FAILED); // a reset or a broken pipe is the client's
        }
    }

    private void onHead(HttpRequest r) {
        if (reading == Reading.REFUSED || reading == Reading.DISCARD) {
            return;
        }
        headMethod = HttpMethod.HEAD.equals(r.method()); // a head that failed to decode says GET unless its line was read
        final DecoderResult result = r.decoderResult();
        if (result.isFailure()) {
            final Throwable cause = result.cause();
            if (cause instanceof TooLongHttpHeaderException) {
                refuse(431, "invalid_request_error", "header_too_large", "request header fields exceed "
                    + limits.maxHeaderBytes() + " bytes", Map.of("max_header_bytes", limits.maxHeaderBytes()));
            } else if (cause instanceof TooLongHttpLineException) {
                refuse(414, "invalid_request_error", "request_line_too_long", "request line exceeds "
                    + HttpLimits.MAX_REQUEST_LINE_BYTES + " bytes", Map.of("max_request_line_bytes", HttpLimits.MAX_REQUEST_LINE_BYTES));
            } else {
                refuse(400, "invalid_request_error", "malformed_http", "malformed HTTP request: " + cause.getMessage(), Map.of());
            }
            return;
        }
        if (r.protocolVersion().majorVersion() != 1) {
            refuse(505, "invalid_request_error", "http_version_not_supported", "HTTP version " + r.protocolVersion()
                + " is not supported; use HTTP/1.1", Map.of());
            return;
        }
        final java.util.List<String> hostLines = r.headers().getAll(HttpHeaderNames.HOST);
        final int hosts = hostLines.size();
        // RFC 9112 §3.2: a server MUST answer 400 to an HTTP/1.1 request without Host, to ANY request with more than one
        // Host line, and to one whose Host is not a valid host[:port]
        if (hosts > 1 || (r.protocolVersion().minorVersion() == 1 && hosts == 0)) {
            refuse(400, "invalid_request_error", hosts == 0 ? "missing_host" : "duplicate_host", "a request carries at most "
                + "one Host header, an HTTP/1.1 request exactly one; this one has " + hosts, Map.of());
            return;
        }
        if (hosts == 1 && !VALID_HOST.matcher(hostLines.get(0)).matches()) {
            refuse(400, "invalid_request_error", "invalid_host", "the Host header is not a valid host[:port]", Map.of());
            return;
        }
        final long declared;
        try {
            declared = HttpUtil.getContentLength(r, -1L);
        } catch (NumberFormatException e) {
            refuse(400, "invalid_request_error", "bad_content_length", "Content-Length is not a number: "
                + r.headers().get(HttpHeaderNames.CONTENT_LENGTH), Map.of());
            return;
        }
        head = r;
        headDeadline = 0;
        if (declared > limits.maxBodyBytes()) {
            tooLarge(declared);
            return;
        }
        reading = Reading.BODY;
        if (front.accepting()) { // a head read after the stop is answered if it completes, but does not hold the stop
            arrivalStarted();
        }
        bodyStarted = System.nanoTime();
        body = new byte[(int) Math.max(0, Math.min(declared, 1 << 16))];
        bodyLength = 0;
        if (HttpUtil.is100ContinueExpected(r) && front.accepting()) { // stopping: no upload invited for a 503
            if (current == null) {
                sendContinue();
            } else {
                continuePending = true; // behind the answer in progress: HTTP/1.1 answers in order (next())
            }
        }
        rearm();
    }

    private void onContent(HttpContent c) {
        if (reading == Reading.DISCARD) {
            if (c instanceof LastHttpContent || drained > DRAIN_LIMIT) {
                drainDone = true;
                closeWhenDrained();
            }
            return;
        }
        if (reading != Reading.BODY) {
            return;
        }
        if (c.decoderResult().isFailure()) {
            if (c.decoderResult().cause() instanceof TooLongHttpHeaderException) { // the trailer section: header fields too
                refuse(431, "invalid_request_error", "header_too_large", "request trailer fields exceed "
                    + limits.maxHeaderBytes() + " bytes", Map.of("max_header_bytes", limits.maxHeaderBytes()));
                return;
            }
            refuse(400, "invalid_request_error", "malformed_body", "malformed request body: " + c.decoderResult().cause().getMessage(), Map.of());
            return;
        }
        final ByteBuf b = c.content();
        final int n = b.readableBytes();
        if ((long) bodyLength + n > limits.maxBodyBytes()) {
            tooLarge(-1);
            return;
        }
        if (bodyLength + n > body.length) {
            body = Arrays.copyOf(body, (int) Math.min(limits.maxBodyBytes(), Math.max((long) body.length * 2, bodyLength + n)));
        }
        b.readBytes(body, bodyLength, n);
        bodyLength += n;
        if (c instanceof LastHttpContent) {
            final HttpCall call = new HttpCall(this, channel, head.method().name(), RequestDecoder.originForm(head.uri()), head.headers(),
                bodyLength == body.length ? body : Arrays.copyOf(body, bodyLength), HttpUtil.isKeepAlive(head),
                head.protocolVersion().minorVersion() == 0,
                limits.stallTimeout().toNanos(), executor);
            head = null;
            body = null;
            headMethod = false;
            continuePending = false; // the body came without it
            reading = Reading.NONE;
            if (decoder.holdsRequestBytes()) {
                // the next head began in the read that ended this request: no later read may come to start its timer
                // (Wire); its deadline starts when the call queued here is answered, as for a head read while busy
                reading = Reading.HEAD;
                headDeadline = 0;
            }
            if (queued.size() >= MAX_QUEUED || (current != null && queuedBytes + call.body().length > limits.maxBodyBytes())) {
                LOG.log(System.Logger.Level.DEBUG, "connection " + channel.remoteAddress() + " pipelined more than " + MAX_QUEUED + " requests; closed");
                close(Close.PIPELINE);
                return;
            }
            queued.add(call);
            front.callQueued(); // before the arrival ends: a graceful stop never sees it in neither count
            queuedCalls = queued.size();
            if (front.accepting() || arrivalCounted) { // its head came before the stop
                queuedBeforeStop++; // plain read-modify-write: only the event loop writes it
            }
            queuedBytes += call.body().length;
            arrivalEnded(); // before next() starts it: its handler must see the arrival over (an answer may say close)
            next();
        }
    }

    /** Invites the body of the request being read: {@code 100 Continue}. */
    private void sendContinue() {
        channel.writeAndFlush(new DefaultFullHttpResponse(HttpVersion.HTTP_1_1, HttpResponseStatus.CONTINUE));
    }

    /** Starts the next queued call unless one is with the handler. */
    private void next() {
        if (current != null || closed || !channel.isActive()) { // closing: a queued call would start on a dead channel
            rearm();
            return;
        }
        final HttpCall call = queued.poll();
        if (call == null) {
            if (deferred != null) {
                final FullHttpResponse r = deferred;
                deferred = null;
                write(r);
                return;
            }
            if (!front.accepting() && !arrivalCounted) {
                close(Close.STOPPING); // the front is stopping and nothing is left to answer here
            }
            // its turn: invite the body now. Also while stopping: its head came before the stop (the flag is set only while
            // accepting), so the stop waits to answer it, and a client that waits for the 100 would never send its body
            if (continuePending && reading == Reading.BODY) {
                continuePending = false;
                bodyStarted = System.nanoTime(); // the client starts its body now, not when its head came
                sendContinue();
            }
            rearm();
            return;
        }
        queuedCalls = queued.size();
        if (queuedBeforeStop > 0) { // the head of the queue is one of them
            queuedBeforeStop--;
        }
        queuedBytes -= call.body().length;
        current = call;
        LOG.log(System.Logger.Level.TRACE, () -> "connection " + channel.remoteAddress() + ": " + call.method() + " " + call.uri());
        cancelTimer();
        front.callStarted();
        front.callsDequeued(1); // after it counts as started: a graceful stop never sees it in neither count
        executor.execute(() -> {
            Throwable failure = null;
            String errorId = null;
            try {
                front.handler().handle(call);
            } catch (Throwable e) {
                failure = e;
                if (!(e instanceof java.io.IOException) || !(call.clientGone() || !channel.isActive())) {
                    errorId = InternalErrors.log(LOG, call.method() + " " + call.path(), e);
                }
            } finally {
                call.finish(failure, errorId);
            }
        });
    }

    /** The answer of {@code call} is on the wire (or failed): the next request may start. Any thread. */
    void answered(HttpCall call) {
        if (!channel.eventLoop().inEventLoop()) {
            channel.eventLoop().execute(() -> answered(call));
            return;
        }
        if (current != call) {
            return; // already done
        }
        current = null;
        lastActivity = System.nanoTime();
        try {
            if (!call.keepAlive()) {
                close(Close.REQUESTED);
                return;
            }
            if (call.saidClose()) { // the front is stopping and said so: nothing more on this connection (RFC 9112 §9.6)
                close(Close.STOPPING);
                return;
            }
            next(); // a head begun while the call ran gets its deadline from rearm() once no call runs; stopping: the
                    // requests already read are still answered (the router says 503 server_draining), the last saying close
        } finally {
            front.callEnded(); // after next() started the queued call, if any: a graceful stop never sees none between
        }
    }

    /**
     * Closes the connection if {@code f} (an answer's last write) is not on the wire in time: the stall timeout, plus
     * what is still queued for the client at the minimum read rate ({@link HttpLimits#lastWriteNanos}). Any thread.
     */
    void armStall(ChannelFuture f) {
        // on the event loop, after the write task queued before this one: the queue then holds what the socket did
        // not take, which is what the client still has to read before f can complete
        channel.eventLoop().execute(() -> {
            if (f.isDone()) {
                return;
            }
            final ChannelOutboundBuffer queue = channel.unsafe().outboundBuffer();
            final long queued = queue == null ? 0 : queue.totalPendingWriteBytes();
            final long nanos = limits.lastWriteNanos(queued);
            final ScheduledFuture<?> stall = channel.eventLoop().schedule(() -> {
                if (!f.isDone()) {
                    LOG.log(System.Logger.Level.DEBUG, () -> "connection " + channel.remoteAddress() + ": answer not read within "
                        + TimeUnit.NANOSECONDS.toMillis(nanos) + " ms (stall timeout, and " + queued + " bytes at "
                        + limits.minReadRate() + " bytes/s); closed");
                    close(Close.CUT);
                }
            }, nanos, TimeUnit.NANOSECONDS);
            f.addListener(done -> stall.cancel(false));
        });
    }

    /**
     * Closes the connection between requests (nothing in progress, nothing queued, no request arriving whose head was
     * read); the front's graceful stop. A request whose head was read before the stop is read and answered (its
     * answer says close), within the body timeout.
     */
    void closeIfIdle() {
        // a refusal being written or drained closes itself (REFUSED, DISCARD): cut now, its client could read a reset
        if (current == null && queued.isEmpty() && !arrivalCounted && reading != Reading.REFUSED && reading != Reading.DISCARD) {
            close(Close.STOPPING);
        }
    }

    /** @return whether the front still takes requests (an answer says {@code Connection: close} once it does not) */
    boolean frontAccepting() {
        return front.accepting();
    }

    /**
     * @return whether no request read before the front stopped waits behind the call in progress (any thread; one
     *         read right after it stopped may be missed, and is then not answered if the answer being written says
     *         close)
     */
    boolean nothingQueuedFromBeforeTheStop() {
        // the flag first: the event loop counts the request in queuedBeforeStop before it clears the flag
        return !arrivalCounted && queuedBeforeStop == 0;
    }

    /** @return requests queued behind the call in progress now (any thread) */
    int queuedRequests() {
        return queuedCalls;
    }

    private void tooLarge(long declared) {
        final Map<String, Object> f = new LinkedHashMap<>();
        f.put("max_body_bytes", limits.maxBodyBytes());
        if (declared >= 0) {
            f.put("content_length", declared);
        }
        drainDone = false;
        send(413, "request_too_large", "body_too_large", "request body " + (declared >= 0 ? "of " + declared + " bytes " : "")
            + "exceeds the limit of " + limits.maxBodyBytes() + " bytes", f);
        reading = Reading.DISCARD;
        drained = 0;
        arrivalEnded(); // the refusal is answered and the connection closes: nothing more to wait for
    }

    private void closeWhenDrained() {
        if (drainDone && refusalOnWire) {
            close(Close.REFUSED);
        }
    }

    /** Answers an error the front found itself and closes the connection once it is on the wire. */
    private void refuse(int status, String type, String reason, String message, Map<String, ?> fields) {
        drainDone = true; // nothing to drain: close as soon as the answer is on the wire
        send(status, type, reason, message, fields);
        reading = Reading.REFUSED;
        drained = 0; // what follows is dropped; counted only to bound a refusal that waits
        arrivalEnded();
    }

    /** A request's head was read: counted in the front's {@link HttpFront#requestsArriving()} until it is queued or refused. */
    private void arrivalStarted() {
        if (!arrivalCounted && !closed) {
            arrivalCounted = true;
            front.arrivalStarted();
        }
    }

    /** The request that was arriving is queued (or started), refused, or gone with the connection. */
    private void arrivalEnded() {
        if (arrivalCounted) {
            arrivalCounted = false;
            front.arrivalEnded();
        }
    }

    /** Sends the front's own error now, or after the calls before it when one is with the handler. */
    private void send(int status, String type, String reason, String message, Map<String, ?> fields) {
        cancelTimer();
        head = null;
        body = null;
        final byte[] json = ErrorBodies.of(type, reason, message, fields);
        final FullHttpResponse r = new DefaultFullHttpResponse(HttpVersion.HTTP_1_1, HttpResponseStatus.valueOf(status),
            headMethod ? Unpooled.EMPTY_BUFFER : Unpooled.wrappedBuffer(json)); // RFC 9110 §9.3.2: no body to HEAD
        r.headers().set(HttpHeaderNames.CONTENT_TYPE, "application/json");
        r.headers().setInt(HttpHeaderNames.CONTENT_LENGTH, json.length);
        r.headers().set(HttpHeaderNames.CONNECTION, HttpHeaderValues.CLOSE);
        r.headers().set(HttpHeaderNames.DATE, HttpCall.date());
        front.refusedRequest();
        if (current != null) {
            // Its answer may even be on the wire already, with answered() still to run; closing now would cut
            // that answer or leave this request unanswered.
            LOG.log(System.Logger.Level.TRACE, () -> "connection " + channel.remoteAddress() + ": " + status + " " + reason
                + " waits for the " + (queued.size() + 1) + " calls before it");
            deferred = r;
            return;
        }
        write(r);
    }

    private void write(FullHttpResponse r) {
        cancelTimer();
        if (!drainDone) {
            // the client is still sending: read and drop up to DRAIN_LIMIT (or 2 s) so that it reads the 413, not a reset
            timer = channel.eventLoop().schedule(() -> {
                drainDone = true;
                closeWhenDrained();
            }, DRAIN_NANOS, TimeUnit.NANOSECONDS);
        }
        final ChannelFuture f = channel.writeAndFlush(r);
        armStall(f);
        f.addListener((ChannelFutureListener) done -> {
            refusalOnWire = true;
            closeWhenDrained();
        });
    }

    /** Closes the connection for {@code why} (the first reason given is the one counted). Any thread. */
    void close(Close why) {
        if (!channel.eventLoop().inEventLoop()) {
            channel.eventLoop().execute(() -> close(why));
            return;
        }
        if (why != Close.CLIENT && closeReason == null && !closed && channel.isActive()) { // inactive: the client closed it
            closeReason = why;
            LOG.log(System.Logger.Level.DEBUG, () -> "connection " + channel.remoteAddress() + " closed by the server: " + why);
        }
        channel.close();
    }

    /** Sets the one timer that applies now (see the class comment). */
    private void rearm() {
        if (reading == Reading.REFUSED || reading == Reading.DISCARD) {
            return; // the refusal's own close (and the drain's timer) apply
        }
        cancelTimer();
        if (closed || current != null) {
            return;
        }
        final long now = System.nanoTime();
        final long delay;
        switch (reading) {
            case NONE -> delay = lastActivity + limits.idleTimeout().toNanos() - now;
            case BODY -> delay = bodyStarted + limits.idleTimeout().toNanos() - now;
            case HEAD -> {
                if (headDeadline == 0) {
                    headDeadline = now + limits.headerTimeout().toNanos();
                }
                delay = headDeadline - now;
            }
            default -> {
                return;
            }
        }
        timer = channel.eventLoop().schedule(this::expired, Math.max(0, delay), TimeUnit.NANOSECONDS);
    }

    private void expired() {
        timer = null;
        if (closed || current != null) {
            return;
        }
        final long now = System.nanoTime();
        switch (reading) {
            case NONE -> {
                if (now - lastActivity >= limits.idleTimeout().toNanos()) {
                    close(Close.IDLE); // idle between requests: nothing to answer
                } else {
                    rearm();
                }
            }
            case BODY -> {
                if (now - bodyStarted >= limits.idleTimeout().toNanos()) {
                    refuse(408, "timeout", "body_timeout", "request body not complete within " + limits.idleTimeout().toMillis()
                        + " ms of its head (the idle timeout)", Map.of("idle_timeout_ms", limits.idleTimeout().toMillis()));
                } else {
                    rearm();
                }
            }
            case HEAD -> refuse(408, "timeout", "header_timeout", "request head not complete within "
                + limits.headerTimeout().toMillis() + " ms of its first byte", Map.of("header_timeout_ms", limits.headerTimeout().toMillis()));
            default -> {
            }
        }
    }

    private void cancelTimer() {
        if (timer != null) {
            timer.cancel(false);
            timer = null;
        }
    }
}
