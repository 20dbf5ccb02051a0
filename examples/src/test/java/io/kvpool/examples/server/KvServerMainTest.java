package io.kvpool.examples.server;

import io.kvpool.PoolCapacityException;
import io.kvpool.examples.server.config.Topology;
import org.junit.jupiter.api.Test;

import java.io.ByteArrayOutputStream;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

class KvServerMainTest {

    private final ByteArrayOutputStream out = new ByteArrayOutputStream();
    private final ByteArrayOutputStream err = new ByteArrayOutputStream();

    private int run(String... args) throws Exception {
        return KvServerMain.run(args, new PrintStream(out, true, StandardCharsets.UTF_8), new PrintStream(err, true, StandardCharsets.UTF_8));
    }

    private String err() {
        return err.toString(StandardCharsets.UTF_8);
    }

    @Test
    void aPoolSmallerThanTheAdvertisedContextRefusesToStartWithBothNumbers() throws Exception {
        // 64 pages × 16 tokens = 1,024 tokens for an advertised 4,096
        assertEquals(1, run("--port", "0", "--prefill-pages", "64", "--context", "4096"));
        assertTrue(err().contains("refusing to start") && err().contains("4,096") && err().contains("1,024"), err());
        assertTrue(err().contains("this server: lower --context, or give the pools more pages"), err());

        final PoolCapacityException e = assertThrows(PoolCapacityException.class, () -> KvServer.start(ServerTests.small()
            .contextTokens(4096).prefillPages(1024).decodePages(100).build()));
        assertEquals(4096, e.advertisedContextTokens());
        assertEquals(1600, e.poolTokens());
        assertTrue(e.getMessage().contains("4,096") && e.getMessage().contains("1,600"), e::getMessage);
    }

    @Test
    void theIncidentsPlaceholderSwitchLetsAnUndersizedPrefillPoolStartLoudly() throws Exception {
        // with the switch the capacity check only warns (the 2026 configuration); the banner says UNSAFE
        try (KvServer s = KvServer.start(ServerTests.small().contextTokens(512).prefillPages(8).unsafePlaceholderOnOverflow(true).build())) {
            assertEquals(8, s.prefillPool().capacity());
            s.config().printUnsafeBanner(new PrintStream(err, true, StandardCharsets.UTF_8));
            assertTrue(err().contains("UNSAFE") && err().contains("--unsafe-placeholder-on-overflow"), err());
        }
    }

    @Test
    void usageErrorsExitWithTwo() throws Exception {
        assertEquals(2, run("--port", "banana"));
        assertTrue(err().contains("--port needs a whole number") && err().contains("options (defaults in brackets)"), err());
        assertEquals(2, run("fly"));
        assertTrue(err().contains("unknown subcommand 'fly'"), err());
        assertEquals(0, run("--help"));
        assertTrue(out.toString(StandardCharsets.UTF_8).contains("serve"), out::toString);
        assertEquals(2, run("--port", "0", "--device", "cuda"));
        assertTrue(err().contains("--device cuda needs the roles in separate processes") && err().contains("cannot open its own CUDA IPC handle"), err());
    }

    /** An address the HTTP front cannot resolve is refused with the address, not an exception's empty message. */
    @Test
    void aHostWithoutAnAddressRefusesToStartNamingTheHost() throws Exception {
        assertEquals(1, run("--port", "0", "--host", "[::1"));
        assertTrue(err().contains("refusing to start: cannot serve HTTP on [::1:0: ") && err().contains("cannot resolve host '[::1'"), err());
    }

    @Test
    void aRoleThatCannotRunAsConfiguredSaysWhy() throws Exception {
        assertEquals(2, run("--role", "prefill"));
        assertTrue(err().contains("--role prefill with --transport shm needs --work-dir DIR"), err());
        assertTrue(assertThrows(IllegalArgumentException.class, () -> KvServer.start(ServerTests.small().role(Topology.Role.DECODE)
            .workDir(java.nio.file.Path.of("/tmp")).build())).getMessage().contains("start it with RoleServer.start"));
        assertTrue(assertThrows(IllegalArgumentException.class, () -> RoleServer.start(ServerTests.small().build())).getMessage()
            .contains("RoleServer runs --role prefill or --role decode, not --role all"));
    }

    @Test
    void withoutAGpuADeviceRoleRefusesToStartWithTheReason(@org.junit.jupiter.api.io.TempDir java.nio.file.Path dir) throws Exception {
        final String noGpu = io.kvpool.cuda.Cuda.unavailableReason();
        org.junit.jupiter.api.Assumptions.assumeTrue(noGpu != null, "a GPU is present: the device roles start (DeviceRolesGpuTest)");
        assertEquals(1, run("--role", "decode", "--port", "0", "--work-dir", dir.toString(), "--device", "cuda"));
        assertTrue(err().contains("refusing to start: CUDA is not available: " + noGpu), err());
        assertEquals(2, run("--role", "prefill", "--device", "cuda", "--transport", "ucx"));
        assertTrue(err().contains("--device cuda moves KV between the roles by CUDA IPC"), err());
    }

    @Test
    void aRoleProcessOnANonLoopbackHostWarnsLoudlyThatItsEndpointsHaveNoAuthentication(@org.junit.jupiter.api.io.TempDir java.nio.file.Path dir)
        throws Exception {
        // the pool cannot hold the context: the process refuses to start right after the warning, nothing is served
        assertEquals(1, run("--role", "prefill", "--host", "0.0.0.0", "--port", "0", "--work-dir", dir.toString(), "--context", "4096",
            "--prefill-pages", "64"));
        assertTrue(err().contains("WARNING: this role's internal endpoints listen on --host 0.0.0.0, which is not loopback"), err());
        assertTrue(err().contains("NO authentication"), err());
        for (String loopback : new String[] {"127.0.0.1", "::1", "localhost"}) {
            assertEquals(null, RoleServer.exposureWarning(loopback), loopback);
        }
        for (String exposed : new String[] {"0.0.0.0", "::", "10.1.2.3"}) {
            assertTrue(RoleServer.exposureWarning(exposed).contains("--host " + exposed + ", which is not loopback"), exposed);
        }
    }

    @Test
    void aRoleProcessOnLoopbackPrintsNoWarning(@org.junit.jupiter.api.io.TempDir java.nio.file.Path dir) throws Exception {
        assertEquals(1, run("--role", "prefill", "--host", "127.0.0.1", "--port", "0", "--work-dir", dir.toString(), "--context", "4096",
            "--prefill-pages", "64"));
        assertTrue(err().contains("refusing to start"), err());
        assertTrue(!err().contains("WARNING"), err());
    }
}
