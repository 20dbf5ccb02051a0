package io.kvpool.transfer;

import org.junit.jupiter.api.Test;

import java.util.ArrayList;
import java.util.List;
import java.util.ResourceBundle;

import static org.junit.jupiter.api.Assertions.*;

/** Per-transfer events log at most one line per key per interval; the next line counts what was left out. */
class RateLimitedLogTest {

    /** A logger that keeps its lines. */
    static final class Lines implements System.Logger {
        final List<String> lines = new ArrayList<>();

        @Override
        public String getName() {
            return "test";
        }

        @Override
        public boolean isLoggable(Level level) {
            return true;
        }

        @Override
        public void log(Level level, ResourceBundle bundle, String msg, Throwable thrown) {
            lines.add(msg);
        }

        @Override
        public void log(Level level, ResourceBundle bundle, String format, Object... params) {
            lines.add(format);
        }
    }

    @Test
    void oneLinePerKeyPerIntervalWithTheCountOfTheRest() {
        final Lines out = new Lines();
        final ManualClock clock = new ManualClock();
        final RateLimitedLog log = new RateLimitedLog(out, clock, 10_000_000_000L);
        for (int i = 0; i < 1000; i++) {
            final int n = i;
            log.log(System.Logger.Level.WARNING, "quarantine", () -> "q" + n);
            clock.advanceMillis(1); // 1000 events within one second
        }
        assertEquals(List.of("q0"), out.lines, "one line for a burst within the interval");
        assertEquals(999, log.suppressed("quarantine"));

        log.log(System.Logger.Level.WARNING, "other", () -> "o0");
        assertEquals(List.of("q0", "o0"), out.lines, "keys are limited separately");

        clock.advanceMillis(9_000); // 10 s after the first line
        assertTrue(log.log(System.Logger.Level.WARNING, "quarantine", () -> "q1000"));
        assertEquals("q1000 (999 more since the last line)", out.lines.get(2));
        assertEquals(0, log.suppressed("quarantine"));

        clock.advanceMillis(10_000);
        log.log(System.Logger.Level.WARNING, "quarantine", () -> "q1001");
        assertEquals("q1001", out.lines.get(3), "nothing left out: no count");
        assertEquals(4, out.lines.size());
    }

    @Test
    void aSuppressedLineIsNeverBuilt() {
        final Lines out = new Lines();
        final RateLimitedLog log = new RateLimitedLog(out, new ManualClock(), 1_000_000_000L);
        final int[] built = {0};
        for (int i = 0; i < 100; i++) {
            log.log(System.Logger.Level.WARNING, "k", () -> "line " + ++built[0]);
        }
        assertEquals(1, built[0], "the message of a suppressed line must not be built");
    }
}
