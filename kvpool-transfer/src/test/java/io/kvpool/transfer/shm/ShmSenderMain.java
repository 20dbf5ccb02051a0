package io.kvpool.transfer.shm;

import io.kvpool.storage.HostPageStorage;
import io.kvpool.transfer.spi.LinkListener;
import io.kvpool.transfer.spi.PeerLink;
import io.kvpool.transfer.spi.RemoteRegion;
import io.kvpool.transfer.wire.Message;
import io.kvpool.transfer.wire.WireCodec;

import java.nio.ByteBuffer;
import java.nio.file.Path;

/**
 * The sender process of {@link ShmTwoProcessTest}: connects, waits for one descriptor, writes page
 * {@code i} of the region with {@link #pattern}, flushes, reports DRAINED, then lives until killed
 * (at most 60 s).
 */
public final class ShmSenderMain {

    static byte pattern(int regionPage, long offset) {
        return (byte) (0x5A ^ (regionPage * 37 + offset * 13));
    }

    public static void main(String[] args) throws Exception {
        final Path socket = Path.of(args[0]);
        final long deadline = System.nanoTime() + 20_000_000_000L;
        try (ShmLink link = ShmTransport.connect(socket)) {
            final Message.Descriptor[] desc = new Message.Descriptor[1];
            final boolean[] flushed = new boolean[1];
            final long[] ok = new long[1];
            final LinkListener l = new LinkListener() {
                @Override
                public void onFrame(PeerLink link, ByteBuffer frame) {
                    if (WireCodec.decode(frame) instanceof Message.Descriptor d) {
                        desc[0] = d;
                    }
                }

                @Override
                public void onWriteDone(PeerLink link, long token, int status) {
                    if (status == PeerLink.OK) {
                        ok[0]++;
                    }
                }

                @Override
                public void onFlushDone(PeerLink link, long token, boolean isOk) {
                    flushed[0] = isOk;
                }

                @Override
                public void onLinkFailed(PeerLink link, String reason) {
                    System.out.println("link failed: " + reason);
                }
            };
            while (desc[0] == null) {
                link.poll(l, 16);
                if (System.nanoTime() > deadline || !link.isUp()) {
                    System.out.println("no descriptor: " + link.failureReason());
                    System.exit(2);
                }
                Thread.onSpinWait();
            }
            final Message.Descriptor d = desc[0];
            final int n = d.pageHandles().length;
            final RemoteRegion region = link.attach(d.regionKey(), n);
            try (HostPageStorage src = HostPageStorage.allocate(link.remoteLayout(), n)) {
                final int[] idx = new int[n];
                for (int i = 0; i < n; i++) {
                    idx[i] = i;
                    final var page = src.hostPage(i);
                    for (long o = 0; o < page.byteSize(); o++) {
                        page.set(java.lang.foreign.ValueLayout.JAVA_BYTE, o, pattern(i, o));
                    }
                }
                link.putBatch(region, idx, src, idx, 0, n, 1);
                link.flush(99);
                while (!flushed[0]) {
                    link.poll(l, 16);
                    if (System.nanoTime() > deadline) {
                        System.exit(3);
                    }
                }
            }
            link.send(WireCodec.encode(new Message.Drained(d.transferId(), d.generation(), 0, n, ok[0], n - ok[0])));
            System.out.println("SENT");
            System.out.flush();
            while (System.nanoTime() < deadline + 40_000_000_000L) { // live (holding the mapping) until killed
                link.poll(l, 16);
                Thread.sleep(200);
            }
        }
    }
}
