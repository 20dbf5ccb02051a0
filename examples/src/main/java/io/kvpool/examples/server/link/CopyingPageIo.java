package io.kvpool.examples.server.link;

import io.kvpool.KvLayout;
import io.kvpool.PageHandle;
import io.kvpool.Sequence;

import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.util.Objects;

/**
 * {@link PageIo} through copies: {@link #open} copies the page into a host buffer ({@code read}), {@link #commit}
 * copies the buffer back ({@code write}) — for a device pool, {@code DevicePageStorage.readPage} and
 * {@code writePage}. It keeps the last page it read (by generation-tagged handle), so reading the tokens of one
 * page in order copies it once; a commit writes the buffer back and keeps it current. One instance per thread
 * and sequence (the echo model's): nobody else may write the pages meanwhile, which is what owning a sequence
 * (prefill before its offer, decode after the commit) means.
 */
public final class CopyingPageIo implements PageIo {

    /** Copies between a page slot and a host buffer in the host page layout. */
    @FunctionalInterface
    public interface Copy {
        void copy(int slot, MemorySegment buffer);
    }

    private final Copy read;
    private final Copy write;
    private final MemorySegment buffer;
    private long cached = PageHandle.NONE;

    /**
     * @param read  fills the buffer from a slot
     * @param write writes the buffer to a slot
     */
    public CopyingPageIo(KvLayout layout, Copy read, Copy write) {
        this.read = Objects.requireNonNull(read, "read");
        this.write = Objects.requireNonNull(write, "write");
        this.buffer = Arena.ofAuto().allocate(layout.bytesPerPage(), 64); // native: JCuda copies need a direct buffer
    }

    @Override
    public MemorySegment open(Sequence seq, int i) {
        final long handle = seq.pageHandle(i);
        if (handle != cached) {
            read.copy(slot(seq, handle, i), buffer);
            cached = handle;
        }
        return buffer;
    }

    @Override
    public void commit(Sequence seq, int i, MemorySegment page) {
        if (page != buffer) {
            throw new IllegalArgumentException("commit takes the segment open returned");
        }
        final long handle = seq.pageHandle(i);
        if (handle != cached) {
            throw new IllegalStateException("commit of page " + i + " (" + PageHandle.toString(handle) + ") but the buffer holds "
                + PageHandle.toString(cached));
        }
        write.copy(slot(seq, handle, i), buffer);
    }

    private static int slot(Sequence seq, long handle, int i) {
        final long v = seq.pool().validate(handle);
        if (v < 0) {
            throw new IllegalStateException("page " + i + " of the sequence: the pool refuses " + PageHandle.toString(handle) + " (code " + v + ")");
        }
        return (int) v;
    }
}
