package io.kvpool.examples.server.link;

import io.kvpool.storage.PageStorage;
import io.kvpool.transfer.spi.LinkFailedException;
import io.kvpool.transfer.spi.LinkListener;
import io.kvpool.transfer.spi.PeerLink;
import io.kvpool.transfer.spi.Registration;
import io.kvpool.transfer.spi.RemoteRegion;
import org.junit.jupiter.api.Test;

import java.nio.ByteBuffer;
import java.util.ArrayDeque;
import java.util.ArrayList;
import java.util.List;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

/** The prefill side's link wrapper keeps the PeerLink rules: grants, ordering of flushes, one terminal state per write. */
class FaultyLinkTest {

    /** A transport that records what reached it and completes writes and flushes on the next poll. */
    static final class Recording implements PeerLink {
        final List<String> log = new ArrayList<>();
        final ArrayDeque<long[]> done = new ArrayDeque<>();
        boolean up = true;

        @Override public String describe() { return "rec"; }
        @Override public boolean isUp() { return up; }
        @Override public void send(byte[] frame) { log.add("send"); }
        @Override public int poll(LinkListener l, int limit) {
            int n = 0;
            for (long[] e; n < limit && (e = done.poll()) != null; n++) {
                if (e[0] == 0) {
                    l.onWriteDone(this, e[1], OK);
                } else {
                    l.onFlushDone(this, e[1], true);
                }
            }
            return n;
        }
        @Override public Registration register(PageStorage s, int[] slots) {
            return new Registration() {
                public byte[] key() { return new byte[] {42}; }
                public boolean revoke() { return false; }
                public void close() { }
            };
        }
        @Override public boolean tearDown() { return true; }
        @Override public RemoteRegion attach(byte[] key, int pages) {
            log.add("attach " + key.length + " " + key[0]);
            return () -> pages;
        }
        @Override public void putBatch(RemoteRegion r, int[] dst, PageStorage s, int[] src, int off, int count, long first) {
            log.add("put " + first + "+" + count);
            for (int i = 0; i < count; i++) {
                done.add(new long[] {0, first + i});
            }
        }
        @Override public void flush(long token) {
            log.add("flush " + token);
            done.add(new long[] {1, token});
        }
        @Override public void cancelWrites() { }
        @Override public void close() { up = false; }
    }

    /** Collects events. */
    static final class Events implements LinkListener {
        final List<String> got = new ArrayList<>();
        @Override public void onFrame(PeerLink link, ByteBuffer frame) { got.add("frame"); }
        @Override public void onWriteDone(PeerLink link, long token, int status) { got.add("write " + token + " " + status); }
        @Override public void onFlushDone(PeerLink link, long token, boolean ok) { got.add("flush " + token + " " + ok); }
        @Override public void onLinkFailed(PeerLink link, String reason) { got.add("failed"); }
    }

    private final LocalGrants grants = new LocalGrants();
    private final Recording receiverSide = new Recording();
    private final GrantingLink receiver = new GrantingLink(receiverSide, grants);

    @Test
    void aRevokedRegistrationTakesNoWriteAndAQueuedOneNeverReachesTheTransport() {
        final LinkGate gate = LinkGate.create(false);
        final Recording transport = new Recording();
        final FaultyLink link = new FaultyLink(transport, grants, FaultPlan.NONE, gate, 0);
        final Registration reg = receiver.register(null, new int[] {1, 2});
        assertEquals(9, reg.key().length, "grant id + the transport's key");
        final RemoteRegion region = link.attach(reg.key(), 2);
        assertEquals("attach 1 42", transport.log.get(0), "the transport sees its own key");

        link.putBatch(region, new int[] {0}, null, new int[] {5}, 0, 1, 100);
        gate.close();
        link.putBatch(region, new int[] {1}, null, new int[] {6}, 0, 1, 101); // held
        link.flush(7);                                                       // behind the held write
        assertEquals(List.of("attach 1 42", "put 100+1"), transport.log, "nothing passes a held write, not even a flush");
        assertTrue(reg.revoke(), "revocation is proven in one JVM");
        gate.open();
        final Events ev = new Events();
        link.poll(ev, 100);
        link.poll(ev, 100);
        assertEquals(List.of("attach 1 42", "put 100+1", "flush 7"), transport.log, "the revoked write never reached the transport");
        assertEquals(List.of("write 101 " + PeerLink.CANCELED, "write 100 " + PeerLink.OK, "flush 7 true"), ev.got);
        assertThrows(LinkFailedException.class, () -> link.putBatch(region, new int[] {0}, null, new int[] {5}, 0, 1, 102),
            "a batch for a revoked registration is refused before anything is posted");
        assertThrows(LinkFailedException.class, () -> link.attach(reg.key(), 2));
        reg.close();
    }

    @Test
    void injectedFailuresReportFailedWhetherOrNotTheyLandedAndADropCancelsWhatWasHeld() {
        final Recording transport = new Recording();
        final FaultyLink link = new FaultyLink(transport, grants, new FaultPlan(1.0, 3), null, 0);
        final Registration reg = receiver.register(null, new int[] {1});
        final RemoteRegion region = link.attach(reg.key(), 1);
        final Events ev = new Events();
        int failed = 0, ok = 0, posts = 0;
        for (long t = 0; t < 200 && link.isUp(); t++) {
            try {
                link.putBatch(region, new int[] {0}, null, new int[] {1}, 0, 1, t);
                posts++;
            } catch (LinkFailedException dropped) {
                break;
            }
            final long deadline = System.nanoTime() + 50_000_000;
            final int before = ev.got.size();
            while (ev.got.size() == before && System.nanoTime() < deadline) {
                link.poll(ev, 10); // delayed writes are released by polling
            }
        }
        for (String e : ev.got) {
            if (e.endsWith(" " + PeerLink.FAILED)) {
                failed++;
            } else if (e.endsWith(" " + PeerLink.OK)) {
                ok++;
            }
        }
        assertEquals(posts, failed + ok + (int) ev.got.stream().filter(e -> e.endsWith(" " + PeerLink.CANCELED)).count(),
            () -> "one terminal state per posted write: " + ev.got);
        assertTrue(failed > 0, ev.got::toString);
        assertTrue(link.injectedFaults() == posts || !link.isUp(), "every batch was faulted at rate 1");
        if (!link.isUp()) {
            link.poll(ev, 100);
            assertTrue(ev.got.contains("failed"), "a dropped link reports its failure once");
            assertFalse(transport.up, "and closes the transport, so the decode side sees it too");
        }
        reg.close();
    }
}
