package io.kvpool.transfer.ucx;

import io.kvpool.KvPool;
import io.kvpool.PoolSnapshot;
import io.kvpool.Sequence;
import io.kvpool.transfer.Kv;
import io.kvpool.transfer.Peer;
import io.kvpool.transfer.PeerIdentity;
import io.kvpool.transfer.TransferSender;

import java.net.InetAddress;
import java.net.Socket;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.concurrent.locks.LockSupport;

/**
 * The prefill process of {@link UcxProtocolTwoProcessTest}: a host {@link KvPool}, a {@link TransferSender} on a
 * {@link UcxLink} to the test's JVM (bootstrapped over a loopback socket). It writes synthetic KV ({@link Kv}) for
 * requests {@code 1..N} ({@link #tokens} tokens each), offers them, and runs {@code doWork()} until its peer goes
 * down (the test closes its receiver, or refuses it), then closes the sender and the transport, checks its own pool
 * and prints one {@code RESULT} line (and, once every offer is over while the link is still up, an {@code ENDED} line). Exit code 0 iff its pool is clean (balanced, nothing in use, no transfer
 * active); 3 on its own deadline.
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

    /** Tokens of request {@code id}: 3..64 (1..16 pages of 4 tokens), varied (as the shm test's). */
    static int tokens(long id) {
        return 3 + (int) (id * 37 % 62);
    }

    public static void main(String[] args) throws Exception {
        final int port = Integer.parseInt(args[0]);
        final Path ctl = Path.of(args[1]);
        final String environment = args[2];
        final String scenario = args[3];
        final int requests = Integer.parseInt(args[4]);
        final long deadline = System.nanoTime() + Duration.ofSeconds(20).toNanos();

        final KvPool pool = Kv.pool(256);
        final UcxTransport transport = UcxTransport.open("prefill");
        final UcxLink link;
        try (Socket s = new Socket(InetAddress.getLoopbackAddress(), port)) {
            link = transport.connect(s, "prefill→decode", Duration.ofSeconds(10));
        }
        final TransferSender sender = TransferSender.builder(pool,
                PeerIdentity.of(Kv.LAYOUT, "test-model@r1", environment, "build-1"))
            .drainDeadline(Duration.ofSeconds(2)).build();
        final int peerId = sender.addPeer(link);
        final Peer peer = sender.peer(peerId);
        for (long id = 1; id <= requests; id++) {
            final int n = tokens(id);
            final Sequence s = pool.admit(n, 0).sequence();
            s.append(n);
            Kv.write(s, id);
            sender.offer(id, s);
            s.close(); // the sender holds its own references
        }
        if (scenario.equals("gate")) {
            while (peer.state() == Peer.State.HANDSHAKE) {
                idle(sender.doWork(), deadline);
            }
            System.out.println("FROZEN peer=" + peer.state());
            System.out.flush();
            Files.createFile(ctl.resolve("frozen"));
            while (!Files.exists(ctl.resolve("go"))) { // not polling: a descriptor and an ABORT pile up unread
                Thread.sleep(2);
                if (System.nanoTime() > deadline) {
                    System.out.println("DEADLINE while frozen");
                    System.out.flush();
                    System.exit(3);
                }
            }
        } else if (!scenario.equals("serve")) {
            throw new IllegalArgumentException("scenario " + scenario);
        }
        boolean ended = false;
        while (peer.state() == Peer.State.HANDSHAKE || peer.isUp()) {
            idle(sender.doWork(), deadline);
            if (!ended && sender.activeTransfers() == 0) { // every offer is over: say how (the link may stay up)
                ended = true;
                System.out.println("ENDED completed=" + sender.completedTransfers() + " drained=" + sender.drainedSent()
                    + " posted=" + sender.writesPosted() + " failed=" + sender.writesFailed() + " peer=" + peer.state());
                System.out.flush();
            }
        }
        sender.close();
        transport.close(); // before the pool: deregisters its storage
        final boolean balanced = pool.verifyAccounting().balanced();
        final PoolSnapshot snap = pool.snapshot();
        System.out.println("RESULT peer=" + peer.state() + " completed=" + sender.completedTransfers() + " drained="
            + sender.drainedSent() + " posted=" + sender.writesPosted() + " failed=" + sender.writesFailed() + " active="
            + sender.activeTransfers() + " inUse=" + snap.inUse() + " balanced=" + balanced + " failure=" + peer.failure());
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
