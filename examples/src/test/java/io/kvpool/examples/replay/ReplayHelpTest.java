package io.kvpool.examples.replay;

import io.kvpool.examples.server.CommandLineTest;
import io.kvpool.examples.server.config.ServerOptions;
import org.junit.jupiter.api.Test;

import java.util.regex.Pattern;

import static org.junit.jupiter.api.Assertions.assertTrue;

class ReplayHelpTest {

    @Test
    void replaysHelpListsExactlyTheOptionsItParsesWithTheReplaysServerDefaults() {
        CommandLineTest.helpAndParserAgree(ReplayCommand.command().cli());
        assertTrue(ReplayCommand.command().cli().names().containsAll(ServerOptions.names()), "every server option");
        final String usage = ReplayCommand.usage();
        assertTrue(usage.startsWith("usage: KvServerMain replay"), usage);
        assertTrue(Pattern.compile("(?m)^ +--context TOKENS .*\\[2048]$").matcher(usage).find(), usage);
        assertTrue(Pattern.compile("(?m)^ +--prefill-pages N .*\\[83]$").matcher(usage).find(), usage);
        assertTrue(usage.contains("--unsafe-incident"), usage);
    }
}
