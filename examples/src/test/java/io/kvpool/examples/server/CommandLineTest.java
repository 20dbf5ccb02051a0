package io.kvpool.examples.server;

import io.kvpool.examples.server.config.Cli;
import io.kvpool.examples.server.config.Listen;
import io.kvpool.examples.server.config.ServerConfig;
import io.kvpool.examples.server.config.ServerOptions;
import io.kvpool.examples.server.config.UnsafeSwitches;
import io.kvpool.examples.server.link.FaultPlan;
import org.junit.jupiter.api.Test;

import java.io.ByteArrayOutputStream;
import java.io.IOException;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Set;
import java.util.TreeSet;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import java.util.stream.Collectors;
import java.util.stream.Stream;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

/** The command line: picocli parses and writes the help from the one table of {@link ServerOptions}. */
public class CommandLineTest {

    /** An option at the start of a help line, as picocli lays it out: {@code "      --port N   HTTP port…"}. */
    private static final Pattern HELP_OPTION = Pattern.compile("(?m)^ +(?:-h, )?(--[a-z][a-z0-9-]*)");

    /**
     * Checks that {@code cli}'s help lists every option it parses, each with its value label, and that every option
     * its help lists is one it parses (no hand-written line that could drift).
     */
    public static void helpAndParserAgree(Cli cli) {
        final String usage = cli.usage();
        for (Cli.Flag f : cli.flags()) {
            final String shown = f.name() + (f.isSwitch() ? "" : " " + f.label());
            assertTrue(Pattern.compile("(?m)^ +" + Pattern.quote(shown) + "( |$)").matcher(usage).find(), () -> shown + " not in\n" + usage);
            if (!f.description().isEmpty()) {
                final String firstWords = f.description().split(" ")[0];
                assertTrue(usage.contains(firstWords), () -> f.name() + "'s description not in\n" + usage);
            }
            final String[] args = f.isSwitch() ? new String[] {f.name()} : new String[] {f.name(), "x"};
            assertEquals(List.of(new Cli.Given(f.name(), f.isSwitch() ? null : "x")), cli.parse(args).given(), f.name());
        }
        final Matcher m = HELP_OPTION.matcher(usage);
        final Set<String> listed = new TreeSet<>();
        while (m.find()) {
            listed.add(m.group(1));
        }
        final Set<String> parsed = new TreeSet<>(cli.names());
        parsed.add("--help");
        assertEquals(parsed, listed, usage);
        assertTrue(cli.parse("--help").help());
        assertTrue(cli.parse("-h").help());
    }

    @Test
    void serveAndPreflightHelpListsExactlyTheOptionsTheyParse() {
        helpAndParserAgree(ServerOptions.serve());
        assertEquals(ServerOptions.names(), ServerOptions.serve().names());
        assertTrue(ServerConfig.usage().startsWith("usage: KvServerMain serve [options]"), ServerConfig::usage);
        assertTrue(PreflightCommand.usage().startsWith("usage: KvServerMain preflight"), PreflightCommand::usage);
        assertTrue(PreflightCommand.usage().contains("--prefill-url URL"), PreflightCommand::usage);
    }

    /** Every default the help shows is the builder's: giving it explicitly changes nothing. */
    @Test
    void theDefaultsTheHelpShowsAreTheDefaults() {
        final ServerConfig defaults = ServerConfig.builder().build();
        assertEquals(defaults, ServerConfig.parse());
        final Pattern shown = Pattern.compile("\\[([^\\]]+)]$");
        int checked = 0;
        for (Cli.Flag f : ServerOptions.serve().flags()) {
            final Matcher m = shown.matcher(f.description());
            if (f.isSwitch() || !m.find() || f.name().equals("--work-dir")) { // --work-dir's default is "a new temp dir"
                continue;
            }
            assertEquals(defaults, ServerConfig.parse(f.name(), m.group(1)), f.name() + " " + m.group(1));
            checked++;
        }
        assertTrue(checked >= 30, "options with a default: " + checked);
        assertTrue(ServerConfig.usage().contains("--port N") && ServerConfig.usage().contains("[8080]"), ServerConfig::usage);
    }

    @Test
    void anUnknownOptionIsRefusedInPicocliWordsWithExitTwo() throws Exception {
        for (String[] args : new String[][] {{"--nope"}, {"serve", "--nope"}, {"preflight", "--nope"}, {"load", "--nope"},
            {"replay", "--nope"}}) {
            final ByteArrayOutputStream out = new ByteArrayOutputStream();
            final ByteArrayOutputStream err = new ByteArrayOutputStream();
            assertEquals(2, KvServerMain.run(args, new PrintStream(out, true, StandardCharsets.UTF_8),
                new PrintStream(err, true, StandardCharsets.UTF_8)), List.of(args)::toString);
            final String e = err.toString(StandardCharsets.UTF_8);
            assertTrue(e.startsWith("error: Unknown option: '--nope'") && e.contains("usage: KvServerMain"), e);
            assertEquals("", out.toString(StandardCharsets.UTF_8));
        }
    }

    @Test
    void theHttpLimitsHaveTheirDefaultsAndTheirRanges() {
        final ServerConfig d = ServerConfig.parse();
        assertEquals(1024, d.maxConnections());
        assertEquals(Duration.ofSeconds(10), d.headerTimeout());
        assertEquals(Duration.ofSeconds(60), d.idleTimeout());
        assertEquals(16_384, d.maxHeaderBytes());
        assertEquals(Duration.ofSeconds(10), d.stallTimeout());
        assertEquals(Duration.ofSeconds(10), d.shutdownGrace());
        assertEquals(new Listen("127.0.0.1", 8080, 1 << 20, 1024, Duration.ofSeconds(10), Duration.ofSeconds(60), 16_384,
            Duration.ofSeconds(10), Duration.ofSeconds(10)), d.listen());

        final ServerConfig c = ServerConfig.parse("--max-connections", "1_000_000", "--header-timeout-ms", "250", "--idle-timeout-ms=5000",
            "--max-header-bytes", "1024", "--stall-timeout-ms", "1", "--shutdown-grace-ms", "0");
        assertEquals(Duration.ZERO, c.shutdownGrace(), "0: abort at once, as close() does");
        assertEquals(1_000_000, c.listen().maxConnections());
        assertEquals(Duration.ofMillis(250), c.listen().headerTimeout());
        assertEquals(Duration.ofMillis(5000), c.listen().idleTimeout());
        assertEquals(1024, c.listen().maxHeaderBytes());
        assertEquals(Duration.ofMillis(1), c.listen().stallTimeout());
        assertEquals(c, c.toBuilder().build());
        assertEquals(c.listen(), ServerConfig.builder().maxConnections(1_000_000).headerTimeout(Duration.ofMillis(250))
            .idleTimeout(Duration.ofMillis(5000)).maxHeaderBytes(1024).stallTimeout(Duration.ofMillis(1)).shutdownGrace(Duration.ZERO)
            .build().listen());

        assertRefused("--max-connections must be in [1, 1000000], was 0", "--max-connections", "0");
        assertRefused("--max-connections must be in [1, 1000000], was 1000001", "--max-connections", "1000001");
        assertRefused("--max-connections needs a whole number, was 'many'", "--max-connections", "many");
        assertRefused("--max-header-bytes must be in [1024, 1048576], was 1023", "--max-header-bytes", "1023");
        assertRefused("--max-header-bytes must be in [1024, 1048576], was 1048577", "--max-header-bytes", "1048577");
        assertRefused("--header-timeout-ms must be positive, was 0 ms", "--header-timeout-ms", "0");
        assertRefused("--idle-timeout-ms must be positive, was -5 ms", "--idle-timeout-ms", "-5");
        assertRefused("--stall-timeout-ms must be positive, was 0 ms", "--stall-timeout-ms", "0");
        assertRefused("--shutdown-grace-ms must be ≥ 0, was -1 ms", "--shutdown-grace-ms", "-1");
        assertRefused("Missing required parameter for option '--stall-timeout-ms' (N)", "--stall-timeout-ms");
    }

    @Test
    void eachRangeErrorCarriesItsNumbers() {
        assertRefused("--port must be in [0, 65535], was 70000", "--port", "70000");
        assertRefused("--max-body-bytes must be in [64, 2147483646], was 10", "--max-body-bytes", "10");
        assertRefused("--context must be in [1, 2147483647], was 0", "--context", "0");
        assertRefused("--prefill-pages (or --pages) must be in [1, 16777216], was 0", "--prefill-pages", "0");
        assertRefused("--tokens-per-page must be in [1, 4096], was 5000", "--tokens-per-page", "5000");
        assertRefused("--request-timeout-ms must be positive, was 0 ms", "--request-timeout-ms", "0");
        assertRefused("--token-delay-ms must be ≥ 0, was -1 ms", "--token-delay-ms", "-1");
        assertRefused("--ucx-keepalive-ms must be 10 ms to 1 hour, was 5", "--ucx-keepalive-ms", "5");
        assertRefused("--kv-heartbeat-ms must be ≥ 0, was -1 ms", "--kv-heartbeat-ms", "-1");
        assertRefused("--kv-heartbeat-timeout-ms must be positive, was 0 ms", "--kv-heartbeat-timeout-ms", "0");
        assertRefused("--kv-heartbeat-ms must be at most 365 days (31536000000 ms), was 31536000001", "--kv-heartbeat-ms", "31536000001");
        assertRefused("--kv-heartbeat-timeout-ms must be at most 365 days (31536000000 ms), was 31536000001",
            "--kv-heartbeat-timeout-ms", "31536000001");
        assertRefused("--port is out of range: 99999999999", "--port", "99999999999");
    }

    /**
     * A duration option takes at most 365 days: every one is turned into nanoseconds somewhere (a deadline, a
     * scheduled task), and a long of nanoseconds holds 292 years. A larger value is refused at parse time, naming the
     * option and the value, never by an overflow once the pools are built.
     */
    @Test
    void everyDurationOptionRefusesMoreThanAYearNamingTheOptionAndTheValue() throws Exception {
        final String huge = Long.toString(Long.MAX_VALUE);
        int checked = 0;
        for (Cli.Flag f : ServerOptions.serve().flags()) {
            if (!f.name().endsWith("-ms")) {
                continue;
            }
            final IllegalArgumentException e = assertThrows(IllegalArgumentException.class, () -> ServerConfig.parse(f.name(), huge),
                f.name());
            assertTrue(e.getMessage().contains(f.name()) && e.getMessage().contains(huge), e::getMessage);
            checked++;
        }
        assertTrue(checked >= 13, "duration options: " + checked);
        assertEquals(Duration.ofDays(365), ServerConfig.parse("--request-timeout-ms", "31_536_000_000").requestTimeout());

        final ByteArrayOutputStream err = new ByteArrayOutputStream();
        assertEquals(2, KvServerMain.run(new String[] {"--port", "0", "--transfer-timeout-ms", huge}, new PrintStream(new ByteArrayOutputStream(),
            true, StandardCharsets.UTF_8), new PrintStream(err, true, StandardCharsets.UTF_8)));
        assertTrue(err.toString(StandardCharsets.UTF_8).startsWith("error: --transfer-timeout-ms must be at most 365 days (31536000000 ms), was "
            + huge), err::toString);
    }

    /** A value out of range is refused naming the option given and the value, whichever record checks it. */
    @Test
    void aValueOutOfRangeIsRefusedNamingTheOptionGivenAndTheValue() {
        for (String[] args : new String[][] {{"--pages", "0"}, {"--prefill-pages", "16777217"}, {"--decode-pages", "-1"},
            {"--tokens-per-page", "0"}, {"--context", "3000000000"}, {"--layers", "0"}, {"--kv-heads", "2000"}, {"--head-dim", "0"},
            {"--port", "70000"}, {"--max-body-bytes", "10"}, {"--max-connections", "0"}, {"--max-header-bytes", "1023"},
            {"--header-timeout-ms", "0"}, {"--idle-timeout-ms", "-5"}, {"--stall-timeout-ms", "0"}, {"--shutdown-grace-ms", "-1"},
            {"--request-timeout-ms", "0"}, {"--token-delay-ms", "-1"}, {"--heartbeat-ms", "0"}, {"--transfer-timeout-ms", "0"},
            {"--reconnect-ms", "0"}, {"--kv-connect-timeout-ms", "0"}, {"--kv-heartbeat-ms", "-1"}, {"--kv-heartbeat-timeout-ms", "0"}}) {
            final IllegalArgumentException e = assertThrows(IllegalArgumentException.class, () -> ServerConfig.parse(args), args[0]);
            assertTrue(e.getMessage().contains(args[0]) && e.getMessage().contains(args[1]), e::getMessage);
        }
    }

    private static void assertRefused(String expected, String... args) {
        final IllegalArgumentException e = assertThrows(IllegalArgumentException.class, () -> ServerConfig.parse(args));
        assertEquals(expected, e.getMessage());
    }

    @Test
    void aLaterOptionWinsOverAnEarlierOneItOverlaps() {
        assertEquals(700, ServerConfig.parse("--pages", "300", "--decode-pages", "700").decodePages());
        assertEquals(300, ServerConfig.parse("--decode-pages", "700", "--pages", "300").decodePages());
        assertEquals(9, ServerConfig.parse("--port", "8", "--port=9").port());
        assertEquals(new FaultPlan(0.5, 7), ServerConfig.parse("--seed", "7", "--fault-rate", "0.5").faults());
        assertEquals(new FaultPlan(0.5, -7), ServerConfig.parse("--fault-rate", "0.5", "--seed", "-7").faults());
    }

    /** The parser's --unsafe- options are exactly {@link UnsafeSwitches#switches()}, and no other main source names one. */
    @Test
    void theUnsafeSwitchesLiveInOnePlace() throws IOException {
        final Set<String> switches = UnsafeSwitches.switches().stream().map(UnsafeSwitches.Switch::flag).collect(Collectors.toSet());
        final Set<String> parsed = ServerOptions.serve().names().stream().filter(n -> n.contains("unsafe")).collect(Collectors.toSet());
        assertEquals(switches, parsed);
        for (UnsafeSwitches.Switch s : UnsafeSwitches.switches()) {
            assertEquals(s.turnsOff(), ServerConfig.parse(s.flag()).switches(), s.flag());
            assertTrue(s.turnsOff().any(), s.flag());
        }
        assertEquals(UnsafeSwitches.INCIDENT, ServerConfig.parse("--unsafe-incident", "--unsafe-checksum").switches());
        assertFalse(ServerConfig.parse().switches().any());

        // a string literal that spells a switch ("--unsafe-…", "unsafe-…") or maps safeguards to flags outside UnsafeSwitches
        final Pattern literal = Pattern.compile("\"[^\"\\n]*(?<![a-z'])(--)?unsafe-[^\"\\n]*\"");
        final List<String> found = new ArrayList<>();
        try (Stream<Path> files = Files.walk(Path.of("src/main/java"))) {
            for (Path p : files.filter(f -> f.toString().endsWith(".java")).toList()) {
                if (p.getFileName().toString().equals("UnsafeSwitches.java")) {
                    continue;
                }
                final String[] lines = Files.readString(p).split("\n");
                for (int i = 0; i < lines.length; i++) {
                    if (literal.matcher(lines[i]).find()) {
                        found.add(p.getFileName() + ":" + (i + 1) + ": " + lines[i].strip());
                    }
                }
            }
        }
        assertEquals(List.of(), found);
    }
}
