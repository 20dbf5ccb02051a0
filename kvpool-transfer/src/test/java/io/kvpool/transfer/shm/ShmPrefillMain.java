package io.kvpool.transfer.shm;

import io.kvpool.KvPool;
import io.kvpool.PoolSnapshot;
import io.kvpool.Sequence;
import io.kvpool.transfer.Kv;
import io.kvpool.transfer.Peer;
import io.kvpool.transfer.PeerIdentity;
import io.kvpool.transfer.TransferSender;

import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.concurrent.locks.LockSupport;

/**
 * The prefill process of {@link ShmProtocolTwoProcessTest}: a host {@link KvPool}, a {@link TransferSender}
 * connected to the test's listener. It writes synthetic KV ({@link Kv}) for requests {@code 1..N}
 * ({@link #tokens} tokens each), offers them, and runs {@code doWork()} until its peer goes down (the test
 * closes its receiver), then closes the sender, checks its own pool and prints one {@code RESULT} line.
 * Exit code 0 iff its pool is clean (balanced, nothing in use, no transfer active); 3 on its own deadline.
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

    /** Tokens of request {@code id}: 3..64 (1..16 pages of 4 tokens), varied. */
    static int tokens(long id) {
        return 3 + (int) (id * 37 % 62);
    }

    public static void main(String[] args) throws Exception {
        final Path socket = Path.of(args[0]);
        final Path poolFile = Path.of(args[1]);
        final String environment = args[2];
        final String scenario = args[3];
        final int requests = Integer.parseInt(args[4]);
        final Path ctl = socket.getParent();
        final long deadline = System.nanoTime() + Duration.ofSeconds(20).toNanos();

        final KvPool pool = Kv.pool(256);
        final TransferSender sender = TransferSender.builder(pool,
                PeerIdentity.of(Kv.LAYOUT, "test-model@r1", environment, "build-1"))
            .drainDeadline(Duration.ofSeconds(2)).build();
        final int peerId = sender.addPeer(ShmTransport.connect(socket));
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
            Files.createFile(ctl.resolve("frozen"));
            System.out.println("FROZEN peer=" + peer.state());
            System.out.flush();
            while (!Files.exists(ctl.resolve("go"))) { // not polling: a descriptor and an ABORT pile up unread
                if (Files.exists(ctl.resolve("drop"))) {
                    try (MappedPageStorage keep = MappedPageStorage.map(poolFile)) {
                        sender.close(); // closes the socket: the receiver sees the link fail
                        Files.createFile(ctl.resolve("dropped"));
                        System.out.println("DROPPED the socket; still mapping " + keep.file());
                        System.out.flush();
                        while (System.nanoTime() < deadline) { // alive, mapping the file, until killed
                            Thread.sleep(50);
                        }
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
