package io.kvpool.transfer.testkit;

import io.kvpool.KvLayout;
import io.kvpool.storage.FillMode;
import io.kvpool.storage.PageStorage;

import java.lang.foreign.MemorySegment;

/**
 * A page storage that hands every call to another; a test overrides what it changes (a failure, a disguise). Public
 * for the tests of other modules (the example server's).
 */
public class ForwardingStorage implements PageStorage {
    private final PageStorage inner;

    public ForwardingStorage(PageStorage inner) {
        this.inner = inner;
    }

    /** @return the storage every call goes to */
    public PageStorage inner() {
        return inner;
    }

    @Override public KvLayout layout() { return inner.layout(); }
    @Override public int pageCount() { return inner.pageCount(); }
    @Override public boolean isHostAccessible() { return inner.isHostAccessible(); }
    @Override public MemorySegment hostPage(int page) { return inner.hostPage(page); }
    @Override public long address(int page, int layer, int kv) { return inner.address(page, layer, kv); }
    @Override public io.kvpool.storage.KernelView kernelView(int layer, int kv) { return inner.kernelView(layer, kv); }
    @Override public void fill(int page, FillMode mode) { inner.fill(page, mode); }
    @Override public int firstCanaryToken(int page, int fromToken, int toToken) { return inner.firstCanaryToken(page, fromToken, toToken); }
    @Override public void copyPages(int[] src, int srcOff, int[] dst, int dstOff, int count) { inner.copyPages(src, srcOff, dst, dstOff, count); }
    @Override public void close() { inner.close(); }
}
