package io.kvpool.examples.server.config;

import io.kvpool.Safeguard;
import io.kvpool.examples.server.link.FaultPlan;
import io.kvpool.transfer.TransferSafeguard;
import org.junit.jupiter.api.Test;

import java.time.Duration;
import java.util.EnumSet;
import java.util.List;
import java.util.Set;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

class ServerConfigTest {

    @Test
    void defaultsAreSafeAndTheFlagsSetEveryField() {
        final ServerConfig d = ServerConfig.parse();
        assertFalse(d.unsafe());
        assertEquals(8080, d.port());
        assertEquals(ServerConfig.Device.HOST, d.device());
        assertFalse(d.faults().active());

        final ServerConfig c = ServerConfig.parse("--port", "0", "--host=0.0.0.0", "--context", "2048", "--pages", "300",
            "--decode-pages", "700", "--tokens-per-page", "8", "--layers", "2", "--kv-heads", "4", "--head-dim", "16",
            "--max-body-bytes", "4096", "--request-timeout-ms", "1500", "--token-delay-ms", "0", "--heartbeat-ms", "50",
            "--transfer-timeout-ms", "700", "--reconnect-ms", "30", "--fault-rate", "0.25", "--seed", "9", "--device", "host",
            "--ucx-keepalive-ms", "100", "--kv-connect-timeout-ms", "450", "--kv-heartbeat-ms", "200", "--kv-heartbeat-timeout-ms", "900");
        assertEquals(0, c.port());
        assertEquals("0.0.0.0", c.host());
        assertEquals(2048, c.contextTokens());
        assertEquals(300, c.prefillPages());
        assertEquals(700, c.decodePages());
        assertEquals(8, c.layout().tokensPerPage());
        assertEquals(2, c.layout().layers());
        assertEquals(4, c.layout().kvHeads());
        assertEquals(16, c.layout().headDim());
        assertEquals(4096, c.maxBodyBytes());
        assertEquals(Duration.ofMillis(1500), c.requestTimeout());
        assertEquals(Duration.ZERO, c.tokenDelay());
        assertEquals(Duration.ofMillis(50), c.heartbeat());
        assertEquals(Duration.ofMillis(700), c.transferTimeout());
        assertEquals(Duration.ofMillis(30), c.reconnectDelay());
        assertEquals(Duration.ofMillis(100), c.ucxKeepalive());
        assertEquals(Duration.ofMillis(450), c.kvConnectTimeout());
        assertEquals(Duration.ofMillis(250), d.ucxKeepalive(), "UCX's own 20 s would be noticed that long after a heal");
        assertEquals(Duration.ofMillis(300), d.kvConnectTimeout());
        assertEquals(io.kvpool.transfer.Heartbeat.every(Duration.ofMillis(200), Duration.ofMillis(900)), c.kvHeartbeat());
        assertEquals(io.kvpool.transfer.Heartbeat.DEFAULT, d.kvHeartbeat());
        assertEquals(io.kvpool.transfer.Heartbeat.OFF, ServerConfig.parse("--kv-heartbeat-ms", "0").kvHeartbeat());
        assertThrows(IllegalArgumentException.class, () -> ServerConfig.parse("--ucx-keepalive-ms", "5"));
        assertEquals(new FaultPlan(0.25, 9), c.faults());
        assertEquals(c.toString(), c.toBuilder().build().toString());
    }

    @Test
    void everySafeguardHasItsUnsafeSwitch() {
        for (Safeguard s : Safeguard.values()) {
            final String flag = "--unsafe-" + s.name().toLowerCase().replace('_', '-');
            final ServerConfig c = ServerConfig.parse(flag);
            assertEquals(Set.of(s), c.unsafePool(), flag);
            assertEquals(List.of(flag), c.unsafeSwitches());
        }
        for (TransferSafeguard s : TransferSafeguard.values()) {
            final String flag = "--unsafe-" + s.name().toLowerCase().replace('_', '-');
            assertEquals(Set.of(s), ServerConfig.parse(flag).unsafeTransfer(), flag);
        }
        assertTrue(ServerConfig.parse("--unsafe-placeholder-on-overflow").unsafePlaceholderOnOverflow());
        final ServerConfig incident = ServerConfig.parse("--unsafe-incident");
        assertTrue(incident.unsafePlaceholderOnOverflow());
        assertEquals(EnumSet.of(Safeguard.FREE_PAGE_FILL), incident.unsafePool());
        assertEquals(EnumSet.of(TransferSafeguard.LENGTH_CHECK, TransferSafeguard.CANARY_CHECK, TransferSafeguard.CHECKSUM),
            incident.unsafeTransfer());
    }

    @Test
    void badFlagsAreNamed() {
        // picocli's words for what no option takes: an unknown option (and the value after it), a missing value
        assertMessage("Unknown options: '--nope', '1'", "--nope", "1");
        assertMessage("Unknown option: '--nope'", "--nope");
        assertMessage("Missing required parameter for option '--port' (N)", "--port");
        assertMessage("--port needs a whole number, was 'x'", "--port", "x");
        assertMessage("--port must be in [0, 65535], was 70000", "--port", "70000");
        assertMessage("Unknown option: '--unsafe-everything'", "--unsafe-everything");
        assertMessage("--device is host or cuda, was 'tpu'", "--device", "tpu");
        assertMessage("fault rate must be in [0, 1], was 2.0", "--fault-rate", "2");
        assertMessage("Unmatched argument at index 0: 'serve'", "serve");
        assertMessage("the echo model needs token vectors of at least 84 bytes", "--head-dim", "8");
    }

    private static void assertMessage(String expected, String... args) {
        final IllegalArgumentException e = assertThrows(IllegalArgumentException.class, () -> ServerConfig.parse(args));
        assertTrue(e.getMessage().startsWith(expected), () -> "'" + e.getMessage() + "' does not start with '" + expected + "'");
    }

    @Test
    void theRoleFlagsSayWhatThisProcessRunsAndWhereTheOthersAre() {
        assertEquals(Topology.DEFAULT, ServerConfig.parse().topology());
        assertEquals(Topology.Role.ALL, ServerConfig.parse().topology().role());

        final ServerConfig router = ServerConfig.parse("--role", "router", "--prefill-url", "http://10.0.0.2:9001",
            "--decode-url=http://10.0.0.3:9002/");
        assertEquals(Topology.Role.ROUTER, router.topology().role());
        assertEquals("http://10.0.0.2:9001/", router.topology().prefillUrl().toString());
        assertEquals("http://10.0.0.3:9002/", router.topology().decodeUrl().toString());

        final ServerConfig decode = ServerConfig.parse("--role", "decode", "--work-dir", "/tmp/kv");
        assertEquals(Topology.Transport.SHM, decode.topology().transport());
        assertTrue(decode.toString().contains("role decode over SHM"), decode::toString);
        final ServerConfig ucx = ServerConfig.parse("--role", "prefill", "--transport", "ucx", "--kv-address", "10.0.0.3:7000");
        assertEquals("10.0.0.3", ucx.topology().kvHost());
        assertEquals(7000, ucx.topology().kvPort());

        assertEquals("--role is all, router, prefill or decode, was 'both'", assertThrows(IllegalArgumentException.class,
            () -> ServerConfig.parse("--role", "both")).getMessage());
        assertEquals("--transport is shm or ucx, was 'rdma'", assertThrows(IllegalArgumentException.class,
            () -> ServerConfig.parse("--transport", "rdma")).getMessage());
        assertTrue(assertThrows(IllegalArgumentException.class, () -> ServerConfig.parse("--role", "decode")).getMessage()
            .contains("--role decode with --transport shm needs --work-dir DIR"));
        assertTrue(assertThrows(IllegalArgumentException.class, () -> ServerConfig.parse("--transport", "ucx")).getMessage()
            .contains("--transport ucx needs the roles in separate processes"));
        assertTrue(assertThrows(IllegalArgumentException.class, () -> ServerConfig.parse("--prefill-url", "ftp://x:1/")).getMessage()
            .contains("--prefill-url must be http://HOST:PORT/"));
        assertTrue(assertThrows(IllegalArgumentException.class, () -> ServerConfig.parse("--decode-url", "http://nohost")).getMessage()
            .contains("--decode-url must be http://HOST:PORT/"));
        assertTrue(assertThrows(IllegalArgumentException.class, () -> ServerConfig.parse("--kv-address", "10.0.0.3")).getMessage()
            .contains("--kv-address must be HOST:PORT"));
        assertTrue(assertThrows(IllegalArgumentException.class, () -> ServerConfig.parse("--role", "prefill", "--transport", "ucx",
            "--kv-address", "127.0.0.1:0")).getMessage().contains("--role prefill needs decode's actual --kv-address port"));
        assertTrue(ServerConfig.usage().contains("--role all|router|prefill|decode"), ServerConfig::usage);
        assertTrue(ServerConfig.usage().contains("--unsafe-incident"), ServerConfig::usage);
    }

    @Test
    void clampingTheContextIsARoutersSettingAndRefusedWhereItWouldDoNothing() {
        // the pools of an all-in-one server (or a role) refuse a --context they cannot hold whatever the flag says
        for (String[] args : new String[][] {{"--clamp-context"}, {"--role", "decode", "--work-dir", "/tmp/kv", "--clamp-context"}}) {
            final IllegalArgumentException e = assertThrows(IllegalArgumentException.class, () -> ServerConfig.parse(args));
            assertTrue(e.getMessage().startsWith("--clamp-context is for --role router"), e::getMessage);
            assertTrue(e.getMessage().contains("lower --context, or give them more --pages"), e::getMessage);
        }
        assertTrue(ServerConfig.parse("--role", "router", "--prefill-url", "http://10.0.0.2:9001", "--decode-url",
            "http://10.0.0.3:9002", "--clamp-context").clampContext());
    }

    @Test
    void aRoleUrlWhosePortNoSocketCanHaveIsRefused() {
        // the router would start, read the role as not up yet, and answer every request 503 for good
        for (String[] args : new String[][] {
            {"--role", "router", "--decode-url", "http://127.0.0.1:80820/"},
            {"--role", "router", "--prefill-url", "http://127.0.0.1:65536/"},
            {"--role", "router", "--prefill-url", "http://127.0.0.1:0/"}}) {
            final IllegalArgumentException e = assertThrows(IllegalArgumentException.class, () -> ServerConfig.parse(args),
                String.join(" ", args));
            assertTrue(e.getMessage().contains(args[2]) && e.getMessage().contains(args[3]) && e.getMessage().contains("[1, 65535]"),
                e.getMessage());
        }
    }
}
