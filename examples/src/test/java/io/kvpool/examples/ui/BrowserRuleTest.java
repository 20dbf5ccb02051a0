package io.kvpool.examples.ui;

import org.junit.jupiter.api.Test;
import org.opentest4j.AssertionFailedError;
import org.opentest4j.TestAbortedException;

import java.util.List;

import static org.junit.jupiter.api.Assertions.assertDoesNotThrow;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;

/** The browser test's skip/require rule, without a browser. */
class BrowserRuleTest {
    private static final List<String> MISSING = List.of("/usr/bin/chromedriver (missing)");

    @Test
    void missingAlone_skipsWithTheReason() {
        final TestAbortedException e = assertThrows(TestAbortedException.class, () -> Browser.decide(MISSING, false));
        assertEquals("skipping: the headless browser test needs Debian's chromium and chromium-driver: /usr/bin/chromedriver (missing)"
            + " (.ci/run installs them: apt-get install chromium chromium-driver)", e.getMessage());
    }

    @Test
    void missingAndRequired_fails() {
        final AssertionFailedError e = assertThrows(AssertionFailedError.class, () -> Browser.decide(MISSING, true));
        assertEquals("KVPOOL_BROWSER_REQUIRED / kvpool.browser.required is set but the headless browser test needs Debian's chromium"
            + " and chromium-driver: /usr/bin/chromedriver (missing) (.ci/run installs them: apt-get install chromium chromium-driver)",
            e.getMessage());
    }

    @Test
    void nothingMissing_runs() {
        assertDoesNotThrow(() -> Browser.decide(List.of(), true));
        assertDoesNotThrow(() -> Browser.decide(List.of(), false));
    }
}
