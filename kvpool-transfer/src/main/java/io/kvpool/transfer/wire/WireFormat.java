package io.kvpool.transfer.wire;

/**
 * The control protocol's frame format: the only place it is defined. All integers little-endian.
 *
 * <pre>
 *  frame
 *   0        2        3        4                 8
 *   +--------+--------+--------+-----------------+------------------------------+
 *   | magic  | version| type   | body length     | body (exactly that many bytes)|
 *   | 4B 56  | u8 1-4 | u8     | u32             |                               |
 *   +--------+--------+--------+-----------------+------------------------------+
 *
 *  bodies (str = u16 length + UTF-8 bytes, ≤ 256; arrays = u32 count + elements)
 *   1 HELLO       version 2 (and every later version): i32 minVersion, i32 maxVersion, i64 layoutFingerprint,
 *                 str modelId, str environment, str buildVersion — the range of versions the peer speaks
 *                 version 1: i32 protocolVersion, i64 layoutFingerprint, str modelId, str environment,
 *                 str buildVersion (sent only by version-1 code, and in answer to a version-1 HELLO)
 *   2 REFUSE      str reason
 *   3 DESCRIPTOR  i64 requestId, i64 transferId, i32 generation, i32 expectedTokens, i64 layoutFingerprint,
 *                 i32 senders, i32 senderRank, i64[] pageHandles, u8[] regionKey
 *   4 COMPLETION  i64 transferId, i32 generation, i32 senderRank, i32 tokenCount, i32 firstPage,
 *                 u8 checksumsPresent (0|1), i32[] checksums, i64 posted, i64 succeeded, i64 failed
 *   5 ABORT       i64 transferId, i32 generation, i32 reason (see Abort), str detail
 *   6 DRAINED     i64 transferId, i32 generation, i32 senderRank, i64 posted, i64 succeeded, i64 failed
 *   7 CANCEL      i64 requestId, i32 reason (see Cancel), str detail                    (version 2 and later)
 *   8 PING        i64 token: "are you there?", answered by a PONG with the same token  (version 3 and later)
 *   9 PONG        i64 token, copied from the PING it answers                           (version 3 and later)
 *  10 INSTANCE    i64 instance (non-zero): the sending engine's random id                 (version 4 and later)
 * </pre>
 *
 * On a link of version 4 and later each side sends one INSTANCE right after it accepted the peer's HELLO, and takes
 * the link as up only once the peer's INSTANCE arrived: an application can then tell two peers of the same identity
 * apart (two prefill processes linked to one decode) and start a transfer on the link to the process it means.
 *
 * The header's version is the link's negotiated version (the highest both HELLOs' ranges share). A HELLO's
 * header names the layout of its body instead: {@link #HELLO_FORMAT} (2), or 1 towards version-1 code, whatever
 * range it announces, so that code of an older version can read the HELLO of a newer one and agree on a version
 * both speak. A REFUSE answering a HELLO uses that HELLO's header version.
 * Decoding is strict: a wrong magic, a version outside [{@link #MIN_VERSION}, {@link #VERSION}], an unknown type, a body
 * length that differs from what the fields add up to, a count or string longer than its limit, or bytes
 * left over all fail with {@link MalformedMessageException}, and the link that carried the frame is closed.
 * A receiver never guesses: a frame in any other format is refused, never reinterpreted.
 */
public final class WireFormat {
    private WireFormat() {
    }

    /** First two bytes of every frame ("KV" read as a little-endian u16 is 0x564B; on the wire: 4B 56). */
    public static final int MAGIC = 0x564B;
    /** Newest protocol version this code speaks (the top of its HELLO's range). */
    public static final int VERSION = 4;
    /** Oldest protocol version this code still speaks (version 1: the HELLO of one version, no CANCEL). */
    public static final int MIN_VERSION = 1;
    /**
     * The header version of every HELLO that announces a range (all but version-1 code's): the body layout version 2
     * introduced, which later versions keep, so a version-2 peer reads a later peer's HELLO.
     */
    public static final int HELLO_FORMAT = 2;
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
    /** Type code of CANCEL, which version 1 lacks: a link of version 1 never carries it. */
    public static final int CANCEL = 7;
    /** Type codes of the heartbeat, which versions 1 and 2 lack: a link of an older version never carries them. */
    public static final int PING = 8, PONG = 9;
    /** Type code of the engine's instance id, which versions 1 to 3 lack: a link of an older version never carries it. */
    public static final int INSTANCE = 10;
    /** The first version whose links carry INSTANCE. */
    public static final int INSTANCE_VERSION = 4;
    /** The last type code of {@link #VERSION}. */
    static final int LAST_TYPE = INSTANCE;
}
