package io.kvpool.examples.server.config;

import java.time.Duration;
import java.util.Objects;

/**
 * Where the HTTP server listens and the limits it holds every connection to. Each duration is at most 365 days
 * ({@link Checks#LONGEST}).
 *
 * @param host           the address to bind ({@code --host})
 * @param port           the port, 0 for any free one ({@code --port}, 0..65535)
 * @param maxBodyBytes   the largest request body; a larger one is answered 413 ({@code --max-body-bytes}, ≥ 64)
 * @param maxConnections the most connections open at once ({@code --max-connections}, 1..1,000,000)
 * @param headerTimeout  how long the whole request head (request line and headers) may take to arrive
 *                       ({@code --header-timeout-ms})
 * @param idleTimeout    how long a keep-alive connection with no request in progress stays open
 *                       ({@code --idle-timeout-ms})
 * @param maxHeaderBytes the largest request header fields, the request line apart ({@code --max-header-bytes},
 *                       1024..1048576)
 * @param stallTimeout   how long a response may wait for a client that stopped reading before it is aborted
 *                       ({@code --stall-timeout-ms})
 * @param shutdownGrace  how long a server asked to stop (SIGTERM, Ctrl-C) lets the requests in flight finish
 *                       before it aborts the rest ({@code --shutdown-grace-ms}, ≥ 0)
 */
public record Listen(String host, int port, int maxBodyBytes, int maxConnections, Duration headerTimeout, Duration idleTimeout,
                     int maxHeaderBytes, Duration stallTimeout, Duration shutdownGrace) {

    /** @throws IllegalArgumentException naming the first value out of range, with the range and the value */
    public Listen {
        Objects.requireNonNull(host, "host");
        Checks.range("--port", port, 0, 65_535);
        Checks.range("--max-body-bytes", maxBodyBytes, 64, Integer.MAX_VALUE - 1);
        Checks.range("--max-connections", maxConnections, 1, 1_000_000);
        Checks.positive("--header-timeout-ms", headerTimeout);
        Checks.positive("--idle-timeout-ms", idleTimeout);
        Checks.range("--max-header-bytes", maxHeaderBytes, 1024, 1 << 20);
        Checks.positive("--stall-timeout-ms", stallTimeout);
        Objects.requireNonNull(shutdownGrace, "shutdownGrace");
        if (shutdownGrace.isNegative()) {
            throw new IllegalArgumentException("--shutdown-grace-ms must be ≥ 0, was " + shutdownGrace.toMillis() + " ms");
        }
        Checks.atMostAYear("--header-timeout-ms", headerTimeout);
        Checks.atMostAYear("--idle-timeout-ms", idleTimeout);
        Checks.atMostAYear("--stall-timeout-ms", stallTimeout);
        Checks.atMostAYear("--shutdown-grace-ms", shutdownGrace);
    }
}
