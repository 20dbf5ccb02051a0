package io.kvpool.cuda.ipc;

import io.kvpool.KvLayout;
import io.kvpool.storage.PageStorage;
import io.kvpool.transfer.shm.MappedPageStorage;

import java.lang.foreign.MemorySegment;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.charset.StandardCharsets;
import java.nio.file.Path;
import java.util.ArrayDeque;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.atomic.AtomicInteger;

/**
 * A host-memory stand-in for the GPU behind {@link IpcEngine}, with failure injection. "Device memory" is
 * host pages: an in-JVM storage is exported by id (a registry shared by every fake engine of the JVM), a
 * {@link MappedPageStorage} by its file (so a second process can open it). A batch is a queued copy
 * that runs only when the "device" runs it ({@link #runNext()}, {@link #runAll()}, {@link #drain()}, or
 * at its first {@link #query} in {@link #autoRun} mode): the copy reads the source at that moment, so a
 * source reused too early shows up as wrong bytes at the destination.
 */
final class FakeIpcEngine implements IpcEngine {

    static final int ILLEGAL_ADDRESS = 700;   // CUDA_ERROR_ILLEGAL_ADDRESS
    static final int LAUNCH_FAILED = 719;     // CUDA_ERROR_LAUNCH_FAILED
    static final int OUT_OF_RESOURCES = 701;  // CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES

    private static final int MAGIC = 0x454B4146; // "FAKE"
    private static final Map<Integer, PageStorage> REGISTRY = new ConcurrentHashMap<>();
    private static final AtomicInteger NEXT_ID = new AtomicInteger(1);

    private record Opened(PageStorage storage, KvLayout layout, boolean owned) implements Mapping {
        @Override
        public int pages() {
            return storage.pageCount();
        }

        @Override
        public long fingerprint() {
            return layout.fingerprint();
        }
    }

    /** A queued copy. */
    private static final class Batch {
        final long id;
        final Opened dst;
        final PageStorage src;
        final int[] srcPages;
        final int[] dstPages;
        int code = NOT_READY; // after it ran: DONE or the injected error
        boolean ran;
        int failWith;         // injected: 0 none, else the error code
        boolean failLands;    // injected: whether the failed copy still wrote its pages

        Batch(long id, Opened dst, PageStorage src, int[] srcPages, int[] dstPages) {
            this.id = id;
            this.dst = dst;
            this.src = src;
            this.srcPages = srcPages;
            this.dstPages = dstPages;
        }
    }

    // ---- failure injection and modes (set by the tests) ----
    /** A batch runs at its first query (a fast device); otherwise only when the test runs it. */
    boolean autoRun;
    /** The next submit is refused before anything is enqueued. */
    boolean refuseNextSubmit;
    /** The next submit enqueues the copy, then fails to record its marker. */
    boolean noMarkerNextSubmit;
    /** The next batch to be submitted fails with this code (0: none) when it runs... */
    int failNextBatch;
    /** ...and still writes its pages (a failure after the copy, or a partial one). */
    boolean failedBatchLands;
    /** {@link #open} fails as the driver would. */
    boolean failOpen;

    // ---- what happened ----
    private final ArrayDeque<Batch> queue = new ArrayDeque<>();
    private final Map<Long, Batch> byId = new HashMap<>();
    private final List<Opened> opened = new ArrayList<>();
    private long nextBatch;
    int submits;
    int opens;
    int copiesRun;
    boolean closed;
    /** Exports made and not ended yet (a storage would keep its memory past its close for them); ended on any thread. */
    volatile int openExports;

    private void ensureOpen() {
        if (closed) {
            throw new IllegalStateException("fake engine is closed");
        }
    }

    @Override
    public Export export(PageStorage storage) {
        ensureOpen();
        final byte[] handle = handleOf(storage);
        synchronized (this) {
            openExports++;
        }
        return new Export() {
            private boolean ended;

            @Override
            public byte[] handle() {
                return handle.clone();
            }

            @Override
            public void end() {
                synchronized (FakeIpcEngine.this) {
                    if (!ended) {
                        ended = true;
                        openExports--;
                    }
                }
            }
        };
    }

    /** @return the handle bytes for a storage (the same bytes for the same storage) */
    byte[] handleOf(PageStorage storage) {
        final ByteBuffer b;
        if (storage instanceof MappedPageStorage m) {
            final byte[] path = m.file().toAbsolutePath().toString().getBytes(StandardCharsets.UTF_8);
            b = ByteBuffer.allocate(24 + path.length).order(ByteOrder.LITTLE_ENDIAN);
            b.putInt(MAGIC).putInt(2).putLong(storage.layout().fingerprint()).putLong(m.identity()).put(path);
        } else {
            if (!storage.isHostAccessible()) {
                throw new IllegalArgumentException("the fake engine exports host memory; " + storage + " is not");
            }
            int id = 0;
            for (Map.Entry<Integer, PageStorage> e : REGISTRY.entrySet()) {
                if (e.getValue() == storage) {
                    id = e.getKey();
                }
            }
            if (id == 0) {
                id = NEXT_ID.getAndIncrement();
                REGISTRY.put(id, storage);
            }
            b = ByteBuffer.allocate(20).order(ByteOrder.LITTLE_ENDIAN);
            b.putInt(MAGIC).putInt(1).putLong(storage.layout().fingerprint()).putInt(id);
        }
        return b.array();
    }

    @Override
    public Mapping open(byte[] handle, KvLayout layout) {
        ensureOpen();
        final ByteBuffer b = ByteBuffer.wrap(handle).order(ByteOrder.LITTLE_ENDIAN);
        if (handle.length < 20 || b.getInt() != MAGIC) {
            throw new IllegalArgumentException("not a fake IPC handle (" + handle.length + " bytes)");
        }
        final int kind = b.getInt();
        final long fp = b.getLong();
        if (fp != layout.fingerprint()) {
            throw new IllegalArgumentException("the exported pool's layout fingerprint 0x" + Long.toHexString(fp) + " is not this side's 0x"
                + Long.toHexString(layout.fingerprint()));
        }
        if (failOpen) {
            throw new IllegalStateException("cuIpcOpenMemHandle failed: CUDA_ERROR_INVALID_VALUE (1) [injected]");
        }
        final Opened o;
        if (kind == 1) {
            final PageStorage s = REGISTRY.get(b.getInt());
            if (s == null) {
                throw new IllegalArgumentException("no exported fake arena with that id");
            }
            o = new Opened(s, layout, false);
        } else {
            final long identity = b.getLong();
            final byte[] path = new byte[b.remaining()];
            b.get(path);
            final MappedPageStorage m = MappedPageStorage.map(Path.of(new String(path, StandardCharsets.UTF_8)));
            if (m.identity() != identity) {
                m.close();
                throw new IllegalArgumentException("pool file identity changed");
            }
            o = new Opened(m, layout, true);
        }
        opens++;
        opened.add(o);
        return o;
    }

    @Override
    public long submit(Mapping dst, PageStorage source, int[] srcPages, int[] dstPages, int count) {
        ensureOpen();
        if (!source.isHostAccessible()) {
            throw new IllegalArgumentException("the fake engine copies host memory; " + source + " is not");
        }
        if (refuseNextSubmit) {
            refuseNextSubmit = false;
            throw new SubmitException("cuLaunchKernel failed: CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES (701) [injected]", OUT_OF_RESOURCES, false);
        }
        submits++;
        final Batch b = new Batch(nextBatch++, (Opened) dst, source, java.util.Arrays.copyOf(srcPages, count),
            java.util.Arrays.copyOf(dstPages, count));
        if (failNextBatch != 0) {
            b.failWith = failNextBatch;
            b.failLands = failedBatchLands;
            failNextBatch = 0;
        }
        queue.add(b);
        if (noMarkerNextSubmit) {
            noMarkerNextSubmit = false;
            throw new SubmitException("cuEventRecord failed: CUDA_ERROR_LAUNCH_FAILED (719) [injected]", LAUNCH_FAILED, true);
        }
        byId.put(b.id, b);
        return b.id;
    }

    /** Runs the oldest queued copy. @return whether there was one */
    boolean runNext() {
        final Batch b = queue.poll();
        if (b == null) {
            return false;
        }
        run(b);
        return true;
    }

    /** Runs every queued copy. */
    void runAll() {
        while (runNext()) {
            // next
        }
    }

    /** @return copies queued and not yet run */
    int queued() {
        return queue.size();
    }

    private void run(Batch b) {
        final long bytes = b.dst.layout().bytesPerPage();
        if (b.failWith == 0 || b.failLands) {
            for (int i = 0; i < b.srcPages.length; i++) {
                MemorySegment.copy(b.src.hostPage(b.srcPages[i]), 0, b.dst.storage().hostPage(b.dstPages[i]), 0, bytes);
            }
            copiesRun++;
        }
        b.ran = true;
        b.code = b.failWith == 0 ? DONE : b.failWith;
    }

    @Override
    public int query(long batch) {
        final Batch b = byId.get(batch);
        if (b == null) {
            throw new IllegalArgumentException("no batch " + batch + " in flight");
        }
        if (!b.ran && autoRun) {
            while (!b.ran) { // stream order: everything before it runs first
                runNext();
            }
        }
        return b.code;
    }

    @Override
    public void release(long batch) {
        final Batch b = byId.remove(batch);
        if (b == null || !b.ran) {
            throw new IllegalStateException("released batch " + batch + (b == null ? ", which is unknown" : " before it ran"));
        }
    }

    @Override
    public int drain() {
        int code = DONE;
        while (!queue.isEmpty()) {
            final Batch b = queue.peek();
            runNext();
            if (b.code != DONE) {
                code = b.code;
            }
        }
        return code;
    }

    @Override
    public String describe(int code) {
        return switch (code) {
            case DONE -> "CUDA_SUCCESS (0)";
            case NOT_READY -> "CUDA_ERROR_NOT_READY (600)";
            case ILLEGAL_ADDRESS -> "CUDA_ERROR_ILLEGAL_ADDRESS (700)";
            case OUT_OF_RESOURCES -> "CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES (701)";
            case LAUNCH_FAILED -> "CUDA_ERROR_LAUNCH_FAILED (719)";
            default -> "CUresult " + code;
        };
    }

    @Override
    public void close() {
        if (closed) {
            return;
        }
        final int drained = drain();
        closed = true;
        if (drained != DONE) {
            return; // as the CUDA engine: a drain that proved nothing keeps the mappings (IpcEngine#close)
        }
        for (Opened o : opened) {
            if (o.owned()) {
                o.storage().close();
            }
        }
        opened.clear();
    }

    /** @return how many mappings are open */
    int openMappings() {
        return opened.size();
    }
}
