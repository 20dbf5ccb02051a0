package io.kvpool.examples.server.config;

import java.net.URI;
import java.util.Locale;
import java.util.Objects;

/**
 * Which part of the example server this process runs, and where the other parts are.
 *
 * <pre>
 *   --role all (default)      router + prefill + decode in this JVM (KV over the shared-memory transport)
 *
 *   --role router  ── HTTP/JSON ──▶ --role prefill ══ KV: shm (--work-dir) or UCX (--kv-address) ══▶ --role decode
 *        │                                                                                                ▲
 *        └──────────────────────────────── HTTP/JSON, token stream back ─────────────────────────────────┘
 * </pre>
 * The router reaches the roles' internal endpoints at {@link #prefillUrl()} and {@link #decodeUrl()}; the
 * roles serve them on their own {@code --host}/{@code --port}. KV moves between prefill and decode over
 * {@link #transport()}: with {@code shm} both are given the same {@code --work-dir} (decode creates the pool
 * file and the Unix socket there, prefill connects to the socket); with {@code ucx} decode listens for the
 * UCX bootstrap on {@link #kvAddress()} and prefill connects to it.
 *
 * @param role       what this process runs
 * @param transport  how prefill's KV reaches decode when they are separate processes
 * @param prefillUrl the prefill role's base URL (the router's {@code --prefill-url})
 * @param decodeUrl  the decode role's base URL (the router's {@code --decode-url})
 * @param kvAddress  {@code host:port} of decode's UCX bootstrap listener ({@code --kv-address})
 */
public record Topology(Role role, Transport transport, URI prefillUrl, URI decodeUrl, String kvAddress) {

    /** What a process of the example server runs. */
    public enum Role {
        /** Router, prefill and decode in one JVM (the default). */
        ALL,
        /** The HTTP front only; the roles are other processes. */
        ROUTER,
        /** The prefill role only: its pool, the echo model's prefill and the transfer sender. */
        PREFILL,
        /** The decode role only: its pool, the transfer receiver and the echo model's decode. */
        DECODE;

        /** @return the flag value, e.g. {@code prefill} */
        public String flag() {
            return name().toLowerCase(Locale.ROOT);
        }
    }

    /** How KV moves from a prefill process to a decode process. */
    public enum Transport {
        /** kvpool-transfer's shared-memory transport: a mapped pool file and a Unix socket, one host. */
        SHM,
        /** kvpool-transfer's UCX transport (JUCX, tcp), bootstrapped over a TCP connection. */
        UCX
    }

    /** One JVM, shared memory; the roles' URLs and the UCX address at their defaults. */
    public static final Topology DEFAULT = new Topology(Role.ALL, Transport.SHM, URI.create("http://127.0.0.1:8081/"),
        URI.create("http://127.0.0.1:8082/"), "127.0.0.1:8090");

    public Topology {
        Objects.requireNonNull(role, "role");
        Objects.requireNonNull(transport, "transport");
        prefillUrl = base("--prefill-url", prefillUrl);
        decodeUrl = base("--decode-url", decodeUrl);
        hostPort("--kv-address", kvAddress);
    }

    /** @return whether this process runs one role of several processes ({@code prefill} or {@code decode}) */
    public boolean isRoleProcess() {
        return role == Role.PREFILL || role == Role.DECODE;
    }

    /** @return the host of {@link #kvAddress()} */
    public String kvHost() {
        return kvAddress.substring(0, kvAddress.lastIndexOf(':'));
    }

    /** @return the port of {@link #kvAddress()} */
    public int kvPort() {
        return Integer.parseInt(kvAddress.substring(kvAddress.lastIndexOf(':') + 1));
    }

    /** @return this topology with another role */
    public Topology withRole(Role r) {
        return new Topology(r, transport, prefillUrl, decodeUrl, kvAddress);
    }

    /** @return this topology with another transport */
    public Topology withTransport(Transport t) {
        return new Topology(role, t, prefillUrl, decodeUrl, kvAddress);
    }

    /** @return this topology with other role URLs */
    public Topology withUrls(URI prefill, URI decode) {
        return new Topology(role, transport, prefill, decode, kvAddress);
    }

    /** @return this topology with another UCX bootstrap address */
    public Topology withKvAddress(String hostPort) {
        return new Topology(role, transport, prefillUrl, decodeUrl, hostPort);
    }

    /**
     * Applies one command-line flag of this record's.
     *
     * @return the new topology, or {@code null} if {@code name} is not one of its flags
     * @throws IllegalArgumentException naming the flag and what is wrong with its value
     */
    Topology parse(String name, String value) {
        return switch (name) {
            case "--role" -> withRole(switch (value) {
                case "all" -> Role.ALL;
                case "router" -> Role.ROUTER;
                case "prefill" -> Role.PREFILL;
                case "decode" -> Role.DECODE;
                default -> throw new IllegalArgumentException("--role is all, router, prefill or decode, was '" + value + "'");
            });
            case "--transport" -> withTransport(switch (value) {
                case "shm" -> Transport.SHM;
                case "ucx" -> Transport.UCX;
                default -> throw new IllegalArgumentException("--transport is shm or ucx, was '" + value + "'");
            });
            case "--prefill-url" -> withUrls(uri(name, value), decodeUrl);
            case "--decode-url" -> withUrls(prefillUrl, uri(name, value));
            case "--kv-address" -> withKvAddress(value);
            default -> null;
        };
    }

    private static URI uri(String name, String value) {
        try {
            return URI.create(value);
        } catch (IllegalArgumentException e) {
            throw new IllegalArgumentException(name + " is not a URL: '" + value + "' (" + e.getMessage() + ")");
        }
    }

    private static URI base(String name, URI u) {
        Objects.requireNonNull(u, name);
        if (!"http".equals(u.getScheme()) || u.getHost() == null || u.getPort() < 0) {
            throw new IllegalArgumentException(name + " must be http://HOST:PORT/, was '" + u + "'");
        }
        if (u.getPort() < 1 || u.getPort() > 65_535) { // java.net.URI takes any digits; no socket has such a port
            throw new IllegalArgumentException(name + " must be http://HOST:PORT/ with a port in [1, 65535], was '" + u + "'");
        }
        final String path = u.getPath() == null || u.getPath().isEmpty() ? "/" : u.getPath();
        return URI.create("http://" + u.getRawAuthority() + (path.endsWith("/") ? path : path + "/"));
    }

    private static void hostPort(String name, String hp) {
        Objects.requireNonNull(hp, name);
        final int colon = hp.lastIndexOf(':');
        final int port;
        try {
            port = colon > 0 ? Integer.parseInt(hp.substring(colon + 1)) : -1;
        } catch (NumberFormatException e) {
            throw new IllegalArgumentException(name + " must be HOST:PORT, was '" + hp + "'");
        }
        if (port < 0 || port > 65_535) {
            throw new IllegalArgumentException(name + " must be HOST:PORT with a port in [0, 65535] (0: decode picks one), was '" + hp + "'");
        }
    }
}
