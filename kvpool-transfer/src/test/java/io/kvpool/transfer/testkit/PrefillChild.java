package io.kvpool.transfer.testkit;

import io.kvpool.transfer.*;
import io.kvpool.KvPool;
import io.kvpool.PoolSnapshot;
import io.kvpool.Sequence;
import io.kvpool.transfer.spi.PeerLink;

import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.concurrent.locks.LockSupport;
import java.util.function.ObjLongConsumer;

/**
 * The scenario loop of a prefill child process in the two-process protocol tests (shared memory, UCX, and
 * kvpool-cuda's CUDA IPC through kvpool-transfer's test-jar): a {@link TransferSender} on one link to the
 * decode side, which offers requests {@code 1..N} ({@link #tokens} tokens each) and then follows the
 * scenario the decode test chose:
 *
 * <pre>
 *   serve  offer and serve at once
 *   gate   offer, complete the handshake, print FROZEN, create ctl file "frozen" and stop calling doWork()
 *          until "go" appears (then serve); if the transport has a drop action and "drop" appears, run it
 *          (it keeps the process alive until killed)
 * </pre>
 *
 * It serves until its peer goes down (the decode test closes its receiver, or refuses it), printing one
 * {@code ENDED} line once every offer is over while the link is up; the main class then closes what it
 * opened and calls {@link #exitWithResult}: one {@code RESULT} line, exit code 0 iff the pool is clean
 * (balanced, nothing in use, no transfer active), 1 if not, 3 on the child's own deadline.
 */
public final class PrefillChild {

    /** What a transport does on "drop": close its link while the process keeps its access to the decode pages. */
    @FunctionalInterface
    public interface DropAction {
        void run() throws Exception;
    }

    private final KvPool pool;
    private final TransferSender sender;
    private final Peer peer;
    private final Path ctl;
    private final long deadline;

    /**
     * @param deadline the {@link System#nanoTime()} after which the child gives up (exit 3)
     * @param link     added to {@code sender} as its only peer
     * @param ctl      the folder of the control files
     */
    public PrefillChild(KvPool pool, TransferSender sender, PeerLink link, Path ctl, long deadline) {
        this.pool = pool;
        this.sender = sender;
        this.peer = sender.peer(sender.addPeer(link));
        this.ctl = ctl;
        this.deadline = deadline;
    }

    /** @return the {@link System#nanoTime()} {@code lifetime} from now */
    public static long deadlineIn(Duration lifetime) {
        return System.nanoTime() + lifetime.toNanos();
    }

    /** Tokens of request {@code id}: 3..64 (1..16 pages of 4 tokens), varied. */
    public static int tokens(long id) {
        return 3 + (int) (id * 37 % 62);
    }

    /** @return the sender's one peer */
    public Peer peer() {
        return peer;
    }

    /** Admits, fills ({@code kv} writes request {@code id}'s synthetic KV) and offers requests {@code 1..requests}. */
    public void offer(int requests, ObjLongConsumer<Sequence> kv) {
        for (long id = 1; id <= requests; id++) {
            final int n = tokens(id);
            final Sequence s = pool.admit(n, 0).sequence();
            s.append(n);
            kv.accept(s, id);
            sender.offer(id, s);
            s.close(); // the sender holds its own references
        }
    }

    /**
     * Runs {@code scenario} up to the point where the child serves ({@code "gate"} freezes until "go"), then serves
     * until the peer goes down. {@code frozenDetail} goes on the FROZEN line; {@code drop} (null: "drop" is not
     * watched for) must not return normally.
     */
    public void run(String scenario, String frozenDetail, DropAction drop) throws Exception {
        if (scenario.equals("gate")) {
            while (peer.state() == Peer.State.HANDSHAKE) {
                idle(sender.doWork());
            }
            print("FROZEN peer=" + peer.state() + frozenDetail);
            Files.createFile(ctl.resolve("frozen"));
            while (!Files.exists(ctl.resolve("go"))) { // not polling: a descriptor and an ABORT pile up unread
                if (drop != null && Files.exists(ctl.resolve("drop"))) {
                    drop.run();
                    throw new IllegalStateException("the drop action returned");
                }
                Thread.sleep(2);
                if (System.nanoTime() > deadline) {
                    print("DEADLINE while frozen");
                    System.exit(3);
                }
            }
        } else if (!scenario.equals("serve")) {
            throw new IllegalArgumentException("scenario " + scenario);
        }
        boolean ended = false;
        while (peer.state() == Peer.State.HANDSHAKE || peer.isUp()) {
            idle(sender.doWork());
            if (!ended && sender.activeTransfers() == 0) { // every offer is over: say how (the link may stay up)
                ended = true;
                print("ENDED completed=" + sender.metrics().completed() + " drained=" + sender.metrics().drainedSent()
                    + " posted=" + sender.metrics().writesPosted() + " failed=" + sender.metrics().writesFailed() + " peer=" + peer.state());
            }
        }
    }

    /** For a drop action: prints {@code line}, creates ctl file "dropped" and lives until killed (or exit 3 at the deadline). */
    public void droppedLiveUntilKilled(String line) throws Exception {
        Files.createFile(ctl.resolve("dropped"));
        print(line);
        while (System.nanoTime() < deadline) {
            Thread.sleep(50);
        }
        System.exit(3);
    }

    /** After the sender was closed: runs it until its transfers have reported their terminal states. */
    public void awaitClosedTransfers() {
        while (sender.activeTransfers() > 0) { // the closed link still reports its writes' terminal states
            idle(sender.doWork());
        }
    }

    /** Prints the RESULT line ({@code extra} before its failure field), closes the pool and exits (0 iff it is clean). */
    public void exitWithResult(String extra) {
        final boolean balanced = pool.verifyAccounting().balanced();
        final PoolSnapshot snap = pool.snapshot();
        print("RESULT peer=" + peer.state() + " completed=" + sender.metrics().completed() + " drained="
            + sender.metrics().drainedSent() + " posted=" + sender.metrics().writesPosted() + " failed=" + sender.metrics().writesFailed() + " active="
            + sender.activeTransfers() + " inUse=" + snap.inUse() + " balanced=" + balanced + extra + " failure=" + peer.failure());
        pool.close();
        System.exit(balanced && snap.inUse() == 0 && sender.activeTransfers() == 0 ? 0 : 1);
    }

    private void idle(int work) {
        if (System.nanoTime() > deadline) {
            print("DEADLINE");
            System.exit(3);
        }
        if (work == 0) {
            LockSupport.parkNanos(200_000);
        }
    }

    private static void print(String line) {
        System.out.println(line);
        System.out.flush();
    }
}
