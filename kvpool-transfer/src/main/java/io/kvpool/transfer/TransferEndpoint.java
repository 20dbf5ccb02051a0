package io.kvpool.transfer;

import io.kvpool.transfer.spi.LinkListener;
import io.kvpool.transfer.spi.PeerLink;
import io.kvpool.transfer.wire.MalformedMessageException;
import io.kvpool.transfer.wire.Message;
import io.kvpool.transfer.wire.WireCodec;
import io.kvpool.transfer.wire.WireFormat;

import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.IdentityHashMap;
import java.util.List;
import java.util.Map;
import java.util.Objects;
import java.util.concurrent.atomic.LongAdder;

/**
 * What both engines share: peers, the handshake (peer pre-check), strict decoding, and the duty cycle
 * that polls every link. Single-threaded: every method runs on the engine's owner thread, but the counters an
 * exporter reads ({@code metrics()}, {@link #peerBuilds()}, {@link #heartbeatFailures()}), which any thread may read.
 */
abstract class TransferEndpoint implements AutoCloseable {

    private static final int POLL_LIMIT = 256;

    /**
     * What the links report, handed to this engine's handlers. A field rather than the engine itself, so that the
     * handlers stay package-private: no application can fake a write's or a flush's end through the engine's API.
     */
    private final LinkListener events = new LinkListener() {
        @Override
        public void onFrame(PeerLink link, ByteBuffer frame) {
            TransferEndpoint.this.onFrame(link, frame);
        }

        @Override
        public void onWriteDone(PeerLink link, long token, int status) {
            TransferEndpoint.this.onWriteDone(link, token, status);
        }

        @Override
        public void onWritesDone(PeerLink link, long firstToken, int count, int status) {
            TransferEndpoint.this.onWritesDone(link, firstToken, count, status);
        }

        @Override
        public void onFlushDone(PeerLink link, long token, boolean ok) {
            TransferEndpoint.this.onFlushDone(link, token, ok);
        }

        @Override
        public void onLinkFailed(PeerLink link, String reason) {
            TransferEndpoint.this.onLinkFailed(link, reason);
        }
    };
    static final System.Logger LOG = System.getLogger("io.kvpool.transfer");
    /** The least time between two log lines of one repeating per-transfer event ({@link RateLimitedLog}). */
    static final long LOG_INTERVAL_NANOS = 10_000_000_000L;

    final PeerIdentity identity;
    /** This engine's instance id: random, never 0, sent to peers of version 4 and later ({@link #instance()}). */
    private final long instance = newInstance();
    final NanoClock clock;
    /** Whether a peer of another build is refused (off by default: a rollout mixes builds). */
    final boolean strictBuild;
    /** Links UP or RETIRING by the peer's build, for exporters on any thread ({@link #peerBuilds()}). */
    private final java.util.concurrent.ConcurrentHashMap<String, Integer> upByBuild = new java.util.concurrent.ConcurrentHashMap<>();
    /** Every peer ever added, by id (ids are indexes that transfers and quarantines keep). */
    final List<Peer> peers = new ArrayList<>();
    /** The peers {@link #doWork()} may still have to poll; a peer leaves once it is down and owes nothing. */
    private final List<Peer> polled = new ArrayList<>();
    /** The peer of each link, for frames and events (a server that reconnects adds a peer per link). */
    private final Map<PeerLink, Peer> byLink = new IdentityHashMap<>();
    final LongAdder malformedFrames = new LongAdder();
    final LongAdder refusedPeers = new LongAdder();
    final LongAdder duplicateHellos = new LongAdder();
    final LongAdder heartbeatFailures = new LongAdder();
    /** When this side pings a quiet link and fails a silent one (links of version 3 and later). */
    final Heartbeat heartbeat;
    /** The clock at the last heartbeat check (at construction before the first): a long gap is this engine's own stall. */
    private long lastHeartbeatCycleNanos;
    boolean closed;
    /**
     * The time {@link #doWork()} read before its polls, which the handlers of the events those polls deliver take as
     * theirs rather than reading the clock again (owner thread).
     */
    long cycleNanos;
    /** The buffer {@link #send} encodes frames into, reused from message to message (owner thread). */
    private ByteBuffer sendBuffer = ByteBuffer.allocate(4096);
    /** Frames up to this size leave their buffer for the next; a larger one (a descriptor of thousands of pages) does not. */
    private static final int MAX_KEPT_SEND_BUFFER = 64 * 1024;

    TransferEndpoint(PeerIdentity identity, NanoClock clock, boolean strictBuild, Heartbeat heartbeat) {
        this.identity = Objects.requireNonNull(identity, "identity");
        this.clock = Objects.requireNonNull(clock, "clock");
        this.strictBuild = strictBuild;
        this.heartbeat = Objects.requireNonNull(heartbeat, "heartbeat");
        this.lastHeartbeatCycleNanos = clock.nanoTime();
    }

    private static long newInstance() {
        final java.security.SecureRandom random = new java.security.SecureRandom();
        long id;
        do {
            id = random.nextLong();
        } while (id == 0); // 0 stands for none
        return id;
    }

    /**
     * This engine's instance id: 64 random bits, never 0, fixed for the engine's life. Each peer of protocol version 4
     * and later learns it in the handshake ({@link Peer#remoteInstance()}), so an application that runs several
     * engines of one identity (two prefill processes behind one decode) can tell their links apart: the process that
     * prepared a request names its engine's instance, and the other side starts the transfer on that link.
     * Readable from any thread.
     *
     * @return the id
     */
    public long instance() {
        return instance;
    }

    /**
     * {@return the layout's fingerprint, computed once for an endpoint to keep (it hashes a string per call)}
     *
     * @throws IllegalArgumentException if the identity announces another layout than the pool's
     */
    static long checkedFingerprint(PeerIdentity identity, io.kvpool.KvLayout layout) {
        final long fingerprint = layout.fingerprint();
        if (identity.layoutFingerprint() != fingerprint) {
            throw new IllegalArgumentException("identity's layout fingerprint " + PeerIdentity.hex(identity.layoutFingerprint())
                + " is not the pool's " + PeerIdentity.hex(fingerprint) + " (" + layout + ")");
        }
        return fingerprint;
    }

    /**
     * Whether this side sends its HELLO as soon as a link is added. The receiver does; a sender answers the
     * receiver's HELLO in its layout, so that a version-1 receiver (which reads nothing but a version-1 HELLO)
     * is answered in version 1. An identity of version 1 only behaves as version-1 code did: it sends at once.
     */
    boolean sendsHelloFirst() {
        return true;
    }

    /**
     * Our HELLO in the given layout version (1: one version, the lowest of ours, as version-1 code sent). A range set
     * beyond this build's wire format is announced up to {@link WireFormat#VERSION} only: both sides then settle on the
     * same version whatever build the peer runs (a peer that settled on a version this side cannot write would fail on
     * the first frame).
     */
    private void sendHello(Peer p, int format) {
        p.helloSent = true;
        p.ownHelloFormat = format;
        final PeerIdentity id = format == 1 ? identity.withVersions(identity.minVersion(), identity.minVersion())
            : identity.maxVersion() > WireFormat.VERSION && identity.minVersion() <= WireFormat.VERSION
            ? identity.withVersions(identity.minVersion(), WireFormat.VERSION) : identity;
        p.link.send(WireCodec.encode(new Message.Hello(id), format));
    }

    /** @return the layout our first HELLO uses: 1 for an identity of version 1 only, else {@link WireFormat#HELLO_FORMAT} */
    private int helloFormat() {
        return identity.maxVersion() < 2 ? 1 : WireFormat.HELLO_FORMAT;
    }

    /**
     * Adds a link and starts its handshake (a receiver's HELLO goes out at once; a sender answers it). Nothing but
     * HELLO/REFUSE is accepted on it until the peer's identity has been checked, and then, on version 4 and later,
     * nothing but the peer's INSTANCE (or a copy of its HELLO, or a REFUSE) until that arrived. Transfers may use the peer once
     * {@link Peer#isUp()}: call {@link #doWork()} until then (the peer's side must run its duty cycle too).
     *
     * @param link a link of a transport, owned by this engine from now on
     * @return the peer's id, its index for {@link #peer(int)}
     * @throws IllegalStateException    if the engine is closed
     * @throws IllegalArgumentException if this engine polls the link already, as another peer's (one link's events reach
     *                                  one peer: a second would wait for frames the first takes, and its failure would
     *                                  close the first one's link)
     * @throws NullPointerException     if {@code link} is null
     */
    public int addPeer(PeerLink link) {
        ensureOpen();
        Objects.requireNonNull(link, "link");
        final Peer polling = byLink.get(link);
        if (polling != null) {
            throw new IllegalArgumentException(link.describe() + " is peer " + polling.id + "'s link already (" + polling.state
                + "): add a new link for a new peer");
        }
        final Peer p = new Peer(peers.size(), link);
        p.lastHeardNanos = clock.nanoTime(); // the handshake's wait for the peer's HELLO starts now
        peers.add(p);
        polled.add(p);
        byLink.put(link, p);
        if (sendsHelloFirst() || identity.maxVersion() < 2) {
            try {
                sendHello(p, helloFormat());
            } catch (RuntimeException e) {
                fail(p, Peer.State.FAILED, "could not send HELLO: " + e.getMessage());
            }
        }
        return p.id;
    }

    /**
     * Every peer ever added, by id. For the engine's thread (exporters on other threads read
     * {@link #peerBuilds()}); each peer's {@link Peer#remote()} names its build, {@link Peer#protocolVersion()} the
     * version its link speaks.
     *
     * @return an unmodifiable view
     */
    public List<Peer> peers() {
        return java.util.Collections.unmodifiableList(peers);
    }

    /**
     * The builds of the peers whose links are UP or RETIRING (finishing their transfers before a teardown), with how
     * many links each: what an exporter renders as {@code kvpool_peer_info{build=…}}. While a link retires, its peer's
     * fresh link is counted too. Readable from any thread.
     *
     * @return a snapshot, build → links UP or RETIRING
     */
    public Map<String, Integer> peerBuilds() {
        return Map.copyOf(upByBuild);
    }

    /**
     * The link to the engine of an instance id: where a receiver starts the transfer of a request that the
     * engine of that instance prepared. Owner thread.
     *
     * @param instance the peer engine's {@link #instance()}, as its process reported it
     * @return the id of the newest peer that is {@link Peer#isUp() up} with that {@link Peer#remoteInstance()}, or -1
     *         if none (no link to that engine is up, or its code is older than version 4 and sends no instance)
     * @throws IllegalArgumentException if {@code instance} is 0 (that stands for none)
     */
    public int upPeerOf(long instance) {
        if (instance == 0) {
            throw new IllegalArgumentException("instance id 0 stands for none; an engine's id is never 0");
        }
        for (int i = polled.size() - 1; i >= 0; i--) { // an UP peer is polled; polled keeps the order peers were added in
            final Peer p = polled.get(i);
            if (p.remoteInstance == instance && p.isUp()) {
                return p.id;
            }
        }
        return -1;
    }

    /** @return the peer with that id */
    public Peer peer(int id) {
        return peers.get(id);
    }

    /**
     * @return frames that did not decode, or that decoded but broke the protocol (a frame before the handshake, a
     *         version the link does not speak, a second HELLO with another identity, one the engine could not act
     *         on); each failed its link. Readable from any thread.
     */
    public long malformedFrames() {
        return malformedFrames.sum();
    }

    /** @return links refused in the handshake (by either side). Readable from any thread. */
    public long refusedPeers() {
        return refusedPeers.sum();
    }

    /** @return copies of the peer's HELLO that arrived after it passed (ignored, not an error). Readable from any thread. */
    public long duplicateHellos() {
        return duplicateHellos.sum();
    }

    /**
     * @return links this side failed because the peer answered no PING within the {@link Heartbeat} timeout, or did
     *         not finish the handshake (its HELLO, and its INSTANCE on version 4 and later) within its idle time plus
     *         timeout. Readable from any thread.
     */
    public long heartbeatFailures() {
        return heartbeatFailures.sum();
    }

    /** {@return when this side pings a quiet link and fails a silent one} */
    public Heartbeat heartbeat() {
        return heartbeat;
    }

    /**
     * One duty cycle: polls every link, then checks heartbeats and deadlines.
     *
     * @return work done (events handled), 0 when idle
     */
    public int doWork() {
        if (closed && !workAfterClose()) {
            return 0;
        }
        // Read before the polls: every frame that arrived by then is read below (unless a poll hit its limit, see
        // backlogged), so a link judged silent at this time was silent. Read after them, a frame arriving on a link
        // already polled while a later poll ran would go unread at a time past its deadline.
        final long now = clock.nanoTime();
        cycleNanos = now;
        int work = 0;
        for (int i = 0; i < polled.size(); i++) {
            final Peer p = polled.get(i);
            if (!closed && (p.state == Peer.State.HANDSHAKE || p.state == Peer.State.UP || p.state == Peer.State.RETIRING)
                || p.users > 0) {
                final int n = p.link.poll(events, POLL_LIMIT); // a down link still owes its writes' terminal states
                p.backlogged = n >= POLL_LIMIT; // events left behind: a frame may be among them
                work += n;
            }
        }
        // A peer that is down (FAILED and REFUSED are final) and owes no write's terminal state (users only
        // grow on an UP peer) will never be polled again: drop it, so reconnects do not slow the cycle.
        // Its link's late events then find no peer (as a down peer's are ignored anyway), and the subclass drops
        // what it kept for the peer. An index loop, not removeIf: its predicate would capture this engine, an
        // allocation every cycle.
        for (int i = 0; i < polled.size(); ) {
            final Peer p = polled.get(i);
            if ((p.state == Peer.State.FAILED || p.state == Peer.State.REFUSED) && p.users == 0) {
                polled.remove(i);
                byLink.remove(p.link, p);
                onPeerGone(p);
            } else {
                i++;
            }
        }
        if (heartbeat.isOn() && !closed) {
            work += heartbeats(now);
        }
        return work + onDuty(now);
    }

    /**
     * Pings the quiet links of version 3 and later and fails the silent ones ({@link Heartbeat}). Runs after the
     * links were polled with a time read before the polls, so a frame that waited in a transport during a stall of
     * this thread, or arrived while the cycle polled, counts as heard.
     * Of a gap in this engine's own duty cycle (a GC pause, a frozen host, a stepped test clock: the peer may have
     * had no turn either) only {@link Heartbeat#stallAllowanceNanos()} counts toward a wait, and a link whose poll
     * left events behind is not failed in that cycle (the answer may be among them).
     *
     * @return work done: PINGs sent and links failed
     */
    private int heartbeats(long now) {
        final long stall = Math.max(0, now - lastHeartbeatCycleNanos - heartbeat.stallAllowanceNanos());
        lastHeartbeatCycleNanos = now;
        int work = 0;
        for (int i = 0; i < polled.size(); i++) {
            final Peer p = polled.get(i);
            if (p.state == Peer.State.HANDSHAKE) {
                p.lastHeardNanos = Math.min(now, p.lastHeardNanos + stall); // its wait started when it was added
                work += handshakeWait(p, now);
                continue;
            }
            if (p.version < 3 || !p.carries()) {
                continue;
            }
            if (p.heard) {
                p.heard = false;
                p.pinging = false;
                p.lastHeardNanos = now;
            } else if (p.pinging) {
                p.pingSentNanos += stall;
                if (!p.backlogged && now - p.pingSentNanos >= heartbeat.timeoutNanos()) {
                    heartbeatFailures.increment();
                    fail(p, Peer.State.FAILED, "heartbeat: nothing heard from the peer for " + ms(now - p.lastHeardNanos) + " ms, "
                        + ms(now - p.pingSentNanos) + " ms of them after a PING (" + ms(heartbeat.idleNanos()) + " ms idle, "
                        + ms(heartbeat.timeoutNanos()) + " ms timeout)");
                    work++;
                }
            } else if (now - p.lastHeardNanos >= heartbeat.idleNanos()) {
                p.pinging = true;
                p.pingSentNanos = now;
                if (send(p, new Message.Ping(now))) {
                    work++;
                }
            }
        }
        return work;
    }

    /**
     * Fails a link whose handshake did not pass within the heartbeat's idle time plus its timeout since it was added:
     * never answered (a peer of any version sends its HELLO at once, or answers ours), or no INSTANCE after the HELLO on
     * a link of version 4 and later (a peer sends it right after accepting our HELLO). A stall of this
     * engine counts as for a PING (the caller has moved the start by it).
     *
     * @return 1 if the link was failed, else 0
     */
    private int handshakeWait(Peer p, long now) {
        final long limit = heartbeat.idleNanos() + heartbeat.timeoutNanos();
        if (p.backlogged || now - p.lastHeardNanos < limit) {
            return 0;
        }
        heartbeatFailures.increment();
        fail(p, Peer.State.FAILED, "handshake: " + (p.helloAccepted ? "no INSTANCE after the peer's HELLO" : "no HELLO from the peer")
            + " within " + ms(now - p.lastHeardNanos) + " ms (the heartbeat's "
            + ms(heartbeat.idleNanos()) + " ms idle + " + ms(heartbeat.timeoutNanos()) + " ms timeout)");
        return 1;
    }

    /**
     * @param maxChars the longest name a line keeps whole (longer ones are cut to head and tail)
     * @return why this side refuses a peer of identity {@code remote}, one line per reason (empty: it accepts it)
     */
    private List<String> refusals(PeerIdentity remote, int maxChars) {
        final List<String> out = new ArrayList<>(identity.mismatches(remote, strictBuild, maxChars));
        if (identity.commonVersion(remote) >= 0 && negotiated(remote) < 0) {
            out.add(0, "protocol versions: local=" + identity.versions() + " remote=" + remote.versions()
                + " share none with this build's wire format [" + WireFormat.MIN_VERSION + "," + WireFormat.VERSION + "]");
        }
        return out;
    }

    /**
     * @return the refusal as a REFUSE carries it, at most {@link PeerIdentity#MAX_FIELD_BYTES} bytes: the names cut,
     *         not the line's end, so that it still names both values (a peer refused for a reason only this side
     *         checks gets no HELLO: the REFUSE is all it learns)
     */
    private String refuseText(PeerIdentity remote, String reason) {
        String told = reason;
        // down to a code point each side of ".." (max 3): six names of 4-byte code points still fit with their labels
        for (int max = 96; told.getBytes(StandardCharsets.UTF_8).length > PeerIdentity.MAX_FIELD_BYTES && max >= 3; max /= 2) {
            told = new PeerMismatchException(identity, remote, refusals(remote, max)).getMessage();
        }
        return told;
    }

    private static long ms(long nanos) {
        return nanos / 1_000_000;
    }

    /** A peer that is down and owes nothing left the duty cycle for good: drop what was kept for it. */
    void onPeerGone(Peer peer) {
    }

    /** Whether {@link #doWork()} still has work after close (a sender waiting for its writes' terminal states). */
    boolean workAfterClose() {
        return false;
    }

    /** Deadlines and other time-driven work. @return work done */
    abstract int onDuty(long now);

    /** A decoded message from a peer whose handshake passed. */
    abstract void onMessage(Peer peer, Message m);

    /** The peer can no longer be used (failed, refused, malformed frame). Called once. */
    abstract void onPeerDown(Peer peer);

    /** {@link LinkListener#onWriteDone}, from {@link #doWork}'s polls. */
    abstract void onWriteDone(PeerLink link, long token, int status);

    /** {@link LinkListener#onWritesDone}: {@link #onWriteDone} for each, unless the engine accounts for a run at once. */
    void onWritesDone(PeerLink link, long firstToken, int count, int status) {
        for (int i = 0; i < count; i++) {
            onWriteDone(link, firstToken + i, status);
        }
    }

    /** {@link LinkListener#onFlushDone}, from {@link #doWork}'s polls. */
    abstract void onFlushDone(PeerLink link, long token, boolean ok);

    /**
     * @return the newest version both identities claim and this build's wire format encodes, or -1: an identity may
     *         claim versions the codec cannot write (a range set by hand), and a link must never settle on one
     */
    private int negotiated(PeerIdentity remote) {
        final int v = Math.min(WireFormat.VERSION, Math.min(identity.maxVersion(), remote.maxVersion()));
        return v >= Math.max(WireFormat.MIN_VERSION, Math.max(identity.minVersion(), remote.minVersion())) ? v : -1;
    }

    /** {@link LinkListener#onFrame}, from {@link #doWork}'s polls. */
    final void onFrame(PeerLink link, ByteBuffer frame) {
        final Peer p = peerOf(link);
        if (p == null || p.state == Peer.State.FAILED || p.state == Peer.State.REFUSED) {
            return;
        }
        final Message m;
        final int version;
        try {
            version = WireCodec.version(frame);
            // no engine reads a descriptor's page handles (a sender needs their count, a receiver refuses descriptors)
            m = WireCodec.decode(frame, false);
        } catch (MalformedMessageException e) {
            malformedFrames.increment();
            fail(p, Peer.State.FAILED, "malformed frame: " + e.getMessage());
            return;
        }
        p.heard = true; // the heartbeat's proof of life: the duty cycle reads it (and the clock) once per cycle
        if (p.state == Peer.State.HANDSHAKE && p.helloAccepted) {
            awaitingInstance(p, m, version);
            return;
        }
        if (p.state == Peer.State.HANDSHAKE) {
            switch (m) {
                case Message.Hello h -> {
                    p.remote = h.identity();
                    p.helloFormat = version;
                    final List<String> common = identity.mismatches(h.identity(), false); // what both sides check
                    final List<String> mismatches = refusals(h.identity(), Integer.MAX_VALUE);
                    // the HELLO is answered in kind when we accept it, or when the peer refuses ours too (the checks
                    // without strictBuild are the same on both sides) and names its view. A refusal only this side
                    // makes (strictBuild, this build's wire format) sends no HELLO: the peer would go UP on it until
                    // our REFUSE came, and a transfer it started in between would pin its pages for nothing
                    if (!p.helloSent && (mismatches.isEmpty() || !common.isEmpty())) {
                        try {
                            sendHello(p, version); // in kind: a version-1 peer reads only a version-1 HELLO
                        } catch (RuntimeException e) {
                            fail(p, Peer.State.FAILED, "could not send HELLO: " + e.getMessage());
                            return;
                        }
                    }
                    if (mismatches.isEmpty()) {
                        p.version = negotiated(h.identity());
                        if (p.version < WireFormat.INSTANCE_VERSION) {
                            up(p); // older code sends no INSTANCE: its links go up on the HELLO, its instance unknown
                            return;
                        }
                        p.helloAccepted = true; // up once the peer's INSTANCE follows its HELLO
                        try {
                            p.link.send(WireCodec.encode(new Message.Instance(instance), p.version));
                        } catch (RuntimeException e) {
                            fail(p, Peer.State.FAILED, "could not send INSTANCE: " + e.getMessage());
                        }
                    } else {
                        final String reason = new PeerMismatchException(identity, h.identity(), mismatches).getMessage();
                        try {
                            p.link.send(WireCodec.encode(new Message.Refuse(refuseText(h.identity(), reason)), version));
                        } catch (RuntimeException ignored) {
                            // the link is going down anyway
                        }
                        fail(p, Peer.State.REFUSED, reason);
                    }
                }
                case Message.Refuse r -> fail(p, Peer.State.REFUSED, "refused by the peer: " + r.reason());
                default -> {
                    malformedFrames.increment();
                    fail(p, Peer.State.FAILED, "protocol error: " + m.getClass().getSimpleName() + " before the handshake");
                }
            }
            return;
        }
        if (!framedAsTheLinkSpeaks(p, m, version)) {
            return;
        }
        switch (m) {
            case Message.Hello h -> {
                if (h.identity().equals(p.remote)) {
                    duplicateHellos.increment(); // a duplicated frame, not a protocol error: it changes nothing
                } else {
                    malformedFrames.increment();
                    fail(p, Peer.State.FAILED, "protocol error: a second HELLO with another identity: " + h.identity()
                        + ", the first was " + p.remote);
                }
            }
            case Message.Refuse r -> fail(p, Peer.State.REFUSED, "refused by the peer: " + r.reason());
            case Message.Instance i -> {
                if (i.instance() != p.remoteInstance) { // a copy changes nothing; another id is another engine
                    malformedFrames.increment();
                    fail(p, Peer.State.FAILED, "protocol error: a second INSTANCE " + Peer.hex(i.instance()) + ", the first was "
                        + Peer.hex(p.remoteInstance));
                }
            }
            case Message.Ping ping -> send(p, new Message.Pong(ping.token())); // answered also with the heartbeat OFF
            case Message.Pong pong -> {
                // proof of life, counted above like any frame
            }
            default -> {
                try {
                    onMessage(p, m);
                } catch (RuntimeException e) {
                    // a frame that decoded but that the engine could not act on: this peer's problem, never the
                    // duty cycle's (the other peers and the deadlines must still be served)
                    malformedFrames.increment();
                    fail(p, Peer.State.FAILED, "protocol error: " + m.getClass().getSimpleName() + " could not be handled: " + e);
                }
            }
        }
    }

    /**
     * Checks a frame's header version on a link whose peer's HELLO was accepted. A copy of the peer's HELLO keeps its
     * layout; a REFUSE answers our HELLO in that HELLO's layout (older code framed it in the negotiated version, also
     * accepted); everything else speaks the negotiated version.
     *
     * @return whether it is right; if not, the link was failed
     */
    private boolean framedAsTheLinkSpeaks(Peer p, Message m, int version) {
        final boolean ok = switch (m) {
            case Message.Hello h -> version == p.helloFormat;
            case Message.Refuse r -> version == p.ownHelloFormat || version == p.version;
            default -> version == p.version;
        };
        if (!ok) {
            malformedFrames.increment();
            fail(p, Peer.State.FAILED, "protocol error: a " + m.getClass().getSimpleName() + " of version " + version
                + " on a link speaking version " + p.version + (m instanceof Message.Hello ? " (the peer's HELLO was framed in "
                + p.helloFormat + ")" : ""));
        }
        return ok;
    }

    /**
     * A frame on a link of version 4 or later whose peer's HELLO this side accepted: the peer's INSTANCE takes it UP.
     * A copy of the HELLO is ignored and a REFUSE refuses, as on a link that is up; anything else fails the link.
     */
    private void awaitingInstance(Peer p, Message m, int version) {
        if (!framedAsTheLinkSpeaks(p, m, version)) {
            return;
        }
        switch (m) {
            case Message.Instance i -> {
                p.remoteInstance = i.instance();
                up(p);
            }
            case Message.Hello h when h.identity().equals(p.remote) -> duplicateHellos.increment();
            case Message.Refuse r -> fail(p, Peer.State.REFUSED, "refused by the peer: " + r.reason());
            default -> {
                malformedFrames.increment();
                fail(p, Peer.State.FAILED, "protocol error: " + m.getClass().getSimpleName() + " before the peer's INSTANCE");
            }
        }
    }

    /** The handshake passed: the peer goes UP, with one log line (a build difference is named here, once per link). */
    private void up(Peer p) {
        final PeerIdentity remote = p.remote;
        p.lastHeardNanos = clock.nanoTime();
        p.heard = false;
        p.moveTo(Peer.State.UP);
        upByBuild.merge(remote.buildVersion(), 1, Integer::sum);
        final boolean otherBuild = !identity.buildVersion().equals(remote.buildVersion());
        LOG.log(otherBuild ? System.Logger.Level.WARNING : System.Logger.Level.INFO, () -> this + ": " + p
            + " speaking version " + p.version + (otherBuild ? ", peer on ANOTHER BUILD: local="
            + identity.buildVersion() + " remote=" + remote.buildVersion() + " (allowed; strictBuild refuses)" : "")
            + ", peer " + remote + (p.remoteInstance == 0 ? "" : " instance " + Peer.hex(p.remoteInstance)));
    }

    /** {@link LinkListener#onLinkFailed}, from {@link #doWork}'s polls. */
    final void onLinkFailed(PeerLink link, String reason) {
        final Peer p = peerOf(link);
        if (p != null && (p.state == Peer.State.HANDSHAKE || p.state == Peer.State.UP || p.state == Peer.State.RETIRING)) {
            fail(p, Peer.State.FAILED, "link failed: " + reason);
        }
    }

    /** Takes a peer down once: records why, closes its link, tells the subclass. */
    final void fail(Peer p, Peer.State state, String why) {
        if (p.state == Peer.State.FAILED || p.state == Peer.State.REFUSED) {
            return;
        }
        if (p.state == Peer.State.UP || p.state == Peer.State.RETIRING) {
            upByBuild.computeIfPresent(p.remote.buildVersion(), (b, n) -> n == 1 ? null : n - 1);
        }
        p.moveTo(state);
        p.failure = why;
        if (state == Peer.State.REFUSED) {
            refusedPeers.increment();
        }
        LOG.log(System.Logger.Level.WARNING, () -> this + ": " + p); // one line per link state change
        try {
            p.link.close();
        } catch (RuntimeException ignored) {
            // closing is best effort; tearDown() is what proves anything
        }
        onPeerDown(p);
    }

    final Peer peerOf(PeerLink link) {
        return byLink.get(link);
    }

    /** @return how many peers the duty cycle still polls (tests: dead peers must not accumulate) */
    final int polledPeers() {
        return polled.size();
    }

    /** Sends a message if the peer's link carries frames (UP or RETIRING); a failed send takes the peer down. @return whether it was sent */
    final boolean send(Peer p, Message m) {
        if (!p.carries()) {
            return false;
        }
        // a message that cannot be encoded is our bug, not the link's. The frame is encoded into one buffer this
        // endpoint reuses (the link copies it before send returns): a link that takes buffers (ShmLink, and the links
        // that pass them on) allocates no frame per message; the others get a copy in an array
        final ByteBuffer frame = WireCodec.encode(m, p.version, sendBuffer);
        if (frame.capacity() <= MAX_KEPT_SEND_BUFFER) {
            sendBuffer = frame;
        }
        try {
            p.link.send(frame);
            return true;
        } catch (RuntimeException e) {
            fail(p, Peer.State.FAILED, "send failed: " + e.getMessage());
            return false;
        }
    }

    /** Closes the engine. Idempotent; throws no checked exception. Owner thread only. */
    @Override
    public abstract void close();

    /**
     * Takes every peer that is not down yet to FAILED and closes every link, best effort (the pages' states, not the
     * links, protect the memory). A peer that still owes writes' terminal states stays polled until they came.
     */
    final void closeLinks() {
        for (Peer p : peers) {
            if (p.state == Peer.State.HANDSHAKE || p.state == Peer.State.UP || p.state == Peer.State.RETIRING) {
                if (p.state != Peer.State.HANDSHAKE) {
                    upByBuild.computeIfPresent(p.remote.buildVersion(), (b, n) -> n == 1 ? null : n - 1);
                }
                p.moveTo(Peer.State.FAILED);
                p.failure = getClass().getSimpleName() + " closed";
            }
            try {
                p.link.close();
            } catch (RuntimeException ignored) {
                // best effort
            }
        }
    }

    final void ensureOpen() {
        if (closed) {
            throw new IllegalStateException(getClass().getSimpleName() + " is closed");
        }
    }
}
