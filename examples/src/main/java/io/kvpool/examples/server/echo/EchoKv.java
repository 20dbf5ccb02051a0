package io.kvpool.examples.server.echo;

import io.kvpool.KvLayout;
import io.kvpool.Sequence;
import io.kvpool.examples.server.link.PageIo;

import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.charset.StandardCharsets;
import java.util.Arrays;
import java.util.List;
import java.util.zip.CRC32C;

/**
 * How the echo model keeps a token in KV: prefill writes, for every token and every layer, the token's
 * bytes, its position and the tenant into that token's K and V vectors; decode reads them back. So the
 * KV alone says which text, at which position, of which tenant a page holds.
 *
 * <h2>One token's K (or V) vector in one layer</h2>
 * <pre>
 *   byte   0       tag 0xEC
 *          1       token length n (1..8)
 *          2       tenant length m (1..64)
 *          3       0
 *          4..8    position, int32 little-endian
 *          8..16   token bytes (UTF-8), zero padded
 *         16..80   tenant bytes (ASCII), zero padded
 *         80..84   CRC32C of bytes 0..80, int32 little-endian
 *         84..     zeros, to the end of the vector
 *   then every byte i is XORed with mix(layer, kv, i), so each layer and K/V hold different bytes
 * </pre>
 * A reader un-mixes every layer, K and V, and accepts the token only if all of them decode to the same
 * record with a valid CRC. Anything else — zeros, half-written pages, bytes of another layout — reads as
 * {@link Kind#GARBAGE}; a token that still holds the pool's free-page canary reads as {@link Kind#CANARY}.
 * Nothing is rejected: a page holding another tenant's KV reads as that tenant's text, which is exactly
 * what the server must never let happen and what its tests look for.
 */
public final class EchoKv {

    /** Bytes of the record before the zero padding: a token vector must be at least this long. */
    public static final int RECORD_BYTES = 84;
    /** Longest tenant name in bytes. */
    public static final int MAX_TENANT_BYTES = 64;
    /** What a token that read as garbage shows as. */
    public static final String GARBAGE_TEXT = "\uFFFD";
    /** What a token that still holds the free-page canary shows as. */
    public static final String CANARY_TEXT = "<canary>";

    private static final byte TAG = (byte) 0xEC;
    private static final int CRC_AT = 80;

    /** What a token read from KV turned out to be. */
    public enum Kind {
        /** A valid record: text, position and tenant. */
        TOKEN,
        /** The token still holds the free-page canary: its KV was never written. */
        CANARY,
        /** Nothing decodable: zeros, torn or inconsistent layers. */
        GARBAGE
    }

    /**
     * One token as read from KV.
     *
     * @param kind     what was found
     * @param position the position the record claims (-1 unless TOKEN)
     * @param bytes    the token's UTF-8 bytes (empty unless TOKEN)
     * @param tenant   the tenant the record names ({@code null} unless TOKEN)
     */
    public record KvToken(Kind kind, int position, byte[] bytes, String tenant) {
        static final KvToken CANARY = new KvToken(Kind.CANARY, -1, new byte[0], null);
        static final KvToken GARBAGE = new KvToken(Kind.GARBAGE, -1, new byte[0], null);

        /** @return the token's text, or the marker of a canary or garbage token */
        public String text() {
            return switch (kind) {
                case TOKEN -> EchoTokenizer.text(bytes);
                case CANARY -> CANARY_TEXT;
                case GARBAGE -> GARBAGE_TEXT;
            };
        }
    }

    private final KvLayout layout;
    private final PageIo io;
    private final int vectorBytes;
    private final byte[] record;
    private final byte[] scratch;
    private final byte[] first;

    /**
     * A reader/writer for one thread (it keeps scratch buffers).
     *
     * @throws IllegalArgumentException if the layout's token vector is shorter than {@link #RECORD_BYTES}
     */
    public EchoKv(KvLayout layout) {
        this(layout, PageIo.DIRECT);
    }

    /** A reader/writer for one thread reaching pages through {@code io} (copies for a device pool). */
    EchoKv(KvLayout layout, PageIo io) {
        requireFits(layout);
        this.layout = layout;
        this.io = java.util.Objects.requireNonNull(io, "io");
        this.vectorBytes = (int) layout.bytesPerTokenVector();
        this.record = new byte[vectorBytes];
        this.scratch = new byte[vectorBytes];
        this.first = new byte[vectorBytes];
    }

    /** @return a reader/writer for one thread on {@code pool}'s pages: direct on host storage, through copies on a device pool */
    public static EchoKv of(io.kvpool.KvPool pool) {
        return new EchoKv(pool.layout(), PageIo.of(pool));
    }

    /** @throws IllegalArgumentException if the layout's token vector cannot hold an echo record, with both sizes */
    public static void requireFits(KvLayout layout) {
        if (layout.bytesPerTokenVector() < RECORD_BYTES) {
            throw new IllegalArgumentException("the echo model needs token vectors of at least " + RECORD_BYTES
                + " bytes (kv heads × head dim × dtype); " + layout + " has " + layout.bytesPerTokenVector());
        }
    }

    /**
     * Writes tokens {@code [0, count)} of {@code tokens} at positions {@code 0..count-1} of the sequence.
     *
     * @param tenant the tenant, 1..{@value #MAX_TENANT_BYTES} ASCII bytes
     */
    public void writePrompt(Sequence seq, List<byte[]> tokens, int count, String tenant) {
        final byte[] t = tenantBytes(tenant);
        final int tpp = layout.tokensPerPage();
        for (int first = 0; first < count; first += tpp) { // a page at a time: one open and one commit each
            final int pageIndex = first / tpp;
            final MemorySegment page = io.open(seq, pageIndex);
            for (int p = first; p < Math.min(count, first + tpp); p++) {
                put(page, p, tokens.get(p), t);
            }
            io.commit(seq, pageIndex, page);
        }
    }

    /** Writes one token's KV (every layer, K and V) at {@code position} of the sequence. */
    public void write(Sequence seq, int position, byte[] token, String tenant) {
        final int pageIndex = position / layout.tokensPerPage();
        final MemorySegment page = io.open(seq, pageIndex);
        put(page, position, token, tenantBytes(tenant));
        io.commit(seq, pageIndex, page);
    }

    private void put(MemorySegment page, int position, byte[] token, byte[] tenant) {
        encode(position, token, tenant);
        final int t = position % layout.tokensPerPage();
        for (int layer = 0; layer < layout.layers(); layer++) {
            for (int kv = 0; kv < 2; kv++) {
                for (int i = 0; i < vectorBytes; i++) {
                    scratch[i] = (byte) (record[i] ^ mix(layer, kv, i));
                }
                MemorySegment.copy(scratch, 0, page, ValueLayout.JAVA_BYTE, layout.offset(layer, kv, t), vectorBytes);
            }
        }
    }

    private void encode(int position, byte[] token, byte[] tenant) {
        if (token.length < 1 || token.length > EchoTokenizer.MAX_TOKEN_BYTES) {
            throw new IllegalArgumentException("a token has 1.." + EchoTokenizer.MAX_TOKEN_BYTES + " bytes, got " + token.length);
        }
        Arrays.fill(record, (byte) 0);
        record[0] = TAG;
        record[1] = (byte) token.length;
        record[2] = (byte) tenant.length;
        ByteBuffer.wrap(record).order(ByteOrder.LITTLE_ENDIAN).putInt(4, position);
        System.arraycopy(token, 0, record, 8, token.length);
        System.arraycopy(tenant, 0, record, 16, tenant.length);
        ByteBuffer.wrap(record).order(ByteOrder.LITTLE_ENDIAN).putInt(CRC_AT, crc(record));
    }

    /**
     * Reads the token at {@code position} of the sequence from its KV alone.
     *
     * @return the token, or a {@link Kind#CANARY} / {@link Kind#GARBAGE} marker
     */
    public KvToken read(Sequence seq, int position) {
        final int tpp = layout.tokensPerPage();
        final int pageIndex = position / tpp;
        final int t = position % tpp;
        if (seq.pool().firstCanaryToken(seq.pageHandle(pageIndex), t, t + 1) >= 0) {
            return KvToken.CANARY;
        }
        final MemorySegment page = io.open(seq, pageIndex);
        for (int layer = 0; layer < layout.layers(); layer++) {
            for (int kv = 0; kv < 2; kv++) {
                MemorySegment.copy(page, ValueLayout.JAVA_BYTE, layout.offset(layer, kv, t), scratch, 0, vectorBytes);
                for (int i = 0; i < vectorBytes; i++) {
                    scratch[i] ^= mix(layer, kv, i);
                }
                if (layer == 0 && kv == 0) {
                    System.arraycopy(scratch, 0, first, 0, vectorBytes);
                } else if (!Arrays.equals(scratch, first)) {
                    return KvToken.GARBAGE; // layers disagree: torn, partial or foreign bytes
                }
            }
        }
        return decode(first);
    }

    private static KvToken decode(byte[] r) {
        final int n = r[1] & 0xff;
        final int m = r[2] & 0xff;
        if (r[0] != TAG || r[3] != 0 || n < 1 || n > EchoTokenizer.MAX_TOKEN_BYTES || m < 1 || m > MAX_TENANT_BYTES
            || ByteBuffer.wrap(r).order(ByteOrder.LITTLE_ENDIAN).getInt(CRC_AT) != crc(r)) {
            return KvToken.GARBAGE;
        }
        final int position = ByteBuffer.wrap(r).order(ByteOrder.LITTLE_ENDIAN).getInt(4);
        return new KvToken(Kind.TOKEN, position, Arrays.copyOfRange(r, 8, 8 + n),
            new String(r, 16, m, StandardCharsets.US_ASCII));
    }

    private static int crc(byte[] r) {
        final CRC32C c = new CRC32C();
        c.update(r, 0, CRC_AT);
        return (int) c.getValue();
    }

    /** The per-layer mix: distinct for every layer (0x9D is odd) and for K and V. */
    static byte mix(int layer, int kv, int i) {
        return (byte) (0xA5 ^ i * 31 ^ layer * 0x9D ^ kv * 0x4B ^ (i >>> 3) * 7);
    }

    private static byte[] tenantBytes(String tenant) {
        final byte[] b = tenant.getBytes(StandardCharsets.US_ASCII);
        if (b.length < 1 || b.length > MAX_TENANT_BYTES) {
            throw new IllegalArgumentException("a tenant has 1.." + MAX_TENANT_BYTES + " ASCII bytes, got " + b.length);
        }
        return b;
    }
}
