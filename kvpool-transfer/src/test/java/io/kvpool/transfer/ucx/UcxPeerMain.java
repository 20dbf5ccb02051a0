package io.kvpool.transfer.ucx;

import io.kvpool.storage.HostPageStorage;
import io.kvpool.transfer.spi.RemoteRegion;
import io.kvpool.transfer.wire.Message;
import io.kvpool.transfer.wire.WireCodec;

import java.net.InetAddress;
import java.net.Socket;
import java.time.Duration;
import java.util.stream.IntStream;

import static io.kvpool.transfer.ucx.UcxTestSupport.*;

/**
 * The sender process of {@link UcxTwoProcessTest}: {@code UcxPeerMain <port> write|stream}. Expects the notes
 * {@code p2c-0..2} then a descriptor, sends {@code c2p-0..2}, writes the pattern into the described pages.
 * {@code write}: flush, send a Completion with its counts, wait for {@code bye}, exit 0.
 * {@code stream}: send {@code streaming}, then put and flush forever (the parent kills it).
 * Exit codes: 0 ok, 2 bad frames or timeout, 3 flush failed.
 */
public final class UcxPeerMain {
    private UcxPeerMain() {
    }

    public static void main(String[] args) throws Exception {
        final int port = Integer.parseInt(args[0]);
        final boolean stream = args[1].equals("stream");
        try (UcxTransport t = UcxTransport.open("child");
             Socket s = new Socket(InetAddress.getLoopbackAddress(), port)) {
            final UcxLink link = t.connect(s, "child→parent", Duration.ofSeconds(10));
            final Recorder r = new Recorder();
            if (!r.pollUntil(link, () -> r.frames.size() >= 4, 10_000)) {
                System.err.println("child: got " + r.frames + " only");
                System.exit(2);
            }
            for (int i = 0; i < 3; i++) {
                if (!(r.frames.get(i) instanceof Message.Abort a) || !a.detail().equals("p2c-" + i)) {
                    System.err.println("child: frame " + i + " is " + r.frames.get(i));
                    System.exit(2);
                }
            }
            if (!(r.frames.get(3) instanceof Message.Descriptor d)) {
                System.err.println("child: frame 3 is " + r.frames.get(3));
                System.exit(2);
                return;
            }
            for (int i = 0; i < 3; i++) {
                link.send(note("c2p-" + i, i));
            }
            final int n = d.pageHandles().length;
            final RemoteRegion region = link.attach(d.regionKey(), n);
            try (HostPageStorage src = HostPageStorage.allocate(LAYOUT, n)) {
                for (int i = 0; i < n; i++) {
                    fillPattern(src, i, i);
                }
                final int[] idx = IntStream.range(0, n).toArray();
                if (stream) {
                    link.send(note("streaming", 0));
                    for (long round = 0; ; round++) {
                        link.putBatch(region, idx, src, idx, 0, n, round * n);
                        link.flush(round);
                        r.pollUntil(link, () -> false, 2);
                    }
                }
                link.putBatch(region, idx, src, idx, 0, n, 0);
                link.flush(1);
                if (!r.pollUntil(link, () -> !r.flushes.isEmpty(), 10_000) || r.flushes.get(0)[1] != 1) {
                    System.err.println("child: flush did not succeed: " + r.failures);
                    System.exit(3);
                }
                link.poll(r, Integer.MAX_VALUE);
                link.send(WireCodec.encode(new Message.Completion(d.transferId(), d.generation(), 0, d.expectedTokens(), 0, null,
                    n, r.ok, r.failed + r.canceled)));
                if (!r.pollUntil(link, () -> r.frames.size() >= 5, 10_000)) {
                    System.err.println("child: no bye");
                    System.exit(2);
                }
            }
            link.close();
        }
        System.exit(0);
    }
}
