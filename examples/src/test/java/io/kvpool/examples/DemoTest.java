package io.kvpool.examples;

import org.junit.jupiter.api.Test;

import java.io.ByteArrayOutputStream;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;

import static org.junit.jupiter.api.Assertions.assertTrue;

class DemoTest {
    @Test
    void theDemoRunsEveryStepAndEndsBalanced() {
        final ByteArrayOutputStream bytes = new ByteArrayOutputStream();
        new Demo(new PrintStream(bytes, true, StandardCharsets.UTF_8)).run();
        final String out = bytes.toString(StandardCharsets.UTF_8);
        assertTrue(out.contains("refused: advertised max context of 1,048,576 tokens") && out.contains("681,280"), out);
        assertTrue(out.contains("REJECTED_CONTEXT_TOO_LONG"), out);
        assertTrue(out.contains("tenant 1 again: 32 tokens attached"), out);
        assertTrue(out.contains("tenant 2, same tokens: 0 tokens attached"), out);
        assertTrue(out.contains("alice token 40 written by request 1, beam token 40 by request 9"), out);
        assertTrue(out.contains("still RECEIVING") && out.contains("DRAINED received → FREE"), out);
        assertTrue(out.contains("stale handle page[pool=") && out.contains("is now OWNED(gen=2"), out);
        assertTrue(out.contains("accounting balanced: every page is back"), out);
    }
}
