package io.kvpool.examples.server;

import com.sun.net.httpserver.HttpServer;

import java.io.IOException;
import java.net.InetSocketAddress;
import java.net.URI;
import java.util.Objects;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.function.Consumer;

/**
 * A JDK {@link HttpServer} on one virtual thread per exchange, as {@link KvServer} and {@link RoleServer} run
 * it. {@link #start} either returns a started server or leaves no port bound and no executor running: a
 * failure while mounting the handlers happens before the bind.
 *
 * @param http     the server
 * @param executor its threads
 * @param host     the host it was asked to bind
 */
record HttpFront(HttpServer http, ExecutorService executor, String host) {

    static {
        // The JDK server leaves Nagle's algorithm on unless told otherwise; with a response written as headers
        // then body, Nagle and the client's delayed ACK add ~40 ms to every request. Read once, when the JDK's
        // server configuration loads: so set before the first
        // HttpServer of this JVM (every one here starts through this class; an explicit -D wins).
        if (System.getProperty("sun.net.httpserver.nodelay") == null) {
            System.setProperty("sun.net.httpserver.nodelay", "true");
        }
    }

    HttpFront {
        Objects.requireNonNull(http, "http");
        Objects.requireNonNull(executor, "executor");
        Objects.requireNonNull(host, "host");
    }

    /**
     * Lets {@code mount} add the contexts, then binds {@code host:port} and starts. The bind comes last on
     * purpose: the JDK server closes a bound channel only from its dispatcher thread, so a server that
     * failed between {@code create(address)} and {@code start()} would keep its port until the JVM exits,
     * {@code stop()} or not.
     *
     * @throws IOException      if the port cannot be bound (nothing is left behind)
     * @throws RuntimeException what {@code mount} threw (nothing was bound), or the start
     */
    static HttpFront start(String host, int port, Consumer<HttpServer> mount) throws IOException {
        final HttpServer http = HttpServer.create(); // unbound
        final ExecutorService executor = Executors.newVirtualThreadPerTaskExecutor();
        try {
            http.setExecutor(executor);
            mount.accept(http);
            http.bind(new InetSocketAddress(host, port), 256);
            http.start();
            return new HttpFront(http, executor, host);
        } catch (IOException | RuntimeException | Error e) {
            try {
                http.stop(0);
            } catch (RuntimeException ignored) {
                // failing anyway
            }
            executor.shutdownNow();
            throw e;
        }
    }

    /** @return the port it listens on (the actual one when 0 was asked) */
    int port() {
        return http.getAddress().getPort();
    }

    /** @return {@code http://host:port/} (an IPv6 host in brackets) */
    URI baseUri() {
        final String h = host.contains(":") ? "[" + host + "]" : host;
        return URI.create("http://" + h + ":" + port() + "/");
    }

    /** Stops accepting and closes the connections (exchanges in flight see their streams fail). */
    void stopListening() {
        stopListening(0);
    }

    /**
     * Stops accepting, waits up to {@code graceSeconds} for the exchanges in flight to finish (returning as soon as
     * they have), then closes the connections.
     */
    void stopListening(int graceSeconds) {
        http.stop(graceSeconds);
    }

    /** Stops the exchanges' threads; after {@link #stopListening}. */
    void stopThreads() {
        executor.shutdownNow();
    }
}
