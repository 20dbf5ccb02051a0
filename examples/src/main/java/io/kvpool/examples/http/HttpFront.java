package io.kvpool.examples.http;

import io.netty.bootstrap.ServerBootstrap;
import io.netty.channel.Channel;
import io.netty.channel.ChannelInitializer;
import io.netty.channel.ChannelOption;
import io.netty.channel.EventLoopGroup;
import io.netty.channel.MultiThreadIoEventLoopGroup;
import io.netty.channel.WriteBufferWaterMark;
import io.netty.channel.group.ChannelGroup;
import io.netty.channel.group.DefaultChannelGroup;
import io.netty.channel.nio.NioIoHandler;
import io.netty.channel.socket.SocketChannel;
import io.netty.channel.socket.nio.NioServerSocketChannel;
import io.netty.handler.codec.http.HttpDecoderConfig;
import io.netty.handler.codec.http.HttpResponseEncoder;
import io.netty.util.AttributeKey;
import io.netty.util.concurrent.GlobalEventExecutor;

import java.io.IOException;
import java.net.BindException;
import java.net.InetSocketAddress;
import java.net.URI;
import java.time.Duration;
import java.util.Objects;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.LongAdder;

/**
 * An HTTP/1.1 server on Netty: two event-loop threads read and write every connection; each request, once read
 * whole, is handed to the {@link HttpHandler} on a virtual thread of its own, so handlers may block. The front
 * enforces the {@link HttpLimits} itself (431, 414, 413, 408, 400 for a malformed request or chunk, each a JSON
 * error in the documented shape) and notices a client that closes its connection as it happens
 * ({@link HttpCall#onClientGone}), without writing to it.
 *
 * <p>{@link #start} either returns a listening front or leaves no port bound and no thread running.
 * {@link #stopListening} is the graceful half of a shutdown, {@link #close} the rest; both are idempotent.
 */
public final class HttpFront implements AutoCloseable {

    private static final System.Logger LOG = System.getLogger("io.kvpool.examples.http");
    private static final AttributeKey<Connection> CONNECTION = AttributeKey.valueOf("kvpool.connection");
    /** Write buffer past which {@link HttpCall#write} waits for the client to read (Netty's writability). */
    private static final WriteBufferWaterMark WATER_MARK = new WriteBufferWaterMark(32 << 10, 64 << 10);

    private final String host;
    private final HttpLimits limits;
    private final HttpHandler handler;
    private final EventLoopGroup acceptor = new MultiThreadIoEventLoopGroup(1, NioIoHandler.newFactory());
    private final EventLoopGroup workers = new MultiThreadIoEventLoopGroup(2, NioIoHandler.newFactory());
    private final ExecutorService executor = Executors.newVirtualThreadPerTaskExecutor();
    /** Test hook: what connections accepted from now hand their calls to, given the handlers' executor. */
    volatile java.util.function.UnaryOperator<java.util.concurrent.Executor> handlerExecutor = e -> e;
    private final ChannelGroup connections = new DefaultChannelGroup(GlobalEventExecutor.INSTANCE);
    private final AtomicInteger open = new AtomicInteger();
    private final AtomicInteger inFlight = new AtomicInteger();
    /** Requests whose head was read before the stop, not yet queued for a handler nor refused. */
    private final AtomicInteger arriving = new AtomicInteger();
    /** Requests read and queued behind a call in progress on their connection, not yet started. */
    private final AtomicInteger queuedCalls = new AtomicInteger();
    private final LongAdder refusedConnections = new LongAdder();
    private final LongAdder refusedRequests = new LongAdder();
    private final java.util.Map<Connection.Close, LongAdder> closes = new java.util.EnumMap<>(Connection.Close.class);
    private volatile boolean accepting = true;
    private Channel listener;
    private boolean stopped;
    private boolean closed;

    private HttpFront(String host, HttpLimits limits, HttpHandler handler) {
        this.host = host;
        this.limits = limits;
        this.handler = handler;
        for (Connection.Close c : Connection.Close.values()) {
            closes.put(c, new LongAdder());
        }
    }

    /**
     * Binds {@code host:port} and starts serving.
     *
     * @param port 0 for any free port ({@link #port()} says which)
     * @throws IOException if the host has no address or the port cannot be bound (nothing is left behind)
     */
    public static HttpFront start(String host, int port, HttpLimits limits, HttpHandler handler) throws IOException {
        Objects.requireNonNull(host, "host");
        Objects.requireNonNull(limits, "limits");
        Objects.requireNonNull(handler, "handler");
        final HttpFront f = new HttpFront(host, limits, handler);
        try {
            f.bind(port);
            return f;
        } catch (IOException | RuntimeException | Error e) {
            f.close();
            throw e;
        }
    }

    private void bind(int port) throws IOException {
        final ServerBootstrap b = new ServerBootstrap()
            .group(acceptor, workers)
            .channel(NioServerSocketChannel.class)
            .option(ChannelOption.SO_BACKLOG, 256)
            .option(ChannelOption.SO_REUSEADDR, true)
            .childOption(ChannelOption.TCP_NODELAY, true) // a response is headers then body: no Nagle delay
            .childOption(ChannelOption.WRITE_BUFFER_WATER_MARK, WATER_MARK)
            .childHandler(new ChannelInitializer<SocketChannel>() {
                @Override
                protected void initChannel(SocketChannel ch) {
                    final boolean taking = accepting; // read once: the count must be undone exactly when it was done
                    if (!taking || open.incrementAndGet() > limits.maxConnections()) {
                        if (taking) {
                            open.decrementAndGet();
                        }
                        refusedConnections.increment();
                        ch.close(); // over the cap: closed before a byte is read (no request to answer yet)
                        return;
                    }
                    ch.closeFuture().addListener(done -> open.decrementAndGet());
                    connections.add(ch);
                    // the decoder and encoder of HttpServerCodec, apart: the connection asks the decoder what it holds.
                    // HttpServerCodec's encoder also drops a body sent to HEAD; here HttpCall sends none (respond) or
                    // refuses (startStream), and so does the connection's own refusal of a HEAD whose head was decoded
                    final RequestDecoder decoder = new RequestDecoder(new HttpDecoderConfig()
                        .setStrictLineParsing(true) // what RequestDecoder.startsRequest assumes, whatever Netty's default
                        .setMaxInitialLineLength(HttpLimits.MAX_REQUEST_LINE_BYTES)
                        .setMaxHeaderSize(limits.maxHeaderBytes())
                        .setMaxChunkSize(64 << 10));
                    final Connection c = new Connection(HttpFront.this, ch, decoder, limits, handlerExecutor.apply(executor));
                    ch.attr(CONNECTION).set(c);
                    ch.pipeline()
                        .addLast("wire", c.new Wire())
                        .addLast("http-decoder", decoder)
                        .addLast("http-encoder", new HttpResponseEncoder())
                        .addLast("calls", c.new Messages());
                }
            });
        final InetSocketAddress address = new InetSocketAddress(host, port);
        if (address.isUnresolved()) { // Netty's bind would throw UnresolvedAddressException, whose message is null
            throw new java.net.UnknownHostException("cannot resolve host '" + host + "'");
        }
        try {
            listener = b.bind(address).sync().channel();
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            throw new IOException("interrupted while binding " + host + ":" + port, e);
        } catch (Exception e) { // Netty rethrows the bind's checked exception unchecked
            if (e instanceof IOException io) {
                throw io instanceof BindException ? new BindException(host + ":" + port + ": " + io.getMessage()) : io;
            }
            throw e;
        }
    }

    HttpHandler handler() {
        return handler;
    }

    boolean accepting() {
        return accepting;
    }

    void callStarted() {
        inFlight.incrementAndGet();
    }

    void callEnded() {
        inFlight.decrementAndGet();
    }

    void callQueued() {
        queuedCalls.incrementAndGet();
    }

    void callsDequeued(int n) {
        queuedCalls.addAndGet(-n);
    }

    void arrivalStarted() {
        arriving.incrementAndGet();
    }

    void arrivalEnded() {
        arriving.decrementAndGet();
    }

    /**
     * @return requests whose head was read while the front accepted and that are not yet with a handler, queued for
     *         one, or refused (any thread)
     */
    public int requestsArriving() {
        return arriving.get();
    }

    void connectionClosed(Connection.Close why) {
        closes.get(why).increment();
    }

    void refusedRequest() {
        refusedRequests.increment();
    }

    /** @return requests read and queued behind a call in progress, over every connection now (for tests) */
    int queuedRequests() {
        int n = 0;
        for (Channel ch : connections) {
            final Connection c = ch.attr(CONNECTION).get();
            if (c != null) {
                n += c.queuedRequests();
            }
        }
        return n;
    }

    /** @return the port it listens on (the actual one when 0 was asked) */
    public int port() {
        return ((InetSocketAddress) listener.localAddress()).getPort();
    }

    /** @return {@code http://host:port/} (an IPv6 host in brackets) */
    public URI baseUri() {
        final String h = host.contains(":") ? "[" + host + "]" : host;
        return URI.create("http://" + h + ":" + port() + "/");
    }

    /** @return the limits it enforces */
    public HttpLimits limits() {
        return limits;
    }

    /** @return connections open now */
    public int openConnections() {
        return open.get();
    }

    /** @return requests with a handler now */
    public int callsInFlight() {
        return inFlight.get();
    }

    /** @return connections closed on arrival because {@link HttpLimits#maxConnections()} were open */
    public long refusedConnections() {
        return refusedConnections.sum();
    }

    /**
     * @return connections closed so far by reason, by lower-case name: {@code client} (the client's own close),
     *         {@code requested}, {@code idle}, {@code refused}, {@code cut}, {@code pipeline}, {@code failed},
     *         {@code stopping}
     */
    public java.util.Map<String, Long> closedConnections() {
        final java.util.Map<String, Long> m = new java.util.LinkedHashMap<>();
        closes.forEach((k, v) -> m.put(k.name().toLowerCase(java.util.Locale.ROOT), v.sum()));
        return m;
    }

    /**
     * @return requests the front refused itself (431, 414, 413, 408, 400, 505), counted when refused: a refusal that
     *         waits for a call in progress counts even if its client leaves before it goes out
     */
    public long refusedRequests() {
        return refusedRequests.sum();
    }

    /**
     * Stops accepting connections and closes those between requests; a connection with a call in progress closes
     * after its answer. Idempotent.
     */
    public void stopAccepting() {
        synchronized (this) {
            if (!accepting) {
                return;
            }
            accepting = false;
        }
        if (listener != null) {
            listener.close().awaitUninterruptibly();
        }
        for (Channel ch : connections) {
            final Connection c = ch.attr(CONNECTION).get();
            if (c != null) {
                ch.eventLoop().execute(c::closeIfIdle);
            }
        }
    }

    /**
     * Waits until no call is with a handler or queued for one and no request is arriving, at most {@code timeout}:
     * after {@link #stopAccepting}, a request whose head was read before the stop is still read and answered.
     *
     * @return whether none is
     */
    public boolean awaitNoCalls(Duration timeout) {
        final long end = System.nanoTime() + timeout.toNanos();
        while (inFlight.get() > 0 || queuedCalls.get() > 0 || arriving.get() > 0) {
            if (System.nanoTime() - end >= 0) {
                return false;
            }
            try {
                Thread.sleep(5);
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
                return false;
            }
        }
        return true;
    }

    /**
     * {@link #stopAccepting}, waits up to {@code grace} for the calls in progress to be answered
     * ({@link #awaitNoCalls}), then closes every connection left (their calls see their clients gone). Idempotent;
     * the second call returns at once.
     */
    public void stopListening(Duration grace) {
        synchronized (this) {
            if (stopped) {
                return;
            }
            stopped = true;
        }
        stopAccepting();
        awaitNoCalls(grace);
        for (Channel ch : connections) {
            final Connection c = ch.attr(CONNECTION).get();
            if (c != null) {
                c.close(Connection.Close.STOPPING); // queued on its event loop ahead of the group's close below
            }
        }
        connections.close().awaitUninterruptibly();
    }

    /**
     * {@link #stopListening} without grace if not done, then stops the event loops and the handlers' threads
     * (a handler still running is interrupted). Idempotent.
     */
    @Override
    public void close() {
        synchronized (this) {
            if (closed) {
                return;
            }
            closed = true;
        }
        stopListening(Duration.ZERO);
        acceptor.shutdownGracefully(0, 1, TimeUnit.SECONDS);
        workers.shutdownGracefully(0, 1, TimeUnit.SECONDS);
        executor.shutdownNow();
        acceptor.terminationFuture().awaitUninterruptibly(2, TimeUnit.SECONDS);
        workers.terminationFuture().awaitUninterruptibly(2, TimeUnit.SECONDS);
        LOG.log(System.Logger.Level.DEBUG, "HTTP front on " + host + " closed");
    }

    @Override
    public String toString() {
        return "HttpFront[" + host + (listener == null ? "" : ":" + port()) + ", " + open.get() + " connections]";
    }
}
