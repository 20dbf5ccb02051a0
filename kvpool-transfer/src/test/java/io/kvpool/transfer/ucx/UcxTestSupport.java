package io.kvpool.transfer.ucx;

import io.kvpool.DType;
import io.kvpool.KvLayout;
import io.kvpool.storage.PageStorage;
import io.kvpool.transfer.spi.LinkListener;
import io.kvpool.transfer.spi.PeerLink;
import io.kvpool.transfer.wire.Message;
import io.kvpool.transfer.wire.WireCodec;
import org.opentest4j.AssertionFailedError;
import org.opentest4j.TestAbortedException;

import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.nio.ByteBuffer;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.function.BooleanSupplier;

/** Shared helpers: the skip/require rule, the page pattern, an event recorder. */
final class UcxTestSupport {
    private UcxTestSupport() {
    }

    /** 1 layer × 4 heads × 64 dim × FP16 × 16 tokens = 16 KiB per page. */
    static final KvLayout LAYOUT = new KvLayout(1, 4, 64, DType.FP16, 16);

    /** @return whether CI demands UCX (env {@code KVPOOL_UCX_REQUIRED=true} or {@code -Dkvpool.ucx.required=true}) */
    static boolean ucxRequired() {
        return "true".equalsIgnoreCase(System.getenv("KVPOOL_UCX_REQUIRED")) || Boolean.getBoolean("kvpool.ucx.required");
    }

    /** Skips the calling test when UCX cannot load, or fails it when UCX is required. */
    static void assumeUcx() {
        decide(UcxTransport.unavailableReason(), ucxRequired());
    }

    /** The rule itself (tested on its own): unavailable + required fails, unavailable alone skips. */
    static void decide(Optional<String> unavailable, boolean required) {
        if (unavailable.isEmpty()) {
            return;
        }
        if (required) {
            throw new AssertionFailedError("UCX is required (KVPOOL_UCX_REQUIRED / kvpool.ucx.required) but unavailable: "
                + unavailable.get());
        }
        throw new TestAbortedException("UCX unavailable, skipping: " + unavailable.get());
    }

    static byte pattern(int logicalPage, long offset) {
        return (byte) (logicalPage * 31 + offset * 7 + 1 + (offset >>> 8));
    }

    static void fillPattern(PageStorage s, int slot, int logicalPage) {
        final MemorySegment p = s.hostPage(slot);
        for (long o = 0; o < p.byteSize(); o++) {
            p.set(ValueLayout.JAVA_BYTE, o, pattern(logicalPage, o));
        }
    }

    /** @return the first offset where the page differs from the pattern, or -1 */
    static long firstPatternMismatch(PageStorage s, int slot, int logicalPage) {
        final MemorySegment p = s.hostPage(slot);
        for (long o = 0; o < p.byteSize(); o++) {
            if (p.get(ValueLayout.JAVA_BYTE, o) != pattern(logicalPage, o)) {
                return o;
            }
        }
        return -1;
    }

    /** @return the first offset where the page is not the canary, or -1 */
    static long firstNonCanary(PageStorage s, int slot) {
        final MemorySegment p = s.hostPage(slot);
        for (long o = 0; o < p.byteSize(); o++) {
            if (p.get(ValueLayout.JAVA_BYTE, o) != (byte) (PageStorage.CANARY >>> (8 * (o & 7)))) {
                return o;
            }
        }
        return -1;
    }

    static byte[] note(String text, long seq) {
        return WireCodec.encode(new Message.Abort(seq, 0, Message.Abort.REQUESTED, text));
    }

    /**
     * Sends one frame each way and waits until both arrived. UCX wires an endpoint up on its first message; an
     * endpoint that fails or closes while its wire-up is still in flight has twice aborted a test JVM under
     * UCX 1.13.1 (assertion "got REP message" in {@code ucp_request.c}). Tests that fail, cancel or tear down a
     * link on purpose call this first, so that they exercise kvpool and not that window.
     */
    static void completeWireUp(PeerLink x, PeerLink y) throws InterruptedException {
        x.send(note("wire-up x", 0));
        y.send(note("wire-up y", 0));
        final Recorder rx = new Recorder(), ry = new Recorder();
        if (!ry.pollUntil(y, () -> ry.frames.size() == 1, 10_000) || !rx.pollUntil(x, () -> rx.frames.size() == 1, 10_000)) {
            throw new AssertionError("wire-up frames not delivered in 10 s: " + rx.frames.size() + " / " + ry.frames.size()
                + ", failures " + rx.failures + " " + ry.failures);
        }
        if (!rx.failures.isEmpty() || !ry.failures.isEmpty()) {
            throw new AssertionError("link failed during wire-up: " + rx.failures + " " + ry.failures);
        }
    }

    /** Records every event a link delivers, in order. */
    static final class Recorder implements LinkListener {
        final List<Message> frames = new ArrayList<>();
        final Map<Long, List<Integer>> writes = new HashMap<>();
        final List<long[]> flushes = new ArrayList<>(); // {token, ok?1:0}
        final List<String> failures = new ArrayList<>();
        long ok, failed, canceled;

        @Override
        public void onFrame(PeerLink link, ByteBuffer frame) {
            frames.add(WireCodec.decode(frame));
        }

        @Override
        public void onWriteDone(PeerLink link, long token, int status) {
            writes.computeIfAbsent(token, t -> new ArrayList<>()).add(status);
            switch (status) {
                case PeerLink.OK -> ok++;
                case PeerLink.FAILED -> failed++;
                case PeerLink.CANCELED -> canceled++;
                default -> throw new AssertionError("unknown write status " + status + " for token " + token);
            }
        }

        @Override
        public void onFlushDone(PeerLink link, long token, boolean okay) {
            flushes.add(new long[] {token, okay ? 1 : 0});
        }

        @Override
        public void onLinkFailed(PeerLink link, String reason) {
            failures.add(reason);
        }

        /** Polls until the condition holds or the deadline passes. */
        boolean pollUntil(PeerLink link, BooleanSupplier done, long millis) throws InterruptedException {
            final long deadline = System.nanoTime() + millis * 1_000_000L;
            while (!done.getAsBoolean()) {
                if (link.poll(this, 1024) == 0) {
                    if (System.nanoTime() > deadline) {
                        return false;
                    }
                    Thread.sleep(1);
                }
            }
            return true;
        }
    }
}
