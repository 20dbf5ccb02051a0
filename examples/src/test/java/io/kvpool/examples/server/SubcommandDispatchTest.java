package io.kvpool.examples.server;

import org.junit.jupiter.api.Test;

import java.io.ByteArrayOutputStream;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

/** {@code replay} and {@code load} are reachable through {@link KvServerMain} and listed in its usage. */
class SubcommandDispatchTest {

    @Test
    void replayAndLoadAreSubcommands() throws Exception {
        final ByteArrayOutputStream out = new ByteArrayOutputStream();
        final PrintStream o = new PrintStream(out, true, StandardCharsets.UTF_8);
        assertEquals(0, KvServerMain.run(new String[] {"--help"}, o, o));
        assertTrue(out.toString(StandardCharsets.UTF_8).contains("  replay ") && out.toString(StandardCharsets.UTF_8).contains("  load "), out::toString);
        out.reset();
        assertEquals(0, KvServerMain.run(new String[] {"replay", "--help"}, o, o));
        assertTrue(out.toString(StandardCharsets.UTF_8).startsWith("usage: KvServerMain replay"), out::toString);
        out.reset();
        assertEquals(0, KvServerMain.run(new String[] {"load", "--help"}, o, o));
        assertTrue(out.toString(StandardCharsets.UTF_8).startsWith("usage: KvServerMain load"), out::toString);
    }
}
