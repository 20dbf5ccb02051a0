package io.kvpool.transfer;

import io.kvpool.storage.PageStorage;
import io.kvpool.transfer.spi.LinkFailedException;
import io.kvpool.transfer.spi.LinkListener;
import io.kvpool.transfer.spi.PeerLink;
import io.kvpool.transfer.spi.Registration;
import io.kvpool.transfer.spi.RemoteRegion;
import io.kvpool.transfer.wire.Message;
import io.kvpool.transfer.wire.WireCodec;

import java.nio.ByteBuffer;
import java.util.ArrayDeque;
import java.util.ArrayList;
import java.util.List;

/**
 * A link whose other end is the test: it sees every frame the engine sends, injects frames, and decides
 * when each write and flush completes, so each protocol rule can be driven step by step.
 */
final class ScriptedLink implements PeerLink {
    final List<Message> sent = new ArrayList<>();
    final ArrayDeque<Object> inbound = new ArrayDeque<>();
    final List<Long> postedTokens = new ArrayList<>();
    final List<Long> flushTokens = new ArrayList<>();
    final List<ScriptedRegistration> registrations = new ArrayList<>();
    boolean up = true;
    boolean revocable;
    boolean tearDownProves;
    int tearDowns;
    int cancels;

    private record WriteDone(long token, int status) {
    }

    private record FlushDone(long token, boolean ok) {
    }

    private record Failed(String reason) {
    }

    final class ScriptedRegistration implements Registration {
        final int[] slots;
        boolean closed;

        ScriptedRegistration(int[] slots) {
            this.slots = slots;
        }

        @Override
        public byte[] key() {
            return new byte[] {(byte) registrations.indexOf(this)};
        }

        @Override
        public boolean revoke() {
            return revocable;
        }

        @Override
        public void close() {
            closed = true;
        }
    }

    /** The instance id the test's side announces on links of version 4 and later. */
    static final long INSTANCE = 0x5C81_7ED0_0000_0001L;

    /**
     * Our own handshake for the engine, with the given identity: its HELLO, and when the link will speak version 4 or
     * later (the identity's range reaches it; the engine's is this code's), our INSTANCE after it.
     */
    ScriptedLink hello(PeerIdentity id) {
        return hello(id, INSTANCE);
    }

    /** {@link #hello(PeerIdentity)} announcing the given instance id. */
    ScriptedLink hello(PeerIdentity id, long instance) {
        inject(new Message.Hello(id));
        version = Math.min(id.maxVersion(), io.kvpool.transfer.wire.WireFormat.VERSION);
        if (id.maxVersion() >= io.kvpool.transfer.wire.WireFormat.INSTANCE_VERSION) {
            inject(new Message.Instance(instance));
        }
        return this;
    }

    /**
     * The version frames from the test's side are framed in: the highest its HELLO shares with this code (the
     * engine's range is this code's), the latest until {@link #hello} ran. A frame of another version fails a link.
     */
    int version = io.kvpool.transfer.wire.WireFormat.VERSION;

    ScriptedLink inject(Message m) {
        inbound.add(ByteBuffer.wrap(m instanceof Message.Hello ? WireCodec.encode(m) : WireCodec.encode(m, version)));
        return this;
    }

    ScriptedLink injectRaw(byte[] frame) {
        inbound.add(ByteBuffer.wrap(frame));
        return this;
    }

    void completeWrite(long token, int status) {
        inbound.add(new WriteDone(token, status));
    }

    void completeFlush(long token, boolean ok) {
        inbound.add(new FlushDone(token, ok));
    }

    void failLink(String why) {
        up = false;
        inbound.add(new Failed(why));
    }

    <T extends Message> List<T> sent(Class<T> type) {
        return sent.stream().filter(type::isInstance).map(type::cast).toList();
    }

    @Override
    public String describe() {
        return "scripted";
    }

    @Override
    public boolean isUp() {
        return up;
    }

    @Override
    public void send(byte[] frame) {
        if (!up) {
            throw new LinkFailedException("scripted link is down");
        }
        sent.add(WireCodec.decode(frame));
    }

    @Override
    public int poll(LinkListener l, int limit) {
        int n = 0;
        while (n < limit && !inbound.isEmpty()) {
            final Object e = inbound.poll();
            n++;
            switch (e) {
                case ByteBuffer b -> l.onFrame(this, b);
                case WriteDone w -> l.onWriteDone(this, w.token, w.status);
                case FlushDone f -> l.onFlushDone(this, f.token, f.ok);
                case Failed f -> l.onLinkFailed(this, f.reason);
                default -> throw new AssertionError(e);
            }
        }
        return n;
    }

    @Override
    public Registration register(PageStorage storage, int[] slots) {
        final ScriptedRegistration r = new ScriptedRegistration(slots.clone());
        registrations.add(r);
        return r;
    }

    @Override
    public boolean tearDown() {
        tearDowns++;
        up = false;
        return tearDownProves;
    }

    @Override
    public RemoteRegion attach(byte[] regionKey, int pages) {
        return () -> pages;
    }

    @Override
    public void putBatch(RemoteRegion region, int[] dst, PageStorage source, int[] src, int off, int count, long firstToken) {
        for (int i = 0; i < count; i++) {
            postedTokens.add(firstToken + i);
        }
    }

    /** When set, {@link #flush} throws it (a transport that refuses a flush while it still reports the link up). */
    RuntimeException flushFails;

    @Override
    public void flush(long token) {
        if (flushFails != null) {
            throw flushFails;
        }
        flushTokens.add(token);
    }

    @Override
    public void cancelWrites() {
        cancels++;
    }

    @Override
    public void close() {
        up = false;
    }
}
