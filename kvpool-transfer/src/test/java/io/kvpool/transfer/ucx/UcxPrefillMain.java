package io.kvpool.transfer.ucx;

import io.kvpool.KvPool;
import io.kvpool.transfer.testkit.Kv;
import io.kvpool.transfer.PeerIdentity;
import io.kvpool.transfer.testkit.PrefillChild;
import io.kvpool.transfer.TransferSender;

import java.net.InetAddress;
import java.net.Socket;
import java.nio.file.Path;
import java.time.Duration;

/**
 * The prefill process of {@link UcxProtocolTwoProcessTest}: a host {@link KvPool}, a {@link TransferSender} on a
 * {@link UcxLink} to the test's JVM (bootstrapped over a loopback socket), running the shared scenario loop
 * ({@link PrefillChild}, which states the output — RESULT, and ENDED once every offer is over while the link is
 * up — and the exit codes) with synthetic KV ({@link Kv}); it closes the sender and then the transport.
 *
 * <pre>
 * args: port ctlDir environment scenario requests
 *   serve  offer and serve at once
 *   gate   offer, complete the handshake, create ctl file "frozen" and stop calling doWork() until "go"
 *          appears (then serve). The UCX owner thread keeps running: frames queue up unread.
 *          (The test may also freeze the whole process with SIGSTOP once "frozen" exists.)
 * </pre>
 */
public final class UcxPrefillMain {
    private UcxPrefillMain() {
    }

    public static void main(String[] args) throws Exception {
        final int port = Integer.parseInt(args[0]);
        final Path ctl = Path.of(args[1]);
        final String environment = args[2];
        final String scenario = args[3];
        final int requests = Integer.parseInt(args[4]);
        final long deadline = PrefillChild.deadlineIn(Duration.ofSeconds(20));

        final KvPool pool = Kv.pool(256);
        final UcxTransport transport = UcxTransport.open("prefill");
        final UcxLink link;
        try (Socket s = new Socket(InetAddress.getLoopbackAddress(), port)) {
            link = transport.connect(s, "prefill→decode", Duration.ofSeconds(10));
        }
        final TransferSender sender = TransferSender.builder(pool,
                PeerIdentity.of(Kv.LAYOUT, "test-model@r1", environment, "build-1"))
            .drainDeadline(Duration.ofSeconds(2)).build();
        final PrefillChild child = new PrefillChild(pool, sender, link, ctl, deadline);
        child.offer(requests, Kv::write);
        child.run(scenario, "", null);
        sender.close();
        transport.close(); // before the pool: deregisters its storage
        child.exitWithResult("");
    }
}
