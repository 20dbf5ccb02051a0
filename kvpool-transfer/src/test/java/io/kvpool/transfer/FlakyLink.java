package io.kvpool.transfer;

import io.kvpool.storage.PageStorage;
import io.kvpool.transfer.spi.*;
import io.kvpool.transfer.wire.Message;
import io.kvpool.transfer.wire.WireCodec;

import java.nio.ByteBuffer;
import java.util.*;
import java.util.function.Predicate;

/** A scripted link whose {@code send()} throws for chosen messages while {@code isUp()} is still true (a transport error at send time). */
final class FlakyLink implements PeerLink {
    final List<Message> sent = new ArrayList<>();
    final ArrayDeque<Object> inbound = new ArrayDeque<>();
    final List<Long> postedTokens = new ArrayList<>();
    final List<Long> flushTokens = new ArrayList<>();
    final List<int[]> registrations = new ArrayList<>();
    Predicate<Message> failSend = m -> false;
    boolean up = true;
    int tearDowns;
    private record WriteDone(long token, int status) {}
    private record FlushDone(long token, boolean ok) {}

    FlakyLink inject(Message m) { inbound.add(ByteBuffer.wrap(WireCodec.encode(m))); return this; }
    void completeWrite(long token, int status) { inbound.add(new WriteDone(token, status)); }
    void completeFlush(long token, boolean ok) { inbound.add(new FlushDone(token, ok)); }
    <T extends Message> List<T> sent(Class<T> type) { return sent.stream().filter(type::isInstance).map(type::cast).toList(); }

    @Override public String describe() { return "flaky"; }
    @Override public boolean isUp() { return up; }
    @Override public void send(byte[] frame) {
        if (!up) throw new LinkFailedException("down");
        final Message m = WireCodec.decode(frame);
        if (failSend.test(m)) throw new LinkFailedException("send of " + m.getClass().getSimpleName() + " failed");
        sent.add(m);
    }
    @Override public int poll(LinkListener l, int limit) {
        int n = 0;
        while (n < limit && !inbound.isEmpty()) {
            final Object e = inbound.poll(); n++;
            switch (e) {
                case ByteBuffer b -> l.onFrame(this, b);
                case WriteDone w -> l.onWriteDone(this, w.token, w.status);
                case FlushDone f -> l.onFlushDone(this, f.token, f.ok);
                default -> throw new AssertionError(e);
            }
        }
        return n;
    }
    @Override public Registration register(PageStorage storage, int[] slots) {
        if (!up) throw new LinkFailedException("down");
        registrations.add(slots.clone());
        final int idx = registrations.size() - 1;
        return new Registration() {
            public byte[] key() { return new byte[] {(byte) idx}; }
            public boolean revoke() { return false; }
            public void close() {}
        };
    }
    @Override public boolean tearDown() { tearDowns++; up = false; return false; }
    @Override public RemoteRegion attach(byte[] k, int pages) { return () -> pages; }
    @Override public void putBatch(RemoteRegion r, int[] dst, PageStorage s, int[] src, int off, int count, long first) {
        for (int i = 0; i < count; i++) postedTokens.add(first + i);
    }
    @Override public void flush(long token) { flushTokens.add(token); }
    @Override public void cancelWrites() {}
    @Override public void close() { up = false; }
}
