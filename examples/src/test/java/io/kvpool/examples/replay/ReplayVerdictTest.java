package io.kvpool.examples.replay;

import org.junit.jupiter.api.Test;

import java.io.ByteArrayOutputStream;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * The replay's verdict and exit status follow its table's own rows, "completions whose KV is not exactly their
 * prompt" and "responses whose KV names another tenant", not only the marker regex; a replay in which nothing
 * completed is not clean.
 */
class ReplayVerdictTest {

    @Test
    void replayVerdictIgnoresCompletionsWhoseKvIsNotTheirPrompt() throws Exception {
        final ByteArrayOutputStream out = new ByteArrayOutputStream();
        final ByteArrayOutputStream err = new ByteArrayOutputStream();
        // the incident's switches except the free-page fill: stale pages read as the fill, not as another tenant's text
        final int rc = new ReplayCommand().run(new String[] {"--requests", "160", "--clients", "8", "--over-capacity-ratio", "0.3",
                "--abort-ratio", "0", "--fault-rate", "0", "--unsafe-placeholder-on-overflow", "--unsafe-length-check",
                "--unsafe-canary-check", "--unsafe-checksum"},
            new PrintStream(out, true, StandardCharsets.UTF_8), new PrintStream(err, true, StandardCharsets.UTF_8));
        final String o = out.toString(StandardCharsets.UTF_8);
        final Matcher m = Pattern.compile("completions whose KV is not exactly their prompt\\s*\\|\\s*(\\d+)").matcher(o);
        assertTrue(m.find(), o);
        final long mismatches = Long.parseLong(m.group(1));
        assertTrue(mismatches > 0, "precondition: the run produced completions with the wrong KV\n" + o);
        assertEquals(1, rc, "replay exited " + rc + " although " + mismatches + " completions did not get their own KV:\n" + o);
    }

    @Test
    void aReplayInWhichNothingCompletedIsNotClean() {
        // no request ran at all (as when every one is refused before it counts): no completion, so no KV was checked
        final io.kvpool.examples.load.LoadGenerator.Result none = new io.kvpool.examples.load.LoadGenerator.Result(java.util.List.of(), 1, 1);
        final Replay.Result r = new Replay.Result(null, null, null, none, java.util.Map.of(), java.util.Map.of(),
            new io.kvpool.examples.load.PoolCheck(true, java.util.List.of()));
        assertFalse(ReplayCommand.clean(r), "a replay that checked no KV was called clean");
    }
}
