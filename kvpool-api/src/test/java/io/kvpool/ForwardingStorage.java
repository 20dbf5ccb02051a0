package io.kvpool;

import io.kvpool.storage.FillMode;
import io.kvpool.storage.HostPageStorage;
import io.kvpool.storage.PageStorage;

import java.lang.foreign.MemorySegment;

/** Host storage that passes every call on: tests override the one they watch or break. */
abstract class ForwardingStorage implements PageStorage {
    final HostPageStorage d;

    ForwardingStorage(HostPageStorage d) {
        this.d = d;
    }

    ForwardingStorage(KvLayout layout, int pages) {
        this(HostPageStorage.allocate(layout, pages));
    }

    @Override public KvLayout layout() { return d.layout(); }
    @Override public int pageCount() { return d.pageCount(); }
    @Override public boolean isHostAccessible() { return true; }
    @Override public MemorySegment hostPage(int page) { return d.hostPage(page); }
    @Override public long address(int page, int layer, int kv) { return d.address(page, layer, kv); }
    @Override public void fill(int page, FillMode mode) { d.fill(page, mode); }
    @Override public int firstCanaryToken(int page, int from, int to) { return d.firstCanaryToken(page, from, to); }
    @Override public void copyPages(int[] src, int srcOff, int[] dst, int dstOff, int count) { d.copyPages(src, srcOff, dst, dstOff, count); }
    @Override public void close() { d.close(); }
}
