package io.kvpool.transfer.testkit;

import io.kvpool.transfer.*;
import io.kvpool.KvPool;
import io.kvpool.PoolSnapshot;
import io.kvpool.transfer.spi.PeerLink;

import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.locks.LockSupport;
import java.util.function.BooleanSupplier;
import java.util.function.Function;
import java.util.function.Supplier;
import java.util.function.ToLongFunction;

import static org.junit.jupiter.api.Assertions.*;

/**
 * The decode side of a two-process protocol test (shared memory, UCX): a pool, a receiver, and the
 * prefill child process it spawned, with bounded waits whose failures say what the receiver, the pool
 * and the child were doing. Subclasses build the transport and start the child. Shared with kvpool-cuda's
 * CUDA IPC scenarios through kvpool-transfer's test-jar.
 */
public abstract class ChildProcessDecode implements AutoCloseable {

    /** How long any wait may take before the test fails, unless a subclass chooses its own {@link #waitMs}. */
    public static final long WAIT_MS = 8_000;

    protected final Path dir;
    protected final Path log;
    /** How long any wait of this decode side may take before the test fails. */
    protected final long waitMs;
    public final KvPool pool;
    public final TransferReceiver receiver;
    public Process child;
    /** The child's peer id in {@link #receiver}, once {@link #handshake} added it; -1 before. */
    public int peer = -1;

    /** A receiver with checksums on, {@link Kv#LAYOUT}'s production identity and {@link #WAIT_MS} for every wait. */
    protected ChildProcessDecode(Path dir, KvPool pool, Duration completionTimeout, Duration drainTimeout) {
        this(dir, pool, p -> TransferReceiver.builder(p, PeerIdentity.of(Kv.LAYOUT, "test-model@r1", "production", "build-1"))
            .completionTimeout(completionTimeout).drainTimeout(drainTimeout).build(), WAIT_MS);
    }

    /** A receiver that {@code receiver} builds on {@code pool}, and {@code waitMs} for every wait. */
    protected ChildProcessDecode(Path dir, KvPool pool, Function<KvPool, TransferReceiver> receiver, long waitMs) {
        this.dir = dir;
        this.log = dir.resolve("child.log");
        this.pool = pool;
        this.receiver = receiver.apply(pool);
        this.waitMs = waitMs;
    }

    /** Accepts the child's link (see {@link #acceptChild}), adds it and runs the handshake until it is decided. */
    public abstract Peer connect() throws Exception;

    /**
     * Polls {@code accept} until the child's link arrives, failing if the child dies or {@link #waitMs} passes (with
     * {@code lastRejection} in the message), and checks that the link's peer is the child process.
     */
    protected <L extends PeerLink> L acceptChild(Supplier<L> accept, Supplier<?> lastRejection, ToLongFunction<L> peerPid) {
        final long deadline = System.nanoTime() + TimeUnit.MILLISECONDS.toNanos(waitMs);
        L link;
        while ((link = accept.get()) == null) {
            assertTrue(child.isAlive(), () -> "child died before connecting: " + childLog());
            assertTrue(System.nanoTime() < deadline, () -> "child never connected; listener: " + lastRejection.get()
                + "; child: " + childLog());
            LockSupport.parkNanos(1_000_000);
        }
        assertEquals(child.pid(), peerPid.applyAsLong(link));
        return link;
    }

    /** Adds {@code link} as {@link #peer} and runs the handshake until it is decided. */
    public Peer handshake(PeerLink link) {
        peer = receiver.addPeer(link);
        final Peer p = receiver.peer(peer);
        drive(() -> p.state() != Peer.State.HANDSHAKE, "the handshake to end");
        return p;
    }

    /** Closes the receiver (the child sees its link fail, finishes and exits) and returns the child's RESULT line. */
    public String finish() throws Exception {
        receiver.close();
        return childResult();
    }

    /**
     * Starts {@code main} in a child JVM of this test's class path, its output going to the child log. {@code jvmArgs}
     * come after the defaults ({@code -Xmx64m}, C1 only), so they may override them.
     */
    protected Process spawn(List<String> jvmArgs, Class<?> main, String... args) throws Exception {
        final List<String> cmd = new ArrayList<>();
        cmd.add(Path.of(System.getProperty("java.home"), "bin", "java").toString());
        cmd.addAll(List.of("-Xmx64m", "-XX:TieredStopAtLevel=1"));
        cmd.addAll(jvmArgs);
        cmd.addAll(List.of("-cp", System.getProperty("java.class.path"), main.getName()));
        cmd.addAll(List.of(args));
        return new ProcessBuilder(cmd).redirectErrorStream(true).redirectOutput(log.toFile()).start();
    }

    /** @return the child process */
    public Process child() {
        return child;
    }

    /** Runs the receiver's duty cycle until {@code done}, failing after {@link #waitMs} with {@code what}. */
    public void drive(BooleanSupplier done, String what) {
        final long deadline = System.nanoTime() + TimeUnit.MILLISECONDS.toNanos(waitMs);
        while (!done.getAsBoolean()) {
            assertTrue(System.nanoTime() < deadline, () -> "timed out after " + waitMs + " ms waiting for " + what + "; "
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
        assertTrue(child.waitFor(waitMs, TimeUnit.MILLISECONDS), () -> "child did not exit within " + waitMs + " ms: " + childLog());
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

    /**
     * Closes the receiver, kills the child (SIGKILL also ends a stopped process) and waits for it, then
     * {@link #closeTransport()}, then the pool.
     */
    @Override
    public void close() throws Exception {
        receiver.close();
        child.destroyForcibly();
        child.waitFor(10, TimeUnit.SECONDS);
        closeTransport();
        pool.close();
    }

    /** Closes this side's listener or transport (before the pool, which it may have registered). */
    protected abstract void closeTransport() throws Exception;

    /** Asserts the decode pool balances with every page free. */
    public void assertPoolClean() {
        final PoolSnapshot s = pool.verifyAccounting();
        assertTrue(s.balanced(), s::toString);
        assertEquals(0, s.inUse(), () -> "pages still in use: " + s);
        assertEquals(pool.capacity(), s.free(), s::toString);
    }
}
