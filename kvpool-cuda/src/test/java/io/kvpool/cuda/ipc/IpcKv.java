package io.kvpool.cuda.ipc;

import io.kvpool.Sequence;
import io.kvpool.cuda.DevicePageStorage;
import io.kvpool.storage.PageStorage;

import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;

/**
 * Synthetic KV for the transport's end-to-end tests, on host or device pools alike: every 8-byte word of
 * page {@code i} of request {@code r} holds a value keyed by {@code (r, i, offset)}, so a reader tells its
 * own page from another request's, a misplaced page, the canary and a torn copy. Whole pages are written
 * and compared (the transport copies whole pages).
 */
final class IpcKv {
    private IpcKv() {
    }

    static long word(long requestId, int pageIndex, long offset) {
        long x = requestId * 0x9E3779B97F4A7C15L ^ (long) pageIndex << 40 ^ offset;
        x ^= x >>> 31;
        x *= 0xBF58476D1CE4E5B9L;
        return x ^ x >>> 29;
    }

    /** Writes request {@code requestId}'s KV into every page of the sequence (whole pages). */
    static void write(Sequence seq, long requestId) {
        final PageStorage s = seq.pool().storage();
        try (Arena a = Arena.ofConfined()) {
            final MemorySegment page = a.allocate(s.layout().bytesPerPage(), 16);
            for (int i = 0; i < seq.pageCount(); i++) {
                for (long o = 0; o < page.byteSize(); o += 8) {
                    page.set(ValueLayout.JAVA_LONG, o, word(requestId, i, o));
                }
                put(s, seq.pageIndex(i), page);
            }
        }
    }

    /** @return the first page of the sequence whose tokens are not request {@code requestId}'s, or -1 if all are */
    static int firstWrongPage(Sequence seq, long requestId) {
        final PageStorage s = seq.pool().storage();
        final io.kvpool.KvLayout l = s.layout();
        final int tpp = l.tokensPerPage();
        try (Arena a = Arena.ofConfined()) {
            final MemorySegment page = a.allocate(l.bytesPerPage(), 16);
            for (int i = 0; i < seq.pageCount(); i++) {
                get(s, seq.pageIndex(i), page);
                // the sequence's tokens only: past them, a partial last page holds the receiver's fill (fillTail)
                final int valid = (int) Math.min(tpp, seq.tokenCount() - (long) i * tpp);
                for (int layer = 0; layer < l.layers(); layer++) {
                    for (int kv = 0; kv < 2; kv++) {
                        final long from = l.offset(layer, kv, 0), to = from + valid * l.bytesPerTokenVector();
                        for (long o = from; o < to; o += 8) {
                            if (page.get(ValueLayout.JAVA_LONG, o) != word(requestId, i, o)) {
                                return i;
                            }
                        }
                    }
                }
            }
        }
        return -1;
    }

    static void put(PageStorage s, int slot, MemorySegment bytes) {
        if (s.isHostAccessible()) {
            MemorySegment.copy(bytes, 0, s.hostPage(slot), 0, s.layout().bytesPerPage());
        } else {
            ((DevicePageStorage) s).writePage(slot, bytes);
        }
    }

    static void get(PageStorage s, int slot, MemorySegment into) {
        if (s.isHostAccessible()) {
            MemorySegment.copy(s.hostPage(slot), 0, into, 0, s.layout().bytesPerPage());
        } else {
            ((DevicePageStorage) s).readPage(slot, into);
        }
    }
}
