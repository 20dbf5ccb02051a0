package io.kvpool.transfer.wire;

import io.kvpool.transfer.PeerIdentity;
import org.junit.jupiter.api.Test;

import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.HexFormat;
import java.util.List;
import java.util.SplittableRandom;

import static io.kvpool.transfer.wire.WireFormat.*;
import static org.junit.jupiter.api.Assertions.*;

/** The frame format round-trips every message exactly, and decoding refuses every malformed frame by name. */
class WireCodecTest {

    static final PeerIdentity ID = new PeerIdentity(VERSION, 0x1234_5678_9ABC_DEF0L, "glm-4.6@r3", "production", "v1.2.0");
    /** 256 bytes of UTF-8 in 128 two-byte characters: the longest string field. */
    static final String MAX_STR = "é".repeat(PeerIdentity.MAX_FIELD_BYTES / 2);

    static List<Message> samples() {
        final List<Message> out = new ArrayList<>();
        out.add(new Message.Cancel(42, Message.Cancel.REJECTED, "admission: RETRY_LATER"));
        out.add(new Message.Cancel(-1, Integer.MIN_VALUE, ""));
        out.add(new Message.Hello(ID));
        out.add(new Message.Hello(new PeerIdentity(1, Long.MIN_VALUE, MAX_STR, "a".repeat(256), "€".repeat(85) + "x")));
        out.add(new Message.Hello(new PeerIdentity(Integer.MAX_VALUE, -1L, "m", "e", "😀 build")));
        out.add(new Message.Refuse("environment: local=production remote=staging"));
        out.add(new Message.Refuse(""));
        out.add(new Message.Refuse(MAX_STR));
        out.add(new Message.Descriptor(42, 3, 7, 17, ID.layoutFingerprint(), 2, 1, new long[] {1L << 40 | 5, -1L, 0},
            new byte[] {9, 8, 7}));
        out.add(new Message.Descriptor(-1, -2, -3, -4, -5, -6, -7, new long[0], new byte[0]));
        out.add(new Message.Descriptor(Long.MAX_VALUE, Long.MIN_VALUE, Integer.MIN_VALUE, Integer.MAX_VALUE, 0, 1, 0,
            new long[MAX_ARRAY], new byte[MAX_KEY_BYTES]));
        out.add(new Message.Completion(3, 7, 1, 17, 3, new int[] {0xDEADBEEF, 0, -1}, 5, 4, 1));
        out.add(new Message.Completion(3, 7, 0, 17, 0, null, 0, 0, 0));
        out.add(new Message.Completion(3, 7, 0, 0, 0, new int[0], -1, -2, -3));
        out.add(new Message.Completion(Long.MIN_VALUE, -1, -1, -1, -1, new int[MAX_ARRAY], Long.MAX_VALUE, 0, 0));
        out.add(new Message.Abort(3, 7, Message.Abort.TIMEOUT, "no completion after 20 ms"));
        out.add(new Message.Abort(-1, -1, -99, ""));
        out.add(new Message.Abort(0, 0, 0, MAX_STR));
        out.add(new Message.Drained(3, 7, -1, 10, 9, 1));
        out.add(new Message.Drained(Long.MIN_VALUE, Integer.MIN_VALUE, Integer.MAX_VALUE, -1, Long.MIN_VALUE, Long.MAX_VALUE));
        out.add(new Message.Ping(123_456_789_000L));
        out.add(new Message.Ping(Long.MIN_VALUE));
        out.add(new Message.Pong(-1));
        out.add(new Message.Pong(Long.MAX_VALUE));
        out.add(new Message.Instance(0x5C81_7ED0_0000_0001L));
        out.add(new Message.Instance(-1));
        return out;
    }

    /**
     * What this codec writes in versions 1 and 2 is byte for byte what the shipped codecs of those versions wrote (kept
     * as fixtures), and what they wrote reads back as the same message: a field moved in both this encoder and this
     * decoder would still round-trip, and fails here.
     */
    @Test
    void decodeReadsAFrameAtAnyPositionAndLeavesTheBufferAsItCame() {
        final byte[] frame = WireCodec.encode(new Message.Ping(77));
        final ByteBuffer b = ByteBuffer.allocate(frame.length + 10).order(ByteOrder.BIG_ENDIAN);
        b.position(7);
        b.put(frame);
        b.limit(7 + frame.length).position(7);
        assertEquals(new Message.Ping(77), WireCodec.decode(b.asReadOnlyBuffer().order(ByteOrder.BIG_ENDIAN)));
        assertEquals(new Message.Ping(77), WireCodec.decode(b));
        assertEquals(7, b.position());
        assertEquals(ByteOrder.BIG_ENDIAN, b.order());
        b.limit(b.limit() - 1); // one byte short: malformed, and still as it came
        assertThrows(MalformedMessageException.class, () -> WireCodec.decode(b));
        assertEquals(7, b.position());
        assertEquals(ByteOrder.BIG_ENDIAN, b.order());
    }

    @Test
    void thePublicJavadocStatesTheWireLimitsThisCodeHas() {
        // io.kvpool.transfer.wire is not exported: PeerIdentity's and TransferReceiver#start's Javadoc give these as
        // numbers, which must change with them
        assertEquals(1, WireFormat.MIN_VERSION, "PeerIdentity's Javadoc says 1");
        assertEquals(4, WireFormat.VERSION, "PeerIdentity's Javadoc says 4");
        assertEquals(65_536, WireFormat.MAX_ARRAY, "TransferReceiver#start's Javadoc says 65,536");
    }

    @Test
    void framesOfVersionsOneToThreeAreTheShippedCodecsBytes() {
        int checked = 0;
        final List<Message> all = new ArrayList<>(samples());
        all.add(new Message.Hello(ID.withVersions(1, 2))); // a range: version 2's HELLO layout only
        for (Message m : all) {
            for (int version = 1; version <= 3; version++) {
                if (m.type() > (version == 1 ? DRAINED : version == 2 ? CANCEL : PONG)
                    || version == 3 && m instanceof Message.Hello // a HELLO's header names its layout, 1 or 2
                    || version == 1 && m instanceof Message.Hello h && h.identity().minVersion() != h.identity().maxVersion()) {
                    continue; // that version has no such message
                }
                final int v = version;
                final byte[] shipped = version == 1 ? WireCodecV1.encode(m) : version == 2 ? WireCodecV2.encode(m, version)
                    : WireCodecV3.encode(m, version);
                assertArrayEquals(shipped, WireCodec.encode(m, version), "version " + version + " of " + m);
                final Message read;
                try {
                    read = WireCodec.decode(shipped);
                } catch (MalformedMessageException e) {
                    assertThrows(MalformedMessageException.class, () -> decodeShipped(shipped, v), "both refuse " + m);
                    continue; // a value this code refuses (a HELLO's version out of range): refused as it was
                }
                assertEquals(decodeShipped(shipped, version), read, "version " + version + " of " + m + " reads back the same");
                checked++;
            }
        }
        assertTrue(checked >= 40, "frames checked: " + checked);
    }

    private static Message decodeShipped(byte[] frame, int version) {
        return version == 1 ? WireCodecV1.decode(frame) : version == 2 ? WireCodecV2.decode(frame) : WireCodecV3.decode(frame);
    }

    @Test
    void everyMessageTypeRoundTripsExactly() {
        final boolean[] seen = new boolean[INSTANCE + 1];
        for (Message m : samples()) {
            final byte[] frame = WireCodec.encode(m);
            final ByteBuffer h = ByteBuffer.wrap(frame).order(ByteOrder.LITTLE_ENDIAN);
            assertEquals(0x4B, frame[0] & 0xFF, "magic byte 0 on the wire");
            assertEquals(0x56, frame[1] & 0xFF, "magic byte 1 on the wire");
            assertEquals(m instanceof Message.Hello ? HELLO_FORMAT : VERSION, frame[2], "a HELLO's header names its layout");
            assertEquals(m.type(), frame[3]);
            assertEquals(frame.length - HEADER_BYTES, h.getInt(4), "body length field");
            assertEquals(frame.length - HEADER_BYTES, WireCodec.bodyLength(ByteBuffer.wrap(frame)));
            final Message back = WireCodec.decode(frame);
            assertEquals(m, back, () -> "round trip of " + m);
            assertEquals(m.getClass(), back.getClass());
            assertArrayEquals(frame, WireCodec.encode(back), () -> "re-encoding of " + m);
            seen[m.type()] = true;
        }
        for (int t = HELLO; t <= INSTANCE; t++) {
            assertTrue(seen[t], "no sample of type " + t);
        }
    }

    @Test
    void version1FramesLackCancel() {
        final Message.Cancel c = new Message.Cancel(1, Message.Cancel.REJECTED, "x");
        assertThrows(IllegalArgumentException.class, () -> WireCodec.encode(c, 1));
        final byte[] f = WireCodec.encode(c);
        f[2] = 1;
        malformed(f, "unknown message type 7");
    }

    @Test
    void version2FramesLackTheHeartbeat() {
        for (Message m : new Message[] {new Message.Ping(7), new Message.Pong(7)}) {
            final IllegalArgumentException e = assertThrows(IllegalArgumentException.class, () -> WireCodec.encode(m, 2));
            assertTrue(e.getMessage().contains("needs version 3, not 2"), e.getMessage());
            final byte[] f = WireCodec.encode(m);
            f[2] = 2;
            malformed(f, "unknown message type " + m.type() + " in version 2");
        }
    }

    @Test
    void version3FramesLackTheInstance() {
        final Message.Instance m = new Message.Instance(7);
        final IllegalArgumentException e = assertThrows(IllegalArgumentException.class, () -> WireCodec.encode(m, 3));
        assertTrue(e.getMessage().contains("needs version 4, not 3"), e.getMessage());
        final byte[] f = WireCodec.encode(m);
        f[2] = 3;
        malformed(f, "unknown message type 10 in version 3");
        assertThrows(MalformedMessageException.class, () -> WireCodecV3.decode(WireCodec.encode(m)), "version-3 code refuses it");
    }

    @Test
    void anInstanceOfZeroIsRefused() {
        assertThrows(IllegalArgumentException.class, () -> new Message.Instance(0));
        final byte[] f = WireCodec.encode(new Message.Instance(1));
        f[HEADER_BYTES] = 0; // the id's low byte: 1 → 0
        malformed(f, "invalid value");
    }

    @Test
    void aHelloIsFramedInItsLayoutNotInTheNewestVersion() {
        // version-2 code reads a HELLO of header version 2 only: a HELLO announcing [1,3] must still be framed so
        final byte[] f = WireCodec.encode(new Message.Hello(ID.withVersions(MIN_VERSION, VERSION)));
        assertEquals(HELLO_FORMAT, f[2]);
        assertEquals(new Message.Hello(ID.withVersions(MIN_VERSION, VERSION)), WireCodecV2.decode(f));
        final IllegalArgumentException e = assertThrows(IllegalArgumentException.class,
            () -> WireCodec.encode(new Message.Hello(ID), VERSION));
        assertTrue(e.getMessage().contains("1 or 2, not " + VERSION), e.getMessage());
        f[2] = (byte) VERSION;
        malformed(f, "a HELLO's header names its body layout, 1 or 2, not " + VERSION);
    }

    @Test
    void nullAndEmptyChecksumsStayDistinct() {
        final Message.Completion none = (Message.Completion) WireCodec.decode(
            WireCodec.encode(new Message.Completion(1, 1, 0, 4, 0, null, 1, 1, 0)));
        assertNull(none.checksums());
        final Message.Completion empty = (Message.Completion) WireCodec.decode(
            WireCodec.encode(new Message.Completion(1, 1, 0, 4, 0, new int[0], 1, 1, 0)));
        assertNotNull(empty.checksums());
        assertEquals(0, empty.checksums().length);
        assertNotEquals(none, empty);
    }

    @Test
    void drainedWithRankMinusOneKeepsIt() {
        final Message.Drained d = (Message.Drained) WireCodec.decode(WireCodec.encode(new Message.Drained(5, 2, -1, 3, 2, 1)));
        assertEquals(-1, d.senderRank());
        assertEquals(new Message.Drained(5, 2, -1, 3, 2, 1), d);
    }

    @Test
    void decodeOfAByteBufferReadsFromItsPosition() {
        final byte[] frame = WireCodec.encode(new Message.Drained(5, 2, 0, 3, 2, 1));
        final ByteBuffer b = ByteBuffer.allocate(frame.length + 5);
        b.position(5);
        b.put(frame).position(5);
        assertEquals(new Message.Drained(5, 2, 0, 3, 2, 1), WireCodec.decode(b));
    }

    @Test
    void encodeIntoAReusedBufferWritesTheSameFrameAndTakesANewOneOnlyWhenTooSmall() {
        ByteBuffer reuse = ByteBuffer.allocate(64).order(ByteOrder.BIG_ENDIAN); // its order must not matter
        for (Message m : samples()) {
            final int version = m instanceof Message.Hello ? HELLO_FORMAT : VERSION;
            final byte[] expected = WireCodec.encode(m, version);
            reuse.position(3).limit(7); // leftovers of an earlier use
            final ByteBuffer got = WireCodec.encode(m, version, reuse);
            assertEquals(0, got.position());
            assertEquals(expected.length, got.remaining());
            final byte[] bytes = new byte[got.remaining()];
            got.get(0, bytes);
            assertArrayEquals(expected, bytes, m::toString);
            if (expected.length <= reuse.capacity()) {
                assertSame(reuse, got, "a frame that fits goes into the buffer given");
            } else {
                assertNotSame(reuse, got);
                assertEquals(expected.length, got.capacity(), "a new buffer of exactly the frame");
            }
            reuse = got.capacity() > reuse.capacity() ? got : reuse;
        }
        assertEquals(WireCodec.encode(samples().get(0), VERSION).length, WireCodec.encode(samples().get(0), VERSION, null).capacity());
    }

    @Test
    void bodyLengthAtAnIndexReadsTheHeaderThereInLittleEndianAndMovesNothing() {
        final byte[] frame = WireCodec.encode(new Message.Drained(5, 2, 0, 3, 2, 1)); // a 40-byte body
        for (ByteOrder order : new ByteOrder[] {ByteOrder.BIG_ENDIAN, ByteOrder.LITTLE_ENDIAN}) {
            final ByteBuffer b = ByteBuffer.allocate(frame.length + 11).order(order);
            b.put(11, frame).position(2).limit(30);
            assertEquals(40, WireCodec.bodyLength(b, 11, 11 + HEADER_BYTES), order::toString);
            assertEquals(2, b.position());
            assertEquals(30, b.limit());
            assertEquals(order, b.order());
            assertEquals(40, WireCodec.bodyLength(b.duplicate().clear().position(11)), "the same as the header at the position");
            final MalformedMessageException shortHeader = assertThrows(MalformedMessageException.class,
                () -> WireCodec.bodyLength(b, 11, 11 + HEADER_BYTES - 1));
            assertTrue(shortHeader.getMessage().contains("needs 8 bytes, got 7"), shortHeader.getMessage());
        }
        final byte[] bad = withLengthField(frame, MAX_BODY_BYTES + 1);
        final MalformedMessageException e = assertThrows(MalformedMessageException.class,
            () -> WireCodec.bodyLength(ByteBuffer.wrap(bad), 0, bad.length));
        assertTrue(e.getMessage().contains("exceeds the limit"), e.getMessage());
    }

    // ---------------------------------------------------------------------------------------------
    // strict decoding

    static void malformed(byte[] frame, String... fragments) {
        final MalformedMessageException e = assertThrows(MalformedMessageException.class, () -> WireCodec.decode(frame),
            () -> "decoded " + HexFormat.of().formatHex(frame));
        for (String f : fragments) {
            assertTrue(e.getMessage().contains(f), () -> "message '" + e.getMessage() + "' does not name '" + f + "'");
        }
        // the engines' decode, which skips a descriptor's handles, refuses it for the same reason
        final MalformedMessageException skipping = assertThrows(MalformedMessageException.class,
            () -> WireCodec.decode(ByteBuffer.wrap(frame), false), () -> "decoded without handles " + HexFormat.of().formatHex(frame));
        assertEquals(e.getMessage(), skipping.getMessage());
    }

    static byte[] frame(Message m) {
        return WireCodec.encode(m);
    }

    /**
     * A frame with the given header and body, its length field saying the body's true length. Version 1's header:
     * the HELLO bodies built below are version 1's layout (one version), which a current decoder still reads.
     */
    static byte[] raw(int type, byte[] body) {
        return ByteBuffer.allocate(HEADER_BYTES + body.length).order(ByteOrder.LITTLE_ENDIAN)
            .putShort((short) MAGIC).put((byte) 1).put((byte) type).putInt(body.length).put(body).array();
    }

    static ByteBuffer body(int capacity) {
        return ByteBuffer.allocate(capacity).order(ByteOrder.LITTLE_ENDIAN);
    }

    static byte[] withLengthField(byte[] frame, int len) {
        final byte[] f = frame.clone();
        ByteBuffer.wrap(f).order(ByteOrder.LITTLE_ENDIAN).putInt(4, len);
        return f;
    }

    static byte[] append(byte[] frame, int extra) {
        final byte[] f = Arrays.copyOf(frame, frame.length + extra);
        Arrays.fill(f, frame.length, f.length, (byte) 0x5A);
        return f;
    }

    @Test
    void badMagicIsNamed() {
        final byte[] f = frame(new Message.Hello(ID));
        f[0] = 0x12;
        f[1] = 0x34;
        malformed(f, "magic", "0x3412");
    }

    @Test
    void versionsOutsideTheSupportedRangeAreNamed() {
        for (int v : new int[] {0, VERSION + 1, 255}) {
            final byte[] f = frame(new Message.Drained(5, 2, 0, 3, 2, 1));
            f[2] = (byte) v;
            malformed(f, "version " + v);
        }
    }

    @Test
    void unknownTypesAreNamed() {
        for (int t : new int[] {0, INSTANCE + 1, 255}) {
            final byte[] f = frame(new Message.Refuse("x"));
            f[3] = (byte) t;
            malformed(f, "unknown message type " + t);
        }
    }

    @Test
    void declaredBodyLongerOrShorterThanCarriedIsNamed() {
        final byte[] f = frame(new Message.Drained(1, 2, 3, 4, 5, 6)); // 40-byte body
        assertEquals(HEADER_BYTES + 40, f.length);
        malformed(withLengthField(f, 41), "41-byte body", "carries 40");
        malformed(withLengthField(f, 39), "39-byte body", "carries 40");
        malformed(Arrays.copyOf(f, f.length - 1), "40-byte body", "carries 39");
        malformed(append(f, 3), "40-byte body", "carries 43");
        malformed(Arrays.copyOf(f, 5), "header needs 8 bytes, got 5");
        malformed(new byte[0], "got 0");
    }

    @Test
    void bytesLeftAfterTheFieldsAreNamed() {
        for (Message m : samples()) {
            final byte[] f = frame(m);
            final byte[] longer = withLengthField(append(f, 3), f.length - HEADER_BYTES + 3);
            malformed(longer, "type " + m.type(), "3 bytes left after its fields");
        }
    }

    @Test
    void truncationInsideAFieldIsNamed() {
        // a DRAINED cut inside its last i64, length field adjusted so the framing itself is consistent
        final byte[] d = frame(new Message.Drained(1, 2, 3, 4, 5, 6));
        malformed(withLengthField(Arrays.copyOf(d, d.length - 4), 36), "type 6", "ends inside its fields", "36");
        // a HELLO cut inside its environment string: the string's declared length no longer fits
        final byte[] h = frame(new Message.Hello(ID));
        final int cut = HEADER_BYTES + 4 + 4 + 8 + 2 + "glm-4.6@r3".length() + 2 + 3; // 3 bytes into "production" (version 2's range)
        malformed(withLengthField(Arrays.copyOf(h, cut), cut - HEADER_BYTES), "string of 10 bytes, only 3 left");
        // a COMPLETION cut inside its checksum array: the count needs more than remains
        final byte[] c = frame(new Message.Completion(1, 1, 0, 12, 0, new int[] {1, 2, 3}, 3, 3, 0));
        final int at = HEADER_BYTES + 8 + 4 + 4 + 4 + 4 + 1 + 4 + 6; // one and a half checksums
        malformed(withLengthField(Arrays.copyOf(c, at), at - HEADER_BYTES), "checksums: count 3 needs 12 bytes, 6 left");
        // an ABORT cut inside its reason code
        final byte[] a = frame(new Message.Abort(1, 1, 4, "x"));
        malformed(withLengthField(Arrays.copyOf(a, HEADER_BYTES + 14), 14), "type 5", "ends inside its fields");
    }

    @Test
    void stringLongerThanTheFieldLimitIsNamed() {
        final ByteBuffer b = body(2 + 300);
        b.putShort((short) 300).put("r".repeat(300).getBytes(StandardCharsets.US_ASCII));
        malformed(raw(REFUSE, b.array()), "string of 300 bytes", "limit of 256");
        // and one that claims the maximum u16 length
        final ByteBuffer c = body(2 + 4);
        c.putShort((short) 0xFFFF).put(new byte[4]);
        malformed(raw(REFUSE, c.array()), "string of 65535 bytes");
    }

    @Test
    void invalidUtf8IsNamed() {
        for (byte[] bad : new byte[][] {
            {(byte) 0xC3, 0x28},                       // a lead byte followed by a non-continuation
            {(byte) 0xFF},                             // never valid
            {(byte) 0xC0, (byte) 0x80},                // overlong NUL
            {(byte) 0xED, (byte) 0xA0, (byte) 0x80},   // a UTF-16 surrogate encoded as UTF-8
            {'o', 'k', (byte) 0xE2, (byte) 0x82},      // truncated three-byte sequence
        }) {
            final ByteBuffer b = body(2 + bad.length);
            b.putShort((short) bad.length).put(bad);
            malformed(raw(REFUSE, b.array()), "UTF-8", HexFormat.of().formatHex(bad));
        }
        // inside a HELLO too
        final byte[] model = "glm".getBytes(StandardCharsets.US_ASCII);
        final ByteBuffer h = body(4 + 8 + 2 + 3 + 2 + 1 + 2 + 1);
        h.putInt(VERSION).putLong(1).putShort((short) 3).put(model).putShort((short) 1).put((byte) 0x80).putShort((short) 1).put((byte) 'b');
        malformed(raw(HELLO, h.array()), "UTF-8", "80");
    }

    @Test
    void arrayCountOverTheLimitIsNamed() {
        final ByteBuffer d = body(8 + 8 + 4 + 4 + 8 + 4 + 4 + 4);
        d.putLong(1).putLong(0).putInt(1).putInt(4).putLong(0).putInt(1).putInt(0).putInt(MAX_ARRAY + 1);
        malformed(raw(DESCRIPTOR, d.array()), "pageHandles", "count " + (MAX_ARRAY + 1), "limit of " + MAX_ARRAY);
        final ByteBuffer u = body(8 + 8 + 4 + 4 + 8 + 4 + 4 + 4);
        u.putLong(1).putLong(0).putInt(1).putInt(4).putLong(0).putInt(1).putInt(0).putInt(-1); // u32 4294967295
        malformed(raw(DESCRIPTOR, u.array()), "pageHandles", "count 4294967295");
        final ByteBuffer k = body(8 + 8 + 4 + 4 + 8 + 4 + 4 + 4 + 4);
        k.putLong(1).putLong(0).putInt(1).putInt(4).putLong(0).putInt(1).putInt(0).putInt(0).putInt(MAX_KEY_BYTES + 1);
        malformed(raw(DESCRIPTOR, k.array()), "regionKey", "count " + (MAX_KEY_BYTES + 1));
        final ByteBuffer c = body(8 + 4 + 4 + 4 + 4 + 1 + 4);
        c.putLong(1).putInt(1).putInt(0).putInt(4).putInt(0).put((byte) 1).putInt(MAX_ARRAY + 1);
        malformed(raw(COMPLETION, c.array()), "checksums", "count " + (MAX_ARRAY + 1));
    }

    @Test
    void countNeedingMoreBytesThanRemainIsNamed() {
        final ByteBuffer d = body(8 + 8 + 4 + 4 + 8 + 4 + 4 + 4 + 16 + 4);
        d.putLong(1).putLong(0).putInt(1).putInt(4).putLong(0).putInt(1).putInt(0).putInt(3).putLong(1).putLong(2).putInt(0);
        malformed(raw(DESCRIPTOR, d.array()), "pageHandles", "count 3 needs 24 bytes, 20 left");
        final ByteBuffer k = body(8 + 8 + 4 + 4 + 8 + 4 + 4 + 4 + 4 + 2);
        k.putLong(1).putLong(0).putInt(1).putInt(4).putLong(0).putInt(1).putInt(0).putInt(0).putInt(5).put(new byte[2]);
        malformed(raw(DESCRIPTOR, k.array()), "regionKey", "count 5 needs 5 bytes, 2 left");
    }

    @Test
    void checksumsPresentMustBeZeroOrOne() {
        for (int present : new int[] {2, 0x7F, 0xFF}) {
            final byte[] f = frame(new Message.Completion(1, 1, 0, 4, 0, new int[] {5}, 1, 1, 0));
            f[HEADER_BYTES + 24] = (byte) present;
            malformed(f, "checksumsPresent", "got " + (byte) present);
        }
    }

    @Test
    void checksumsAbsentWithANonZeroCountIsNamed() {
        final byte[] f = frame(new Message.Completion(1, 1, 0, 8, 0, new int[] {5, 6}, 2, 2, 0));
        f[HEADER_BYTES + 24] = 0;
        malformed(f, "2 checksums but checksumsPresent=0");
    }

    @Test
    void aHelloWhoseVersionRangeStartsBelowOneIsNamed() {
        final byte[] f = WireCodec.encode(new Message.Hello(ID.withVersions(MIN_VERSION, VERSION)));
        ByteBuffer.wrap(f).order(ByteOrder.LITTLE_ENDIAN).putInt(HEADER_BYTES, -5); // the range's first field
        malformed(f, "type 1", "version range [-5, " + VERSION + "] starts below 1");
        final ByteBuffer v1 = body(4 + 8 + 3 * 3);
        v1.putInt(0).putLong(1);
        for (String s : new String[] {"m", "e", "b"}) {
            v1.putShort((short) 1).put(s.getBytes(StandardCharsets.UTF_8));
        }
        malformed(raw(HELLO, v1.array()), "type 1", "version range [0, 0] starts below 1");
    }

    @Test
    void blankIdentityStringsInHelloAreNamed() {
        final String[] names = {"modelId", "environment", "buildVersion"};
        for (int blank = 0; blank < 3; blank++) {
            for (String value : new String[] {"", " ", "\t\n"}) {
                final String[] v = {"m", "e", "b"};
                v[blank] = value;
                final byte[][] u = new byte[3][];
                int n = 4 + 8;
                for (int i = 0; i < 3; i++) {
                    u[i] = v[i].getBytes(StandardCharsets.UTF_8);
                    n += 2 + u[i].length;
                }
                final ByteBuffer b = body(n);
                b.putInt(VERSION).putLong(1);
                for (byte[] s : u) {
                    b.putShort((short) s.length).put(s);
                }
                malformed(raw(HELLO, b.array()), "type 1", names[blank] + " must not be blank");
            }
        }
    }

    @Test
    void bodyOverTheLimitIsNamed() {
        final byte[] header = withLengthField(frame(new Message.Refuse("x")), MAX_BODY_BYTES + 1);
        malformed(header, "body of " + (MAX_BODY_BYTES + 1) + " bytes", "limit of " + MAX_BODY_BYTES);
        assertThrows(MalformedMessageException.class, () -> WireCodec.bodyLength(ByteBuffer.wrap(header)));
        // a length field with the top bit set is a u32, not a negative int
        malformed(withLengthField(frame(new Message.Refuse("x")), -1), "body of 4294967295 bytes");
        // a whole frame over the limit, bytes and all
        final byte[] big = new byte[HEADER_BYTES + MAX_BODY_BYTES + 8];
        ByteBuffer.wrap(big).order(ByteOrder.LITTLE_ENDIAN).putShort((short) MAGIC).put((byte) VERSION).put((byte) DESCRIPTOR)
            .putInt(MAX_BODY_BYTES + 8);
        malformed(big, "body of " + (MAX_BODY_BYTES + 8) + " bytes");
    }

    @Test
    void encodeRefusesWhatDecodeWouldRefuse() {
        assertThrows(IllegalArgumentException.class,
            () -> WireCodec.encode(new Message.Descriptor(1, 0, 1, 4, 0, 1, 0, new long[MAX_ARRAY + 1], new byte[0])));
        assertThrows(IllegalArgumentException.class,
            () -> WireCodec.encode(new Message.Descriptor(1, 0, 1, 4, 0, 1, 0, new long[1], new byte[MAX_KEY_BYTES + 1])));
        assertThrows(IllegalArgumentException.class,
            () -> WireCodec.encode(new Message.Completion(1, 0, 0, 4, 0, new int[MAX_ARRAY + 1], 0, 0, 0)));
    }

    @Test
    void aDescriptorDecodedWithoutItsHandlesKeepsTheirCountAndEveryOtherField() {
        for (Message m : samples()) {
            final Message back = WireCodec.decode(ByteBuffer.wrap(WireCodec.encode(m)), false);
            if (!(m instanceof Message.Descriptor d)) {
                assertEquals(m, back, "only a descriptor decodes otherwise");
                continue;
            }
            final Message.Descriptor b = (Message.Descriptor) back;
            final int pages = d.pageHandles().length;
            assertEquals(new Message.Descriptor(d.requestId(), d.transferId(), d.generation(), d.expectedTokens(),
                d.layoutFingerprint(), d.senders(), d.senderRank(), new long[0], d.regionKey(), pages), b);
            assertEquals(pages, b.pages());
            assertEquals(pages == 0, b.hasPageHandles(), "no handle is missing from a descriptor of no page");
            if (pages > 0) {
                assertThrows(IllegalArgumentException.class, () -> WireCodec.encode(b), "its handles are not there to send");
            }
        }
        assertThrows(IllegalArgumentException.class, () -> new Message.Descriptor(1, 0, 1, 4, 0, 1, 0, new long[2], new byte[0], 3));
        assertThrows(IllegalArgumentException.class, () -> new Message.Descriptor(1, 0, 1, 4, 0, 1, 0, new long[0], new byte[0], -1));
    }

    @Test
    void longReasonsAreCutToTheFieldLimitNotRefused() {
        for (String unit : new String[] {"r", "é", "€", "😀"}) {
            final String reason = unit.repeat(400);
            for (Message m : new Message[] {new Message.Refuse(reason), new Message.Abort(1, 1, 1, reason)}) {
                final Message back = WireCodec.decode(WireCodec.encode(m));
                final String got = back instanceof Message.Refuse r ? r.reason() : ((Message.Abort) back).detail();
                assertTrue(got.getBytes(StandardCharsets.UTF_8).length <= PeerIdentity.MAX_FIELD_BYTES, got);
                assertTrue(got.endsWith("..."), got);
                final String kept = got.substring(0, got.length() - 3);
                assertTrue(reason.startsWith(kept), () -> "'" + unit + "': the cut reason is not a prefix of the original: " + got);
                assertEquals(0, kept.length() % unit.length(), () -> "'" + unit + "': cut inside a character: " + got);
                assertTrue(kept.getBytes(StandardCharsets.UTF_8).length > PeerIdentity.MAX_FIELD_BYTES - 3 - 4 - 1,
                    () -> "'" + unit + "': cut more than needed: " + got);
            }
        }
    }

    @Test
    void aHugeDetailIsCutInLinearTime() {
        // details carry exception messages from anywhere; cutting one must not take seconds per character
        final String detail = "x".repeat(2_000_000);
        final Message.Abort back = assertTimeoutPreemptively(java.time.Duration.ofSeconds(5),
            () -> (Message.Abort) WireCodec.decode(WireCodec.encode(new Message.Abort(1, 1, 2, detail))));
        assertEquals("x".repeat(PeerIdentity.MAX_FIELD_BYTES - 3) + "...", back.detail());
    }

    // ---------------------------------------------------------------------------------------------
    // fuzz

    @Test
    void mutatedFramesDecodeToTheirExactBytesOrFailAsMalformed() {
        final List<byte[]> valid = new ArrayList<>();
        for (Message m : samples()) {
            final byte[] f = WireCodec.encode(m);
            if (f.length < 4096) {
                valid.add(f);
            }
        }
        final SplittableRandom rnd = new SplittableRandom(20_261_130L);
        int decoded = 0;
        int refused = 0;
        for (int i = 0; i < 20_000; i++) {
            byte[] f = valid.get(rnd.nextInt(valid.size())).clone();
            final int mutations = 1 + rnd.nextInt(3);
            boolean fixLength = rnd.nextInt(3) != 0; // usually keep the framing consistent, to reach the field parser
            for (int k = 0; k < mutations; k++) {
                switch (rnd.nextInt(6)) {
                    case 0, 1 -> { // flip a byte, mostly in the body
                        final int at = f.length <= HEADER_BYTES || rnd.nextInt(8) == 0
                            ? rnd.nextInt(Math.max(1, f.length)) : HEADER_BYTES + rnd.nextInt(f.length - HEADER_BYTES);
                        if (f.length > 0) {
                            f[at] ^= (byte) (1 + rnd.nextInt(255));
                        }
                    }
                    case 2 -> { // set a byte to an edge value (counts, lengths, flags)
                        if (f.length > 0) {
                            f[rnd.nextInt(f.length)] = (byte) new int[] {0, 1, 2, 0x7F, 0x80, 0xFF}[rnd.nextInt(6)];
                        }
                    }
                    case 3 -> f = Arrays.copyOf(f, rnd.nextInt(f.length + 1)); // truncate
                    case 4 -> { // extend with random bytes
                        final int n = f.length;
                        f = Arrays.copyOf(f, n + 1 + rnd.nextInt(16));
                        for (int j = n; j < f.length; j++) {
                            f[j] = (byte) rnd.nextInt(256);
                        }
                    }
                    default -> { // insert or remove a byte in the body
                        if (f.length > HEADER_BYTES) {
                            final int at = HEADER_BYTES + rnd.nextInt(f.length - HEADER_BYTES);
                            final byte[] g = new byte[f.length + (rnd.nextBoolean() ? 1 : -1)];
                            if (g.length > f.length) {
                                System.arraycopy(f, 0, g, 0, at);
                                g[at] = (byte) rnd.nextInt(256);
                                System.arraycopy(f, at, g, at + 1, f.length - at);
                            } else {
                                System.arraycopy(f, 0, g, 0, at);
                                System.arraycopy(f, at + 1, g, at, f.length - at - 1);
                            }
                            f = g;
                        }
                    }
                }
            }
            if (fixLength && f.length >= HEADER_BYTES) {
                ByteBuffer.wrap(f).order(ByteOrder.LITTLE_ENDIAN).putInt(4, f.length - HEADER_BYTES);
            }
            final byte[] frame = f;
            final int iteration = i;
            final Message m;
            try {
                m = WireCodec.decode(frame);
            } catch (MalformedMessageException e) {
                assertNotNull(e.getMessage());
                refused++;
                continue;
            } catch (Throwable t) {
                throw new AssertionError("iteration " + iteration + ": decode threw " + t + " for " + HexFormat.of().formatHex(frame), t);
            }
            final byte[] again = assertDoesNotThrow(() -> WireCodec.encode(m, frame[2]), // in the version it was decoded from
                () -> "iteration " + iteration + ": re-encoding " + m);
            assertArrayEquals(frame, again, () -> "iteration " + iteration + ": " + m + " decoded from "
                + HexFormat.of().formatHex(frame) + " re-encodes differently");
            decoded++;
        }
        // the mutations must reach both outcomes, or the loop proves little
        assertTrue(decoded > 1000, "only " + decoded + " mutated frames decoded");
        assertTrue(refused > 1000, "only " + refused + " mutated frames refused");
    }
}
