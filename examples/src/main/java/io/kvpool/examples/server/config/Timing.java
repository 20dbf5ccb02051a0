package io.kvpool.examples.server.config;

import java.time.Duration;

/**
 * The server's deadlines and pauses, other than the HTTP connection limits of {@link Listen}.
 *
 * <p>Each is at most 365 days ({@link Checks#LONGEST}).
 *
 * @param requestTimeout   how long a request may wait for its KV transfer ({@code --request-timeout-ms})
 * @param tokenDelay       the pause after each generated token, standing in for a model step ({@code --token-delay-ms}, may be 0)
 * @param heartbeat        how often a response that waits writes something, noticing a gone client ({@code --heartbeat-ms})
 * @param transferTimeout  the transfer's completion and drain deadlines ({@code --transfer-timeout-ms})
 * @param reconnectDelay   how long prefill waits before reconnecting a lost link ({@code --reconnect-ms})
 * @param ucxKeepalive     how often a UCX link's endpoints check their peer ({@code --ucx-keepalive-ms}, 10 ms to 1 hour)
 * @param kvConnectTimeout how long prefill's TCP connect to decode's UCX bootstrap listener may take
 *                         ({@code --kv-connect-timeout-ms})
 * @param kvHeartbeat      the KV link heartbeat's silence before a PING ({@code --kv-heartbeat-ms}); zero: no PINGs
 * @param kvHeartbeatTimeout the KV link heartbeat's silence after a PING before the link fails
 *                         ({@code --kv-heartbeat-timeout-ms})
 */
public record Timing(Duration requestTimeout, Duration tokenDelay, Duration heartbeat, Duration transferTimeout, Duration reconnectDelay,
                     Duration ucxKeepalive, Duration kvConnectTimeout, Duration kvHeartbeat, Duration kvHeartbeatTimeout) {

    /** @throws IllegalArgumentException naming the first value out of range, with the value */
    public Timing {
        Checks.positive("--request-timeout-ms", requestTimeout);
        Checks.nonNegative("--token-delay-ms", tokenDelay);
        Checks.positive("--heartbeat-ms", heartbeat);
        Checks.positive("--transfer-timeout-ms", transferTimeout);
        Checks.positive("--reconnect-ms", reconnectDelay);
        Checks.positive("--ucx-keepalive-ms", ucxKeepalive);
        Checks.positive("--kv-connect-timeout-ms", kvConnectTimeout);
        Checks.nonNegative("--kv-heartbeat-ms", kvHeartbeat);
        Checks.positive("--kv-heartbeat-timeout-ms", kvHeartbeatTimeout);
        if (ucxKeepalive.toMillis() < 10 || ucxKeepalive.compareTo(Duration.ofHours(1)) > 0) {
            throw new IllegalArgumentException("--ucx-keepalive-ms must be 10 ms to 1 hour, was " + ucxKeepalive.toMillis());
        }
        Checks.atMostAYear("--request-timeout-ms", requestTimeout);
        Checks.atMostAYear("--token-delay-ms", tokenDelay);
        Checks.atMostAYear("--heartbeat-ms", heartbeat);
        Checks.atMostAYear("--transfer-timeout-ms", transferTimeout);
        Checks.atMostAYear("--reconnect-ms", reconnectDelay);
        Checks.atMostAYear("--kv-connect-timeout-ms", kvConnectTimeout);
        Checks.atMostAYear("--kv-heartbeat-ms", kvHeartbeat); // Heartbeat.every's own limit too, named here by the option
        Checks.atMostAYear("--kv-heartbeat-timeout-ms", kvHeartbeatTimeout);
    }
}
