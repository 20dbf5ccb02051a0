package io.kvpool.cuda.ipc;

import io.kvpool.DType;
import io.kvpool.KvLayout;
import io.kvpool.KvPool;
import io.kvpool.KvPoolBuilder;
import io.kvpool.cuda.DevicePageStorage;
import io.kvpool.transfer.PeerIdentity;
import io.kvpool.transfer.testkit.PrefillChild;
import io.kvpool.transfer.TransferSender;

import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.function.Supplier;

/**
 * The prefill process of the two-process CUDA IPC tests ({@link TwoProcessScenarios}): a pool, a
 * {@link TransferSender} with checksums off, connected to the test's {@link CudaIpcListener}, running the
 * scenario loop shared with the shm and UCX tests ({@link PrefillChild}, which states the output and exit
 * codes) with synthetic KV ({@link IpcKv}). After its peer went down it closes the sender and waits for its
 * writes' terminal states; its RESULT line adds {@code launches=} (the link's batch launches).
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

    public static void main(String[] args) throws Exception {
        final Path socket = Path.of(args[0]);
        final String engine = args[1];
        final String environment = args[2];
        final String scenario = args[3];
        final int requests = Integer.parseInt(args[4]);
        final Path handleFile = Path.of(args[5]);
        final long deadline = PrefillChild.deadlineIn(Duration.ofSeconds(40));
        final KvLayout layout = layout(engine);

        final KvPoolBuilder pb = KvPool.builder(layout).pages(256).maxContextTokens(256L * layout.tokensPerPage());
        final KvPool pool = (engine.equals("cuda") ? pb.storage(DevicePageStorage::allocate) : pb).build();
        final TransferSender sender = TransferSender.builder(pool, identity(layout, environment)).checksums(false)
            .drainDeadline(Duration.ofSeconds(2)).build();
        final CudaIpcLink link = CudaIpcTransport.connect(socket, engines(engine));
        final PrefillChild child = new PrefillChild(pool, sender, link, socket.getParent(), deadline);
        child.offer(requests, IpcKv::write);
        child.run(scenario, " pid=" + ProcessHandle.current().pid() + " link=" + link.describe(), () -> {
            final IpcEngine keep = engines(engine).get();
            keep.open(Files.readAllBytes(handleFile), layout); // this process can still write the decode arena
            sender.close(); // closes the socket (and the link's own mapping): the receiver sees the link fail
            child.droppedLiveUntilKilled("DROPPED the socket; still holding a mapping of the decode arena");
        });
        sender.close();
        child.awaitClosedTransfers();
        child.exitWithResult(" launches=" + link.batchesLaunched());
    }
}
