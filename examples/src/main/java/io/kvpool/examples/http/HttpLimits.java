package io.kvpool.examples.http;

import java.time.Duration;
import java.util.Objects;

/**
 * What one {@link HttpFront} allows a client. Every limit is enforced by the front before a handler sees the
 * request, and answered as HTTP says: a head over {@code maxHeaderBytes} gets 431, a body over
 * {@code maxBodyBytes} 413, a head not complete within {@code headerTimeout} 408; a connection over
 * {@code maxConnections} is closed at once.
 *
 * @param maxConnections most connections open at once; more are closed as they arrive
 * @param maxHeaderBytes most bytes of a request's header fields (the request line has its own 8 KiB limit: 414)
 * @param maxBodyBytes   most bytes of a request body (declared or received)
 * @param headerTimeout  from a request's first byte until its head is complete
 * @param idleTimeout    how long a connection may sit between requests before it is closed, and the longest a body
 *                       may take to arrive after its head (408 beyond)
 * @param stallTimeout   how long a response may wait for a client that stopped reading before it is aborted
 * @param minReadRate    bytes per second a client must at least read a large answer at: an answer's last write
 *                       may take the stall timeout plus the bytes still queued for the client at this rate
 *                       (a 4 MiB answer gets 64 s more at the default), so a slow but steady reader is not cut
 */
public record HttpLimits(int maxConnections, int maxHeaderBytes, long maxBodyBytes, Duration headerTimeout,
                         Duration idleTimeout, Duration stallTimeout, long minReadRate) {

    /** Longest request line (method, target, version): 8 KiB, as most servers. */
    public static final int MAX_REQUEST_LINE_BYTES = 8 << 10;

    /** The default {@link #minReadRate()}: 64 KiB/s. */
    public static final long DEFAULT_MIN_READ_RATE = 64 << 10;

    /** 1,024 connections, 16 KiB of header, 1 MiB of body, 10 s for a head, 60 s idle, 10 s stalled, 64 KiB/s. */
    public static final HttpLimits DEFAULTS = new HttpLimits(1024, 16 << 10, 1 << 20, Duration.ofSeconds(10),
        Duration.ofSeconds(60), Duration.ofSeconds(10));

    /** @throws IllegalArgumentException naming the limit and its value, for a limit out of range */
    public HttpLimits {
        if (maxConnections < 1) {
            throw new IllegalArgumentException("maxConnections must be ≥ 1, was " + maxConnections);
        }
        if (maxHeaderBytes < 1024 || maxHeaderBytes > 1 << 20) {
            throw new IllegalArgumentException("maxHeaderBytes must be in 1024..1048576, was " + maxHeaderBytes);
        }
        if (maxBodyBytes < 0 || maxBodyBytes > Integer.MAX_VALUE - 8) {
            throw new IllegalArgumentException("maxBodyBytes must be in 0.." + (Integer.MAX_VALUE - 8) + ", was " + maxBodyBytes);
        }
        positive("headerTimeout", headerTimeout);
        positive("idleTimeout", idleTimeout);
        positive("stallTimeout", stallTimeout);
        if (minReadRate < 1) {
            throw new IllegalArgumentException("minReadRate must be ≥ 1 byte/s, was " + minReadRate);
        }
    }

    /** The limits with the {@link #DEFAULT_MIN_READ_RATE default minimum read rate}. */
    public HttpLimits(int maxConnections, int maxHeaderBytes, long maxBodyBytes, Duration headerTimeout, Duration idleTimeout,
                      Duration stallTimeout) {
        this(maxConnections, maxHeaderBytes, maxBodyBytes, headerTimeout, idleTimeout, stallTimeout, DEFAULT_MIN_READ_RATE);
    }

    /**
     * {@return how long an answer's last write may take to reach the wire with {@code queuedBytes} still queued for
     * the client: the stall timeout plus those bytes at {@link #minReadRate()}, in nanoseconds (saturated)}
     */
    public long lastWriteNanos(long queuedBytes) {
        final long stall = stallTimeout.toNanos();
        if (queuedBytes <= 0) {
            return stall;
        }
        final double total = stall + queuedBytes * 1e9 / minReadRate; // a timeout: double's precision is plenty
        return total >= Long.MAX_VALUE ? Long.MAX_VALUE : (long) total;
    }

    private static void positive(String name, Duration d) {
        Objects.requireNonNull(d, name);
        if (d.isNegative() || d.isZero()) {
            throw new IllegalArgumentException(name + " must be positive, was " + d);
        }
    }
}
