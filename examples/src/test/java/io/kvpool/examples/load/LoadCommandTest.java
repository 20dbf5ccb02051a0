package io.kvpool.examples.load;

import io.kvpool.examples.server.KvServer;
import org.junit.jupiter.api.Test;

import java.io.ByteArrayOutputStream;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

class LoadCommandTest {

    private final ByteArrayOutputStream out = new ByteArrayOutputStream();
    private final ByteArrayOutputStream err = new ByteArrayOutputStream();

    private int run(String... args) throws Exception {
        return new LoadCommand().run(args, new PrintStream(out, true, StandardCharsets.UTF_8), new PrintStream(err, true, StandardCharsets.UTF_8));
    }

    @Test
    void aShortRunWithItsOwnServerIsClean() throws Exception {
        assertEquals(0, run("--requests", "120", "--clients", "8", "--token-delay-ms", "0", "--context", "1024", "--pages", "128",
            "--max-body-bytes", "65536"), () -> out + "\n" + err);
        final String o = out.toString(StandardCharsets.UTF_8);
        assertTrue(o.contains("load: 120 requests") && o.contains("p50") && o.contains("pool prefill  balanced")
            && o.contains("verdict: clean"), o);
    }

    @Test
    void againstARunningServerItChecksThePoolsThroughMetrics() throws Exception {
        try (KvServer server = KvServer.start(LoadGeneratorTest.small().build())) {
            assertEquals(0, run("--url", server.baseUri().toString(), "--requests", "80", "--clients", "8", "--over-capacity-tokens", "1100-1200",
                "--max-body-bytes", "65536", "--garbage-ratio", "0.1"),
                () -> out + "\n" + err);
            final String o = out.toString(StandardCharsets.UTF_8);
            assertTrue(o.contains("(from /metrics)") && o.contains("verdict: clean"), o);
            assertEquals(80 - o.lines().filter(l -> l.startsWith("  garbage_refused")).mapToLong(l -> Long.parseLong(l.substring(l.lastIndexOf(' ') + 1)
                .replace(",", ""))).sum(), server.counters().get("requests"), o);
        }
    }

    @Test
    void usageErrorsExitWithTwo() throws Exception {
        assertEquals(2, run("--clients", "many"));
        assertTrue(err.toString(StandardCharsets.UTF_8).contains("--clients needs a whole number"), err::toString);
        assertEquals(2, run("--url", "http://127.0.0.1:1/", "--context", "512"));
        assertTrue(err.toString(StandardCharsets.UTF_8).contains("need a server of our own"), err::toString);
        assertEquals(2, run("--stream-ratio", "2"));
        assertEquals(2, run("--url", "ftp://127.0.0.1/"));
        assertTrue(err.toString(StandardCharsets.UTF_8).contains("--url must be http://host:port/"), err::toString);
        for (String port : new String[] {"0", "65536", "99999"}) { // refused here, not by every request failing later
            final String url = "http://127.0.0.1:" + port + "/";
            assertEquals(2, run("--url", url, "--requests", "1"), url);
            assertTrue(err.toString(StandardCharsets.UTF_8).contains("--url must be http://host:port/ with a port in [1, 65535], was '"
                + url + "'"), err::toString);
        }
        assertEquals(0, run("--help"));
        assertTrue(out.toString(StandardCharsets.UTF_8).contains("--abort-ratio"));
        assertEquals(1, run("--requests", "1", "--context", "4096", "--prefill-pages", "8"));
        assertTrue(err.toString(StandardCharsets.UTF_8).contains("refusing to start"), err::toString);
    }
}
