package io.kvpool.cuda.ipc;

import io.kvpool.DType;
import io.kvpool.KvLayout;
import io.kvpool.KvPool;
import io.kvpool.PoolSnapshot;
import io.kvpool.Sequence;
import io.kvpool.cuda.DevicePageStorage;
import io.kvpool.transfer.Peer;
import io.kvpool.transfer.PeerIdentity;
import io.kvpool.transfer.TransferSender;

import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.concurrent.locks.LockSupport;
import java.util.function.Supplier;

/**
 * The prefill process of the two-process CUDA IPC tests ({@link TwoProcessScenarios}): a pool, a
 * {@link TransferSender} with checksums off, connected to the test's {@link CudaIpcListener}. It writes
 * synthetic KV ({@link IpcKv}) for requests {@code 1..N} ({@link #tokens} tokens each), offers them and
 * runs {@code doWork()} until its peer goes down (the test closes its receiver), then closes the sender,
 * checks its own pool and prints one {@code RESULT} line. Exit code 0 iff its pool is clean (balanced,
 * nothing in use, no transfer active); 3 on its own deadline.
 *
 * <pre>
 * args: socket engine environment scenario requests handleFile
 *   engine  cuda: pools on the GPU (DevicePageStorage), the JCuda engine
 *           fake: a host pool, the host-memory engine over the decode side's pool file (no GPU)
 *   serve   offer and serve at once
 *   gate    offer, complete the handshake, create ctl file "frozen" and stop calling doWork() until
 *           "go" appears (then serve), or "drop" appears: open the decode arena from handleFile itself
 *           (a second mapping, so the process really can still write it), close the sender (its link
 *           unmaps its own), create "dropped", and live until killed
 * </pre>
 */
public final class IpcPrefillMain {

    /** The GPU tests' layout: 4 layers × 8 heads × 128 × BF16, 16 tokens per page (256 KiB pages). */
    static final KvLayout GPU_LAYOUT = new KvLayout(4, 8, 128, DType.BF16, 16);

    static KvLayout layout(String engine) {
        return engine.equals("cuda") ? GPU_LAYOUT : CudaIpcLinkTest.LAYOUT;
    }

    static Supplier<IpcEngine> engines(String engine) {
        return switch (engine) {
            case "cuda" -> JCudaIpcEngine::new;
            case "fake" -> () -> {
                final FakeIpcEngine e = new FakeIpcEngine();
                e.autoRun = true; // a fast device: a copy runs when its event is first queried
                return e;
            };
            default -> throw new IllegalArgumentException("engine " + engine);
        };
    }

    static PeerIdentity identity(KvLayout layout, String environment) {
        return PeerIdentity.of(layout, "test-model@r1", environment, "build-1");
    }

    /** Tokens of request {@code id}: 3..64, varied. */
    static int tokens(long id) {
        return 3 + (int) (id * 37 % 62);
    }

    public static void main(String[] args) throws Exception {
        final Path socket = Path.of(args[0]);
        final String engine = args[1];
        final String environment = args[2];
        final String scenario = args[3];
        final int requests = Integer.parseInt(args[4]);
        final Path handleFile = Path.of(args[5]);
        final Path ctl = socket.getParent();
        final long deadline = System.nanoTime() + Duration.ofSeconds(40).toNanos();
        final KvLayout layout = layout(engine);

        final KvPool.Builder pb = KvPool.builder(layout).pages(256).maxContextTokens(256L * layout.tokensPerPage());
        final KvPool pool = (engine.equals("cuda") ? pb.storage(DevicePageStorage::allocate) : pb).build();
        final TransferSender sender = TransferSender.builder(pool, identity(layout, environment)).checksums(false)
            .drainDeadline(Duration.ofSeconds(2)).build();
        final CudaIpcLink link = CudaIpcTransport.connect(socket, engines(engine));
        final int peerId = sender.addPeer(link);
        final Peer peer = sender.peer(peerId);
        for (long id = 1; id <= requests; id++) {
            final int n = tokens(id);
            final Sequence s = pool.admit(n, 0).sequence();
            s.append(n);
            IpcKv.write(s, id);
            sender.offer(id, s);
            s.close(); // the sender holds its own references
        }
        if (scenario.equals("gate")) {
            while (peer.state() == Peer.State.HANDSHAKE) {
                idle(sender.doWork(), deadline);
            }
            Files.createFile(ctl.resolve("frozen"));
            System.out.println("FROZEN peer=" + peer.state() + " pid=" + ProcessHandle.current().pid() + " link=" + link.describe());
            System.out.flush();
            while (!Files.exists(ctl.resolve("go"))) { // not polling: a descriptor and an ABORT pile up unread
                if (Files.exists(ctl.resolve("drop"))) {
                    final IpcEngine keep = engines(engine).get();
                    keep.open(Files.readAllBytes(handleFile), layout); // this process can still write the decode arena
                    sender.close(); // closes the socket (and the link's own mapping): the receiver sees the link fail
                    Files.createFile(ctl.resolve("dropped"));
                    System.out.println("DROPPED the socket; still holding a mapping of the decode arena");
                    System.out.flush();
                    while (System.nanoTime() < deadline) { // alive, holding the mapping, until killed
                        Thread.sleep(50);
                    }
                    System.exit(3);
                }
                Thread.sleep(2);
                if (System.nanoTime() > deadline) {
                    System.out.println("DEADLINE while frozen");
                    System.exit(3);
                }
            }
        } else if (!scenario.equals("serve")) {
            throw new IllegalArgumentException("scenario " + scenario);
        }
        while (peer.state() == Peer.State.HANDSHAKE || peer.isUp()) {
            idle(sender.doWork(), deadline);
        }
        sender.close();
        while (sender.activeTransfers() > 0) { // the closed link still reports its writes' terminal states
            idle(sender.doWork(), deadline);
        }
        final boolean balanced = pool.verifyAccounting().balanced();
        final PoolSnapshot snap = pool.snapshot();
        System.out.println("RESULT peer=" + peer.state() + " completed=" + sender.completedTransfers() + " drained="
            + sender.drainedSent() + " posted=" + sender.writesPosted() + " failed=" + sender.writesFailed() + " active="
            + sender.activeTransfers() + " inUse=" + snap.inUse() + " balanced=" + balanced + " launches=" + link.batchesLaunched()
            + " failure=" + peer.failure());
        System.out.flush();
        pool.close();
        System.exit(balanced && snap.inUse() == 0 && sender.activeTransfers() == 0 ? 0 : 1);
    }

    private static void idle(int work, long deadline) {
        if (System.nanoTime() > deadline) {
            System.out.println("DEADLINE");
            System.out.flush();
            System.exit(3);
        }
        if (work == 0) {
            LockSupport.parkNanos(200_000);
        }
    }
}
