package io.kvpool.transfer;

import io.kvpool.KvPool;
import io.kvpool.PoolSnapshot;

import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.locks.LockSupport;
import java.util.function.BooleanSupplier;

import static org.junit.jupiter.api.Assertions.*;

/**
 * The decode side of a two-process protocol test (shared memory, UCX): a pool, a receiver, and the
 * prefill child process it spawned, with bounded waits whose failures say what the receiver, the pool
 * and the child were doing. Subclasses build the transport and start the child.
 */
public abstract class ChildProcessDecode implements AutoCloseable {

    /** How long any wait may take before the test fails. */
    public static final long WAIT_MS = 8_000;

    protected final Path dir;
    protected final Path log;
    public final KvPool pool;
    public final TransferReceiver receiver;
    public Process child;

    protected ChildProcessDecode(Path dir, KvPool pool, Duration completionTimeout, Duration drainTimeout) {
        this.dir = dir;
        this.log = dir.resolve("child.log");
        this.pool = pool;
        this.receiver = TransferReceiver.builder(pool, PeerIdentity.of(Kv.LAYOUT, "test-model@r1", "production", "build-1"))
            .completionTimeout(completionTimeout).drainTimeout(drainTimeout).build();
    }

    /** Starts {@code main} in a child JVM of this test's class path, its output going to the child log. */
    protected Process spawn(List<String> jvmArgs, Class<?> main, String... args) throws Exception {
        final List<String> cmd = new ArrayList<>();
        cmd.add(Path.of(System.getProperty("java.home"), "bin", "java").toString());
        cmd.addAll(jvmArgs);
        cmd.addAll(List.of("-Xmx64m", "-XX:TieredStopAtLevel=1", "-cp", System.getProperty("java.class.path"), main.getName()));
        cmd.addAll(List.of(args));
        return new ProcessBuilder(cmd).redirectErrorStream(true).redirectOutput(log.toFile()).start();
    }

    /** @return the child process */
    public Process child() {
        return child;
    }

    /** Runs the receiver's duty cycle until {@code done}, failing after {@link #WAIT_MS} with {@code what}. */
    public void drive(BooleanSupplier done, String what) {
        final long deadline = System.nanoTime() + TimeUnit.MILLISECONDS.toNanos(WAIT_MS);
        while (!done.getAsBoolean()) {
            assertTrue(System.nanoTime() < deadline, () -> "timed out after " + WAIT_MS + " ms waiting for " + what + "; "
                + receiver + ", pool " + pool.snapshot() + "; child " + (child.isAlive() ? "alive" : "exited " + child.exitValue())
                + ": " + childLog());
            if (receiver.doWork() == 0) {
                LockSupport.parkNanos(200_000);
            }
        }
    }

    /** Runs the duty cycle for {@code ms} (to show that nothing changes meanwhile). */
    public void idleFor(long ms) {
        final long end = System.nanoTime() + TimeUnit.MILLISECONDS.toNanos(ms);
        while (System.nanoTime() < end) {
            if (receiver.doWork() == 0) {
                LockSupport.parkNanos(200_000);
            }
        }
    }

    /** Waits (driving the receiver) for the child to create a control file. */
    public void awaitCtl(String name) {
        drive(() -> Files.exists(dir.resolve(name)), "the child's control file '" + name + "'");
    }

    /** Creates a control file the child waits for. */
    public void ctl(String name) throws Exception {
        Files.createFile(dir.resolve(name));
    }

    /** Waits for the child to exit 0 (its own pool clean) and returns its RESULT line. */
    protected String childResult() throws Exception {
        assertTrue(child.waitFor(WAIT_MS, TimeUnit.MILLISECONDS), () -> "child did not exit within " + WAIT_MS + " ms: " + childLog());
        final String out = childLog();
        assertEquals(0, child.exitValue(), () -> "the child's own pool is not clean: " + out);
        return out.lines().filter(l -> l.startsWith("RESULT ")).findFirst()
            .orElseGet(() -> fail("no RESULT line from the child: " + out));
    }

    /** @return what the child printed so far */
    public String childLog() {
        try {
            return Files.readString(log);
        } catch (Exception e) {
            return "(no log: " + e + ")";
        }
    }

    /** Asserts the decode pool balances with every page free. */
    public void assertPoolClean() {
        final PoolSnapshot s = pool.verifyAccounting();
        assertTrue(s.balanced(), s::toString);
        assertEquals(0, s.inUse(), () -> "pages still in use: " + s);
        assertEquals(pool.capacity(), s.free(), s::toString);
    }
}
