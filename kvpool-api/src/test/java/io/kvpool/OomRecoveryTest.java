package io.kvpool;

import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;

import java.nio.charset.StandardCharsets;
import java.nio.file.Path;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * An OutOfMemoryError in the middle of a sequence operation, with the heap really full (not one injected while it has
 * room), leaves no page OWNED by nobody: the recovery paths need no allocation to start. Each case runs
 * {@link OomRecoveryMain} in a child JVM with a 32 MiB heap, fills it, runs the operation, frees the heap and reads
 * the pool: once every sequence is closed no page may be OWNED.
 * <pre>
 *   close     Sequence.close() allocates nothing (a run of freed pages is linked through the return stack), so it succeeds
 *   truncate  Sequence.truncate(): the same
 *   forkClose a fork's close and its parent's: the same for a sequence made with its page tables
 *   evict     an append whose fill of an evicted prefix page throws, after every page of the step was taken: its undo
 *             runs in the catch block itself, with no lambda to allocate
 *   evictMany an append that evicts 100,000 cached pages: the copy of their fill list fails, every page taken
 *   retainAll a refused retainAll: its refusal is built after the references it took are dropped
 * </pre>
 * A {@code tryReserve} with the heap full leaves nothing reserved: its decision is made before it is counted.
 * {@code evictMany} needs a 64 MiB heap for its pool of 100,008 pages.
 */
class OomRecoveryTest {

    @ParameterizedTest
    @ValueSource(strings = {"close", "truncate", "forkClose"})
    void aCloseOrTruncateWithTheHeapFullAllocatesNothingAndFreesThePages(String what) throws Exception {
        final String out = runChild(what);
        assertTrue(out.contains("thrown=null"), "it allocated: a close that undoes a failed admission would then free nothing: " + out);
        assertTrue(out.contains("RESULT owned=0 "), "pages stay OWNED after the sequences were closed: " + out);
    }

    @ParameterizedTest
    @ValueSource(strings = {"evict", "evictMany", "retainAll"})
    void anOutOfMemoryErrorMidOperationLeavesNoPageOwnedByNobody(String what) throws Exception {
        final String out = runChild(what);
        assertTrue(out.contains("thrown=java.lang.OutOfMemoryError"), "the operation did not meet the OutOfMemoryError: " + out);
        assertTrue(out.contains("RESULT owned=0 "), "pages stay OWNED with no holder after the OutOfMemoryError: " + out);
    }

    @Test
    void anOutOfMemoryErrorInTryReserveLeavesNothingReserved() throws Exception {
        final String out = runChild("tryReserve");
        assertTrue(out.contains("thrown=java.lang.OutOfMemoryError"), "tryReserve did not meet the OutOfMemoryError: " + out);
        assertTrue(out.contains(" reserved=0 "), "a tryReserve that threw left pages reserved for nobody: " + out);
    }

    /** @return what {@link OomRecoveryMain} printed for {@code what}, after checking it exited normally */
    private static String runChild(String what) throws Exception {
        final String javaBin = Path.of(System.getProperty("java.home"), "bin", "java").toString();
        final String cp = Path.of("target", "classes").toAbsolutePath() + java.io.File.pathSeparator
            + Path.of("target", "test-classes").toAbsolutePath();
        final Process p = new ProcessBuilder(javaBin, what.equals("evictMany") ? "-Xmx64m" : "-Xmx32m", "-XX:+UseSerialGC", "-cp", cp, "io.kvpool.OomRecoveryMain", what)
            .redirectErrorStream(true).start();
        final String out = new String(p.getInputStream().readAllBytes(), StandardCharsets.UTF_8);
        assertEquals(0, p.waitFor(), out);
        System.out.println("[" + what + "]\n" + out);
        return out;
    }
}
