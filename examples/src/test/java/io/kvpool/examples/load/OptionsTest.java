package io.kvpool.examples.load;

import org.junit.jupiter.api.Test;

import java.time.Duration;
import java.util.List;
import java.util.Set;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

class OptionsTest {

    @Test
    void ownFlagsAreKeptAndTheRestGoesToTheServer() {
        final Options o = Options.parse(new String[] {"--clients", "8", "--context=512", "--unsafe-incident", "--duration=2s",
            "--token-delay-ms", "0", "--prompt-tokens", "5-9"}, Set.of("--clients", "--duration", "--prompt-tokens"));
        assertEquals(8, o.number("--clients", 1, 1, 100));
        assertEquals(Duration.ofSeconds(2), o.duration("--duration", Duration.ZERO));
        assertArrayEquals(new int[] {5, 9}, o.range("--prompt-tokens", 1, 2, 1, 100));
        assertEquals(List.of("--context", "512", "--unsafe-incident", "--token-delay-ms", "0"), o.serverArgs());
        assertFalse(o.help());
        assertEquals(0.25, o.ratio("--abort-ratio", 0.25));
        assertTrue(Options.parse(new String[] {"--help"}, Set.of()).help());
    }

    @Test
    void badValuesNameTheFlag() {
        final Set<String> own = Set.of("--clients", "--duration", "--r", "--x");
        assertTrue(assertThrows(IllegalArgumentException.class, () -> Options.parse(new String[] {"--clients", "many"}, own)
            .number("--clients", 1, 1, 10)).getMessage().contains("--clients needs a whole number, was 'many'"));
        assertTrue(assertThrows(IllegalArgumentException.class, () -> Options.parse(new String[] {"--clients", "0"}, own)
            .number("--clients", 1, 1, 10)).getMessage().contains("[1, 10], was 0"));
        assertTrue(assertThrows(IllegalArgumentException.class, () -> Options.parse(new String[] {"--r", "1.5"}, own)
            .ratio("--r", 0)).getMessage().contains("--r must be in [0, 1]"));
        assertTrue(assertThrows(IllegalArgumentException.class, () -> Options.parse(new String[] {"--x", "9-3"}, own)
            .range("--x", 1, 2, 1, 100)).getMessage().contains("MIN-MAX"));
        assertEquals(Duration.ofMillis(500), Options.parse(new String[] {"--duration", "500ms"}, own).duration("--duration", null));
        assertThrows(IllegalArgumentException.class, () -> Options.parse(new String[] {"--duration", "soon"}, own).duration("--duration", null));
        // a duration whose nanoseconds overflow a long is bad usage, not an ArithmeticException after the server started
        assertTrue(assertThrows(IllegalArgumentException.class, () -> Options.parse(new String[] {"--duration", "10000000000"}, own)
            .duration("--duration", null)).getMessage().contains("at most 365 days"));
        assertEquals(Duration.ofDays(365), Options.parse(new String[] {"--duration", "31536000s"}, own).duration("--duration", null));
        assertThrows(IllegalArgumentException.class, () -> Options.parse(new String[] {"--clients"}, own));
        assertThrows(IllegalArgumentException.class, () -> Options.parse(new String[] {"clients"}, own));
    }

    @Test
    void loadsHelpListsExactlyTheOptionsItParsesItsOwnAndTheServers() {
        final Options.Command c = LoadCommand.command();
        io.kvpool.examples.server.CommandLineTest.helpAndParserAgree(c.cli());
        assertTrue(c.cli().names().containsAll(io.kvpool.examples.server.config.ServerOptions.names()), "every server option");
        assertTrue(LoadCommand.usage().contains("--abort-ratio P") && LoadCommand.usage().contains("--port N"), LoadCommand::usage);
        assertTrue(java.util.regex.Pattern.compile("(?m)^ +--port N .*\\[0]$").matcher(LoadCommand.usage()).find(), LoadCommand::usage);
        // --seed and --max-body-bytes are load's own, and load passes them on itself
        final Options o = c.parse(new String[] {"--seed", "5", "--max-body-bytes", "4096", "--port", "1", "--unsafe-checksum"});
        assertEquals("5", o.text("--seed", null));
        assertEquals("4096", o.text("--max-body-bytes", null));
        assertEquals(List.of("--port", "1", "--unsafe-checksum"), o.serverArgs());
        assertTrue(assertThrows(IllegalArgumentException.class, () -> c.parse(new String[] {"--nope"})).getMessage()
            .contains("Unknown option: '--nope'"));
    }
}
