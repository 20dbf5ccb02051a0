package io.kvpool.transfer.wire;

import io.kvpool.transfer.PeerIdentity;

import java.nio.BufferUnderflowException;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.charset.CharacterCodingException;
import java.nio.charset.CodingErrorAction;
import java.nio.charset.StandardCharsets;

import static io.kvpool.transfer.wire.WireFormat.*;

/** Encodes and strictly decodes control frames ({@link WireFormat}). Stateless and thread-safe. */
public final class WireCodec {
    private WireCodec() {
    }

    /**
     * {@return the frame for a message in this code's newest version, {@link WireFormat#VERSION}, header included,
     * as a new array} A HELLO goes out in {@link WireFormat#HELLO_FORMAT}, the layout every HELLO with a range uses.
     *
     * @param m the message; a REFUSE reason or ABORT detail too long for the frame is truncated
     * @throws IllegalArgumentException if an array or the region key is longer than {@link WireFormat} allows
     */
    public static byte[] encode(Message m) {
        return encode(m, m instanceof Message.Hello ? HELLO_FORMAT : VERSION);
    }

    private static final int[] NO_CHECKSUMS = new int[0];

    /**
     * Encodes a message in a given version of the wire format.
     *
     * @param m       the message; a REFUSE reason or ABORT detail too long for the frame is truncated
     * @param version the header's version: the link's negotiated version (a HELLO's: the layout of its body, 1 or
     *                {@link WireFormat#HELLO_FORMAT}; version 1 carries one version, so the identity's range must be
     *                a single version)
     * @return the frame for a message, as a new array
     * @throws IllegalArgumentException for a version this code does not speak, a message that version lacks, a
     *                                  version-1 HELLO of a range, a HELLO in a version that is not a HELLO layout, or a
     *                                  descriptor decoded without its page handles
     */
    public static byte[] encode(Message m, int version) {
        return encode(m, version, null).array(); // a buffer of exactly the frame's size
    }

    /**
     * Encodes a message as {@link #encode(Message, int)} does, into a buffer the caller reuses from frame to frame when
     * it has room, so that a hot path allocates no frame.
     *
     * @param m       the message
     * @param version the header's version, as for {@link #encode(Message, int)}
     * @param reuse   a buffer to encode into if its capacity suffices (its content, position, limit and byte order are
     *                overwritten), or {@code null}
     * @return the frame between position 0 and the limit: {@code reuse}, or a new heap buffer of exactly the frame's
     *         size when {@code reuse} is {@code null} or too small
     * @throws IllegalArgumentException as {@link #encode(Message, int)} does
     */
    public static ByteBuffer encode(Message m, int version, ByteBuffer reuse) {
        if (version < MIN_VERSION || version > VERSION) {
            throw new IllegalArgumentException("version " + version + " is outside [" + MIN_VERSION + ", " + VERSION + "]");
        }
        if (m.type() > lastType(version)) {
            throw new IllegalArgumentException(m.getClass().getSimpleName() + " needs version "
                + (m.type() > PONG ? 4 : m.type() > CANCEL ? 3 : 2) + ", not " + version);
        }
        if (m instanceof Message.Hello && version > HELLO_FORMAT) {
            throw new IllegalArgumentException("a HELLO's header names its body layout, 1 or " + HELLO_FORMAT + ", not " + version);
        }
        if (m instanceof Message.Descriptor d && !d.hasPageHandles()) {
            throw new IllegalArgumentException("a descriptor decoded without its page handles cannot be encoded: " + d);
        }
        final boolean v1Hello = version == 1 && m instanceof Message.Hello;
        if (v1Hello && ((Message.Hello) m).identity().minVersion() != ((Message.Hello) m).identity().maxVersion()) {
            throw new IllegalArgumentException("a version-1 HELLO carries one version, not " + ((Message.Hello) m).identity().versions());
        }
        final int bodyBytes = bodyLength(m) - (v1Hello ? 4 : 0);
        final int frameBytes = HEADER_BYTES + bodyBytes;
        final ByteBuffer frame = (reuse != null && reuse.capacity() >= frameBytes ? reuse.clear().limit(frameBytes)
            : ByteBuffer.allocate(frameBytes)).order(ByteOrder.LITTLE_ENDIAN);
        frame.putShort((short) MAGIC).put((byte) version).put((byte) m.type()).putInt(bodyBytes);
        final ByteBuffer body = frame; // the body follows the header in the same array
        switch (m) {
            case Message.Hello h -> {
                final PeerIdentity id = h.identity();
                if (!v1Hello) {
                    body.putInt(id.minVersion());
                }
                body.putInt(id.maxVersion()).putLong(id.layoutFingerprint());
                str(body, id.modelId());
                str(body, id.environment());
                str(body, id.buildVersion());
            }
            case Message.Refuse r -> str(body, truncate(r.reason()));
            case Message.Descriptor d -> {
                requireArray("pageHandles", d.pageHandles().length);
                if (d.regionKey().length > MAX_KEY_BYTES) {
                    throw new IllegalArgumentException("regionKey is " + d.regionKey().length + " bytes, at most " + MAX_KEY_BYTES);
                }
                body.putLong(d.requestId()).putLong(d.transferId()).putInt(d.generation()).putInt(d.expectedTokens())
                    .putLong(d.layoutFingerprint()).putInt(d.senders()).putInt(d.senderRank()).putInt(d.pageHandles().length);
                body.asLongBuffer().put(d.pageHandles()); // one bulk copy, in the body's (little-endian) order
                body.position(body.position() + 8 * d.pageHandles().length);
                body.putInt(d.regionKey().length).put(d.regionKey());
            }
            case Message.Completion c -> {
                body.putLong(c.transferId()).putInt(c.generation()).putInt(c.senderRank()).putInt(c.tokenCount())
                    .putInt(c.firstPage()).put((byte) (c.checksums() == null ? 0 : 1));
                final int[] cs = c.checksums() == null ? NO_CHECKSUMS : c.checksums();
                requireArray("checksums", cs.length);
                body.putInt(cs.length);
                body.asIntBuffer().put(cs); // one bulk copy, in the body's (little-endian) order
                body.position(body.position() + 4 * cs.length);
                body.putLong(c.posted()).putLong(c.succeeded()).putLong(c.failed());
            }
            case Message.Abort a -> {
                body.putLong(a.transferId()).putInt(a.generation()).putInt(a.reason());
                str(body, truncate(a.detail()));
            }
            case Message.Drained d -> body.putLong(d.transferId()).putInt(d.generation()).putInt(d.senderRank())
                .putLong(d.posted()).putLong(d.succeeded()).putLong(d.failed());
            case Message.Cancel c -> {
                body.putLong(c.requestId()).putInt(c.reason());
                str(body, truncate(c.detail()));
            }
            case Message.Ping p -> body.putLong(p.token());
            case Message.Pong p -> body.putLong(p.token());
            case Message.Instance i -> body.putLong(i.instance());
        }
        if (frame.hasRemaining()) {
            throw new AssertionError("body length mismatch for " + m);
        }
        return frame.flip();
    }

    /** @return the last type code a version knows */
    private static int lastType(int version) {
        return switch (version) {
            case 1 -> DRAINED;
            case 2 -> CANCEL;
            case 3 -> PONG;
            default -> LAST_TYPE;
        };
    }

    /**
     * Reads the version of a frame's header.
     *
     * @param frame a frame at its position (its header is checked as {@link #bodyLength(ByteBuffer)} does)
     * @return the version in its header
     */
    public static int version(ByteBuffer frame) {
        bodyLength(frame);
        return frame.get(frame.position() + 2) & 0xFF;
    }

    private static int bodyLength(Message m) {
        return switch (m) {
            case Message.Hello h -> 4 + 4 + 8 + strLen(h.identity().modelId()) + strLen(h.identity().environment())
                + strLen(h.identity().buildVersion());
            case Message.Refuse r -> strLen(truncate(r.reason()));
            case Message.Descriptor d -> 8 + 8 + 4 + 4 + 8 + 4 + 4 + 4 + 8 * d.pages() + 4 + d.regionKey().length;
            case Message.Completion c -> 8 + 4 + 4 + 4 + 4 + 1 + 4 + 4 * (c.checksums() == null ? 0 : c.checksums().length) + 24;
            case Message.Abort a -> 8 + 4 + 4 + strLen(truncate(a.detail()));
            case Message.Drained d -> 8 + 4 + 4 + 24;
            case Message.Cancel c -> 8 + 4 + strLen(truncate(c.detail()));
            case Message.Ping p -> 8;
            case Message.Pong p -> 8;
            case Message.Instance i -> 8;
        };
    }

    /**
     * Reads the body length from a frame header (to know how many bytes to wait for on a stream).
     *
     * @param header at least {@link WireFormat#HEADER_BYTES} bytes at its position (not consumed)
     * @return the body length
     * @throws MalformedMessageException on a wrong magic or version, unknown type or oversize body
     */
    public static int bodyLength(ByteBuffer header) {
        return bodyLength(header, header.position(), header.limit());
    }

    /**
     * Reads the body length from a frame header at an absolute index, as {@link #bodyLength(ByteBuffer)} does; the
     * buffer's position and byte order are neither used nor changed, and nothing is allocated.
     *
     * @param buffer the bytes
     * @param at     where the header starts
     * @param end    where the bytes end, at most the buffer's limit: at least {@link WireFormat#HEADER_BYTES} must lie
     *               between {@code at} and it
     * @return the body length
     * @throws MalformedMessageException as {@link #bodyLength(ByteBuffer)} does
     * @throws IndexOutOfBoundsException if {@code [at, end)} is not within {@code [0, limit)}
     */
    public static int bodyLength(ByteBuffer buffer, int at, int end) {
        java.util.Objects.checkFromToIndex(at, end, buffer.limit());
        if (end - at < HEADER_BYTES) {
            throw new MalformedMessageException("frame header needs " + HEADER_BYTES + " bytes, got " + (end - at));
        }
        final int magic = (buffer.get(at) & 0xFF) | (buffer.get(at + 1) & 0xFF) << 8; // little-endian, as the header
        final int version = buffer.get(at + 2) & 0xFF;
        final int type = buffer.get(at + 3) & 0xFF;
        final long len = (buffer.get(at + 4) & 0xFFL) | (buffer.get(at + 5) & 0xFFL) << 8 | (buffer.get(at + 6) & 0xFFL) << 16
            | (buffer.get(at + 7) & 0xFFL) << 24;
        if (magic != MAGIC) {
            throw new MalformedMessageException("bad magic 0x" + Integer.toHexString(magic) + ", expected 0x" + Integer.toHexString(MAGIC));
        }
        if (version < MIN_VERSION || version > VERSION) {
            throw new MalformedMessageException("unsupported protocol version " + version + ", this side speaks "
                + MIN_VERSION + " to " + VERSION);
        }
        if (type < HELLO || type > lastType(version)) {
            throw new MalformedMessageException("unknown message type " + type + " in version " + version);
        }
        if (type == HELLO && version > HELLO_FORMAT) {
            throw new MalformedMessageException("a HELLO's header names its body layout, 1 or " + HELLO_FORMAT + ", not " + version);
        }
        if (len > MAX_BODY_BYTES) {
            throw new MalformedMessageException("body of " + len + " bytes exceeds the limit of " + MAX_BODY_BYTES);
        }
        return (int) len;
    }

    /**
     * Decodes one whole frame.
     *
     * @param frame exactly one frame, header included
     * @return the message
     * @throws MalformedMessageException if the bytes are not exactly one valid frame
     */
    public static Message decode(byte[] frame) {
        return decode(ByteBuffer.wrap(frame));
    }

    /**
     * Decodes exactly one frame: the buffer's remaining bytes must be one header and its body, nothing more.
     * The buffer's position and byte order are as they came when it returns or throws; it reads the buffer itself
     * meanwhile, so no other thread may use it during the call.
     *
     * @param frame the frame, between position and limit
     * @return the message
     * @throws MalformedMessageException if the bytes are not exactly one valid frame
     */
    public static Message decode(ByteBuffer frame) {
        return decode(frame, true);
    }

    /**
     * Decodes exactly one frame as {@link #decode(ByteBuffer)} does, with every check it makes, for a reader that may
     * not need a descriptor's page handles: the engines (a sender needs only how many there are, a receiver refuses
     * descriptors), which then allocate no array of them per descriptor.
     *
     * @param frame       the frame, between position and limit
     * @param pageHandles whether a DESCRIPTOR's page handles are read; if not, its {@link Message.Descriptor#pageHandles()}
     *                    is empty, {@link Message.Descriptor#pages()} counts them, and it cannot be encoded again
     * @return the message
     * @throws MalformedMessageException if the bytes are not exactly one valid frame
     */
    public static Message decode(ByteBuffer frame, boolean pageHandles) {
        final int start = frame.position();
        final ByteOrder order = frame.order();
        try {
            // the caller's buffer itself, not a slice: deep in a duty cycle's inlining, escape analysis could not remove
            // a slice, and each frame cost an allocation
            return decode(frame.order(ByteOrder.LITTLE_ENDIAN), start, pageHandles);
        } finally {
            frame.order(order).position(start);
        }
    }

    private static final long[] NO_HANDLES = new long[0];

    /** {@link #decode(ByteBuffer, boolean)} of the frame at {@code start}, in little-endian order. */
    private static Message decode(ByteBuffer b, int start, boolean pageHandles) {
        final int len = bodyLength(b);
        final int version = b.get(start + 2) & 0xFF;
        final int type = b.get(start + 3) & 0xFF;
        if (b.remaining() != HEADER_BYTES + len) {
            throw new MalformedMessageException("frame of type " + type + " declares a " + len + "-byte body but carries "
                + (b.remaining() - HEADER_BYTES));
        }
        b.position(start + HEADER_BYTES);
        try {
            final Message m = switch (type) {
                case HELLO -> new Message.Hello(helloIdentity(b, version));
                case REFUSE -> new Message.Refuse(str(b));
                case DESCRIPTOR -> {
                    final long requestId = b.getLong();
                    final long transferId = b.getLong();
                    final int generation = b.getInt();
                    final int tokens = b.getInt();
                    final long fp = b.getLong();
                    final int senders = b.getInt();
                    final int rank = b.getInt();
                    final int pages = count(b, "pageHandles", MAX_ARRAY, 8);
                    final long[] handles = pageHandles && pages > 0 ? new long[pages] : NO_HANDLES;
                    b.asLongBuffer().get(handles); // one bulk copy, in the frame's (little-endian) order
                    b.position(b.position() + 8 * pages);
                    final byte[] key = new byte[count(b, "regionKey", MAX_KEY_BYTES, 1)];
                    b.get(key);
                    yield new Message.Descriptor(requestId, transferId, generation, tokens, fp, senders, rank, handles, key, pages);
                }
                case COMPLETION -> {
                    final long transferId = b.getLong();
                    final int generation = b.getInt();
                    final int rank = b.getInt();
                    final int tokens = b.getInt();
                    final int firstPage = b.getInt();
                    final int present = b.get();
                    if (present != 0 && present != 1) {
                        throw new MalformedMessageException("completion: checksumsPresent must be 0 or 1, got " + present);
                    }
                    final int n = count(b, "checksums", MAX_ARRAY, 4);
                    if (present == 0 && n != 0) {
                        throw new MalformedMessageException("completion: " + n + " checksums but checksumsPresent=0");
                    }
                    final int[] cs = present == 0 ? null : new int[n];
                    if (cs != null) {
                        b.asIntBuffer().get(cs); // one bulk copy, in the frame's (little-endian) order
                        b.position(b.position() + 4 * n);
                    }
                    yield new Message.Completion(transferId, generation, rank, tokens, firstPage, cs, b.getLong(), b.getLong(), b.getLong());
                }
                case ABORT -> new Message.Abort(b.getLong(), b.getInt(), b.getInt(), str(b));
                case DRAINED -> new Message.Drained(b.getLong(), b.getInt(), b.getInt(), b.getLong(), b.getLong(), b.getLong());
                case CANCEL -> new Message.Cancel(b.getLong(), b.getInt(), str(b));
                case PING -> new Message.Ping(b.getLong());
                case PONG -> new Message.Pong(b.getLong());
                case INSTANCE -> new Message.Instance(b.getLong());
                default -> throw new MalformedMessageException("unknown message type " + type);
            };
            if (b.hasRemaining()) {
                throw new MalformedMessageException("frame of type " + type + " has " + b.remaining() + " bytes left after its fields");
            }
            return m;
        } catch (BufferUnderflowException e) {
            throw new MalformedMessageException("frame of type " + type + " ends inside its fields (body " + len + " bytes)");
        } catch (IllegalArgumentException | NullPointerException e) {
            throw new MalformedMessageException("frame of type " + type + " holds an invalid value: " + e.getMessage());
        }
    }

    private static PeerIdentity helloIdentity(ByteBuffer b, int frameVersion) {
        final int min = b.getInt();
        final int max = frameVersion == 1 ? min : b.getInt(); // version 1's HELLO names one version
        final long fp = b.getLong();
        return new PeerIdentity(min, max, fp, str(b), str(b), str(b));
    }

    private static int count(ByteBuffer b, String what, int max, int elementBytes) {
        final long n = b.getInt() & 0xFFFF_FFFFL;
        if (n > max) {
            throw new MalformedMessageException(what + ": count " + n + " exceeds the limit of " + max);
        }
        if (n * elementBytes > b.remaining()) {
            throw new MalformedMessageException(what + ": count " + n + " needs " + n * elementBytes + " bytes, " + b.remaining() + " left");
        }
        return (int) n;
    }

    private static void requireArray(String what, int n) {
        if (n > MAX_ARRAY) {
            throw new IllegalArgumentException(what + " has " + n + " elements, at most " + MAX_ARRAY);
        }
    }

    private static String truncate(String s) {
        // reasons and details are for people: cut to the field limit rather than fail the send. One pass,
        // whole code points only (never half a surrogate pair, which would go out as '?').
        if (s.getBytes(StandardCharsets.UTF_8).length <= PeerIdentity.MAX_FIELD_BYTES) {
            return s;
        }
        final int budget = PeerIdentity.MAX_FIELD_BYTES - 3;
        int bytes = 0;
        int end = 0;
        while (end < s.length()) {
            final int cp = s.codePointAt(end);
            final int n = cp < 0x80 ? 1 : cp < 0x800 ? 2 : cp < 0x10000 ? 3 : 4; // a lone surrogate encodes as 1 ('?'): over-counted
            if (bytes + n > budget) {
                break;
            }
            bytes += n;
            end += Character.charCount(cp);
        }
        return s.substring(0, end) + "...";
    }

    private static int strLen(String s) {
        return 2 + s.getBytes(StandardCharsets.UTF_8).length;
    }

    private static void str(ByteBuffer b, String s) {
        final byte[] u = s.getBytes(StandardCharsets.UTF_8);
        if (u.length > PeerIdentity.MAX_FIELD_BYTES) {
            throw new IllegalArgumentException("string of " + u.length + " bytes, at most " + PeerIdentity.MAX_FIELD_BYTES);
        }
        b.putShort((short) u.length).put(u);
    }

    private static String str(ByteBuffer b) {
        final int n = b.getShort() & 0xFFFF;
        if (n > PeerIdentity.MAX_FIELD_BYTES) {
            throw new MalformedMessageException("string of " + n + " bytes exceeds the limit of " + PeerIdentity.MAX_FIELD_BYTES);
        }
        if (n > b.remaining()) {
            throw new MalformedMessageException("string of " + n + " bytes, only " + b.remaining() + " left");
        }
        final ByteBuffer slice = b.slice(b.position(), n);
        b.position(b.position() + n);
        try {
            return StandardCharsets.UTF_8.newDecoder().onMalformedInput(CodingErrorAction.REPORT)
                .onUnmappableCharacter(CodingErrorAction.REPORT).decode(slice).toString();
        } catch (CharacterCodingException e) {
            final byte[] u = new byte[Math.min(n, 32)];
            slice.get(0, u);
            throw new MalformedMessageException("string of " + n + " bytes is not valid UTF-8: "
                + java.util.HexFormat.of().formatHex(u) + (n > u.length ? "..." : ""));
        }
    }
}
