package io.kvpool.transfer.shm;

import io.kvpool.KvPool;
import io.kvpool.transfer.testkit.Kv;
import io.kvpool.transfer.PeerIdentity;
import io.kvpool.transfer.testkit.PrefillChild;
import io.kvpool.transfer.TransferSender;

import java.nio.file.Path;
import java.time.Duration;

/**
 * The prefill process of {@link ShmProtocolTwoProcessTest}: a host {@link KvPool}, a {@link TransferSender}
 * connected to the test's listener, running the shared scenario loop ({@link PrefillChild}, which states the
 * output and exit codes) with synthetic KV ({@link Kv}).
 *
 * <pre>
 * args: socket poolFile environment scenario requests
 *   serve  offer and serve at once
 *   gate   offer, complete the handshake, create ctl file "frozen" and stop calling doWork() until
 *          "go" appears (then serve), or "drop" appears: map the pool file itself (a second mapping,
 *          so the process really can still write it), close the sender (its socket), create "dropped",
 *          and live until killed
 * </pre>
 */
public final class ShmPrefillMain {
    private ShmPrefillMain() {
    }

    public static void main(String[] args) throws Exception {
        final Path socket = Path.of(args[0]);
        final Path poolFile = Path.of(args[1]);
        final String environment = args[2];
        final String scenario = args[3];
        final int requests = Integer.parseInt(args[4]);
        final long deadline = PrefillChild.deadlineIn(Duration.ofSeconds(20));

        final KvPool pool = Kv.pool(256);
        final TransferSender sender = TransferSender.builder(pool,
                PeerIdentity.of(Kv.LAYOUT, "test-model@r1", environment, "build-1"))
            .drainDeadline(Duration.ofSeconds(2)).build();
        final PrefillChild child = new PrefillChild(pool, sender, ShmTransport.connect(socket), socket.getParent(), deadline);
        child.offer(requests, Kv::write);
        child.run(scenario, "", () -> {
            try (MappedPageStorage keep = MappedPageStorage.map(poolFile)) { // a second mapping: it can still write
                sender.close(); // closes the socket: the receiver sees the link fail
                child.droppedLiveUntilKilled("DROPPED the socket; still mapping " + keep.file());
            }
        });
        sender.close();
        child.exitWithResult("");
    }
}
