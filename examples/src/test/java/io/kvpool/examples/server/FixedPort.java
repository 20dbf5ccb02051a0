package io.kvpool.examples.server;

import java.io.IOException;
import java.net.InetAddress;
import java.net.ServerSocket;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.ThreadLocalRandom;

/**
 * A loopback port a test binds later, and binds again after a restart, so that a restarted role is where the router
 * looks.
 *
 * <p>The port is free when handed out and lies below the kernel's ephemeral range. A port from {@code new
 * ServerSocket(0)} would not do: it comes from that range, so between closing the probe and the role's bind (or the
 * role's close and its restart) an outgoing connection of this JVM may take it as its local port, and the role then
 * fails with "Address already in use". Ports below the range are only ever bound on purpose. Ports handed out once
 * are not handed out again in this JVM.
 */
public final class FixedPort {
    private static final Path EPHEMERAL_RANGE = Path.of("/proc/sys/net/ipv4/ip_local_port_range");
    private static final int LOWEST = 20_000;
    private static final Set<Integer> HANDED_OUT = ConcurrentHashMap.newKeySet();

    private FixedPort() {
    }

    /**
     * Returns a free loopback port that no outgoing connection will take.
     *
     * @throws IllegalStateException if no free port was found in 1,000 tries
     */
    public static int belowEphemeralRange() {
        final int below = firstEphemeral();
        for (int i = 0; i < 1_000; i++) {
            final int port = ThreadLocalRandom.current().nextInt(LOWEST, below);
            if (HANDED_OUT.add(port) && free(port)) {
                return port;
            }
        }
        throw new IllegalStateException("no free loopback port in [" + LOWEST + ", " + below + ") after 1,000 tries");
    }

    /** The first port of the kernel's ephemeral range: 32,768 where the kernel does not say (Linux's default). */
    static int firstEphemeral() {
        try {
            final int first = Integer.parseInt(Files.readAllLines(EPHEMERAL_RANGE).get(0).trim().split("\\s+")[0]);
            // readAllLines, not readString: JDK 25's readString returns only the first byte of this /proc file
            if (first <= LOWEST + 1_000) {
                throw new IllegalStateException("the ephemeral range starts at " + first + ", leaving too few ports below it above "
                    + LOWEST);
            }
            return first;
        } catch (IOException notLinux) {
            return 32_768;
        }
    }

    private static boolean free(int port) {
        try (ServerSocket s = new ServerSocket(port, 1, InetAddress.getLoopbackAddress())) {
            return true;
        } catch (IOException inUse) {
            return false;
        }
    }
}
