package io.kvpool.transfer.wire;

/**
 * The control protocol's frame format: the only place it is defined. All integers little-endian.
 *
 * <pre>
 *  frame
 *   0        2        3        4                 8
 *   +--------+--------+--------+-----------------+------------------------------+
 *   | magic  | version| type   | body length     | body (exactly that many bytes)|
 *   | 0x4B56 | u8 = 1 | u8     | u32             |                               |
 *   +--------+--------+--------+-----------------+------------------------------+
 *
 *  bodies (str = u16 length + UTF-8 bytes, ≤ 256; arrays = u32 count + elements)
 *   1 HELLO       i32 protocolVersion, i64 layoutFingerprint, str modelId, str environment, str buildVersion
 *   2 REFUSE      str reason
 *   3 DESCRIPTOR  i64 requestId, i64 transferId, i32 generation, i32 expectedTokens, i64 layoutFingerprint,
 *                 i32 senders, i32 senderRank, i64[] pageHandles, u8[] regionKey
 *   4 COMPLETION  i64 transferId, i32 generation, i32 senderRank, i32 tokenCount, i32 firstPage,
 *                 u8 checksumsPresent (0|1), i32[] checksums, i64 posted, i64 succeeded, i64 failed
 *   5 ABORT       i64 transferId, i32 generation, i32 reason (see Abort), str detail
 *   6 DRAINED     i64 transferId, i32 generation, i32 senderRank, i64 posted, i64 succeeded, i64 failed
 * </pre>
 *
 * Decoding is strict: a wrong magic, a version other than {@link #VERSION}, an unknown type, a body
 * length that differs from what the fields add up to, a count or string longer than its limit, or bytes
 * left over all fail with {@link MalformedMessageException}, and the link that carried the frame is closed.
 * A receiver never guesses: a frame in any other format is refused, never reinterpreted.
 */
public final class WireFormat {
    private WireFormat() {
    }

    /** First two bytes of every frame ("KV" read as a little-endian u16 is 0x564B; on the wire: 4B 56). */
    public static final int MAGIC = 0x564B;
    /** Protocol version this code speaks; peers with another version are refused in the handshake. */
    public static final int VERSION = 1;
    /** Bytes before the body. */
    public static final int HEADER_BYTES = 8;
    /** Largest body accepted (a descriptor of {@link #MAX_ARRAY} pages with the largest key fits). */
    public static final int MAX_BODY_BYTES = 1 << 20;
    /** Longest array accepted (pages per descriptor, checksums per completion). */
    public static final int MAX_ARRAY = 65_536;
    /** Longest region key accepted: room for a slot list of {@link #MAX_ARRAY} int32s plus 1 KiB of transport data. */
    public static final int MAX_KEY_BYTES = 4 * MAX_ARRAY + 1024;

    /** Type codes. */
    public static final int HELLO = 1, REFUSE = 2, DESCRIPTOR = 3, COMPLETION = 4, ABORT = 5, DRAINED = 6;
}
