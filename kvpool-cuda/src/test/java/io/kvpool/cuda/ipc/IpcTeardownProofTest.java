package io.kvpool.cuda.ipc;

import io.kvpool.DType;
import io.kvpool.KvLayout;
import io.kvpool.storage.HostPageStorage;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

import java.io.BufferedReader;
import java.io.IOException;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Set;
import java.util.concurrent.TimeUnit;
import java.util.stream.Stream;

import static org.junit.jupiter.api.Assertions.*;
import static org.junit.jupiter.api.Assumptions.assumeTrue;

/**
 * The CUDA IPC transport's teardown proof ({@link CudaIpcLink#tearDown()}, decided by
 * {@code ShmLink.peerProcessGone()}) against real peer processes (python3) that connect and send the shm
 * bootstrap, on the production decode-side link (a real {@link CudaIpcListener} over a Unix socket,
 * host-memory {@link FakeIpcEngine}): {@code tearDown()} is {@code true} only when no write from the importing
 * process can land.
 */
class IpcTeardownProofTest {

    static final KvLayout LAYOUT = new KvLayout(2, 1, 8, DType.FP32, 4);

    /**
     * The prefill stand-in: connects, sends the bootstrap (v2: pid, its pid namespace, its own start time) claiming
     * {@code argv[2]} as its pid (0: its own) — in mode "other-ns" from a pid namespace one off its real one —
     * prints "ready", then in mode "zombie-leader" ends its MAIN thread with pthread_exit while a second thread
     * keeps the process (and the socket, and in a real prefill its CUDA context) alive.
     */
    static final String PEER = """
        import socket, struct, sys, os, threading, time, ctypes
        path, claimed, mode = sys.argv[1], int(sys.argv[2]), sys.argv[3]
        ns = int(os.readlink('/proc/self/ns/pid')[5:-1]) + (1 if mode == 'other-ns' else 0)
        stat = open('/proc/self/stat').read()
        ticks = int(stat[stat.rindex(')') + 2:].split(' ')[19])
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.connect(path)
        s.sendall(struct.pack('<IHHqqqq', 0x4B565342, 2, 0, claimed or os.getpid(), ns, ticks, 0))
        t = threading.Thread(target=time.sleep, args=(60,))
        t.start()
        print('ready', flush=True)
        if mode == 'zombie-leader':
            ctypes.CDLL(None).pthread_exit(None)
        t.join()
        """;

    final List<Process> children = new ArrayList<>();
    final List<AutoCloseable> toClose = new ArrayList<>();

    @AfterEach
    void cleanUp() throws Exception {
        for (Process p : children) {
            p.destroyForcibly();
            p.waitFor(10, TimeUnit.SECONDS);
        }
        for (int i = toClose.size() - 1; i >= 0; i--) {
            toClose.get(i).close();
        }
    }

    private static boolean python3Works() {
        try {
            final Process p = new ProcessBuilder("python3", "-c", "import ctypes, socket").redirectErrorStream(true).start();
            return p.waitFor(20, TimeUnit.SECONDS) && p.exitValue() == 0;
        } catch (IOException | InterruptedException e) {
            return false;
        }
    }

    private Process startPeer(Path socket, long claimedPid, String mode) throws IOException {
        final Process p = new ProcessBuilder("python3", "-c", PEER, socket.toString(), Long.toString(claimedPid), mode)
            .redirectError(ProcessBuilder.Redirect.INHERIT).start();
        children.add(p);
        final BufferedReader r = new BufferedReader(new InputStreamReader(p.getInputStream(), StandardCharsets.UTF_8));
        assertEquals("ready", r.readLine(), "peer did not start");
        return p;
    }

    /** Accepts the peer's link on the decode side and registers a slot on it (the link has exported). */
    private CudaIpcLink acceptAndRegister(CudaIpcListener listener) throws InterruptedException {
        CudaIpcLink link = null;
        for (long end = System.nanoTime() + 10_000_000_000L; link == null && System.nanoTime() < end; ) {
            link = listener.accept();
            if (link == null) {
                Thread.sleep(5);
            }
        }
        assertNotNull(link, "no link accepted; last rejection: " + listener.lastRejection());
        toClose.add(link);
        final HostPageStorage pool = HostPageStorage.allocate(LAYOUT, 8);
        toClose.add(pool);
        link.register(pool, new int[] {0, 1}); // the region key (with the arena's handle) may now be in the peer
        return link;
    }

    private static char state(long pid) throws IOException {
        final String stat = Files.readString(Path.of("/proc/" + pid + "/stat"));
        return stat.charAt(stat.lastIndexOf(')') + 2);
    }

    private static long liveThreads(long pid) throws IOException {
        try (Stream<Path> tasks = Files.list(Path.of("/proc/" + pid + "/task"))) {
            return tasks.filter(t -> {
                try {
                    final String stat = Files.readString(t.resolve("stat"));
                    final char st = stat.charAt(stat.lastIndexOf(')') + 2);
                    return st != 'Z' && st != 'X';
                } catch (IOException e) {
                    return false;
                }
            }).count();
        }
    }

    /**
     * Finding: {@code ShmLink.processGone} takes a zombie thread-group LEADER ("Z" in /proc/PID/stat) for a
     * dead process. A leader is "Z" as soon as the main thread exited, while the other threads (and the
     * process's open files: its CUDA context, the IPC mapping, kernels queued on its stream) live on — also
     * transiently during every exit_group/SIGKILL of a multi-threaded process, until the last thread releases
     * the files. tearDown() then claims the proof while the importer can still write into our arena.
     */
    @Test
    void tearDownIsNotProvenWhileAZombieLeadersThreadsStillRun(@TempDir Path dir) throws Exception {
        assumeTrue(Files.isDirectory(Path.of("/proc/self/task")), "needs Linux /proc");
        assumeTrue(python3Works(), "needs python3 (with ctypes) on PATH for the peer process");
        final CudaIpcListener listener = CudaIpcTransport.listen(dir.resolve("ipc.sock"), FakeIpcEngine::new, Set.of());
        toClose.add(listener);
        final Process peer = startPeer(listener.socketPath(), 0, "zombie-leader");
        final CudaIpcLink link = acceptAndRegister(listener);
        assertEquals(peer.pid(), link.peerPid());

        for (long end = System.nanoTime() + 10_000_000_000L; state(peer.pid()) != 'Z' && System.nanoTime() < end; ) {
            Thread.sleep(5);
        }
        assertEquals('Z', state(peer.pid()), "the peer's main thread should have exited");
        final long live = liveThreads(peer.pid());
        assertTrue(live >= 1 && peer.isAlive(), "precondition: the peer process still runs a thread");

        assertFalse(link.tearDown(), "tearDown() claims that no write can land although process " + peer.pid() + " still runs "
            + live + " thread(s) (its leader is a zombie, the process is not gone)");
    }

    /**
     * The pid in the bootstrap names the process whose death ends the proof, so it must mean the process on the
     * socket. Any live pid must not be accepted: an honest prefill in another pid namespace (a container sharing
     * the socket and the GPU) reports its namespace-local pid, which here is some unrelated process, and tearDown()
     * would later prove that one's death, not the importer's. A pid whose start time here differs from the one
     * the peer reports, and a peer from another pid namespace, are refused before any link exists.
     */
    @Test
    void aPeerWhosePidMeansAnotherProcessHereGetsNoLink(@TempDir Path dir) throws Exception {
        assumeTrue(Files.isDirectory(Path.of("/proc/self/task")), "needs Linux /proc");
        assumeTrue(python3Works(), "needs python3 (with ctypes) on PATH for the peer process");
        final Process bystander = new ProcessBuilder("sleep", "60").start(); // "pid N" of the decode's namespace
        children.add(bystander);
        final CudaIpcListener listener = CudaIpcTransport.listen(dir.resolve("ipc.sock"), FakeIpcEngine::new, Set.of());
        toClose.add(listener);
        Thread.sleep(50); // start times are in clock ticks (10 ms): the peer must not start in the bystander's tick
        startPeer(listener.socketPath(), bystander.pid(), "plain"); // its own start time, the bystander's pid
        assertRefused(listener, "started at tick");
        startPeer(listener.socketPath(), 0, "other-ns");
        assertRefused(listener, "pid namespace");
        final Process honest = startPeer(listener.socketPath(), 0, "plain"); // the checks can pass
        assertEquals(honest.pid(), acceptAndRegister(listener).peerPid());
    }

    private static void assertRefused(CudaIpcListener listener, String why) throws InterruptedException {
        for (long end = System.nanoTime() + 10_000_000_000L; System.nanoTime() < end; ) {
            assertNull(listener.accept(), "a link was made for a peer whose pid means another process here");
            final String r = listener.lastRejection();
            if (r != null && r.contains(why)) {
                return;
            }
            Thread.sleep(5);
        }
        fail("no refusal naming '" + why + "'; last rejection: " + listener.lastRejection());
    }
}
