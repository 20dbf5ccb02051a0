package io.kvpool.cuda;

import io.kvpool.KvLayout;
import jcuda.Pointer;
import jcuda.driver.CUcontext;
import jcuda.driver.CUdevice;
import jcuda.driver.CUdeviceptr;
import jcuda.driver.CUipcMemHandle;
import jcuda.driver.CUipcMem_flags;
import jcuda.driver.JCudaDriver;

import java.lang.foreign.MemorySegment;
import java.lang.reflect.Field;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.util.Objects;

/**
 * CUDA IPC for device pools: a decode process exports its pool's arena ({@link #export}); a prefill
 * process on the same node opens it ({@link #open}) and writes pages into it one-sidedly, at the
 * addresses {@link DeviceLayout} defines.
 *
 * <h2>Handle format (little-endian)</h2>
 * <pre>
 *   0 u32 magic 'KVIP' · 4 u32 version 1 · 8 i64 layout fingerprint · 16 i32 pages · 20 i32 device ordinal
 *   24 i64 arena bytes · 32 u8[64] cudaIpcMemHandle
 * </pre>
 * The opener checks the fingerprint against the layout it expects and refuses a mismatch naming both.
 * Who may write into which pages, and when the exporter may reuse them, is the transfer protocol's job
 * (kvpool-transfer): an opened arena is like a registration that cannot be revoked — only closing it in the
 * writer's process (or that process ending) stops its writes.
 *
 * <h2>The exported arena's lifetime</h2>
 * Freeing an allocation that another process has open is undefined in CUDA, and the next allocation in this process
 * may get the same memory while that process can still write it. So an exported storage keeps its arena past its
 * {@link DevicePageStorage#close() close}: after {@link #exportLease} until every lease is closed (whoever closes one
 * states that its importers closed their mappings or are gone: {@code CudaIpcLink} does it once its teardown is
 * proven); after {@link #export} until this process ends.
 */
public final class DeviceIpc {
    private DeviceIpc() {
    }

    static final int MAGIC = 0x5049564B; // "KVIP"
    static final int VERSION = 1;
    static final int HANDLE_BYTES = 64;
    /** Length of an exported handle. */
    public static final int EXPORT_BYTES = 32 + HANDLE_BYTES;

    private static final Field RESERVED;

    static {
        try {
            RESERVED = CUipcMemHandle.class.getDeclaredField("reserved");
            RESERVED.setAccessible(true); // JCuda keeps the handle's bytes private; both sit in the unnamed module
        } catch (ReflectiveOperationException e) {
            throw new ExceptionInInitializerError(e);
        }
    }

    private static byte[] bytes(CUipcMemHandle h) {
        try {
            return ((byte[]) RESERVED.get(h)).clone();
        } catch (IllegalAccessException e) {
            throw new IllegalStateException(e);
        }
    }

    private static CUipcMemHandle handle(byte[] b) {
        final CUipcMemHandle h = new CUipcMemHandle();
        try {
            RESERVED.set(h, b.clone());
        } catch (IllegalAccessException e) {
            throw new IllegalStateException(e);
        }
        return h;
    }

    /**
     * {@return a handle to the storage's arena that another process on this node can {@link #open}} Nothing tells this
     * process when the importers are done, so the storage keeps its arena after its close until this process ends; use
     * {@link #exportLease} where the end of the importers can be proven.
     *
     * @param storage the device storage to share
     * @throws IllegalStateException if the storage is closed
     * @throws CudaException         if the driver cannot export the arena
     */
    public static byte[] export(DevicePageStorage storage) {
        return encode(storage, storage.ipcHandle(false));
    }

    /**
     * Exports the storage's arena as {@link #export} does, but tracked: the storage keeps its arena after its close only
     * until the lease is closed.
     *
     * @param storage the device storage to share
     * @return the lease; close it once every process that opened its handle has closed its mapping or is gone
     * @throws IllegalStateException if the storage is closed
     * @throws CudaException         if the driver cannot export the arena
     */
    public static ExportLease exportLease(DevicePageStorage storage) {
        return new ExportLease(storage, encode(storage, storage.ipcHandle(true)));
    }

    /**
     * A tracked export of a storage's arena ({@link #exportLease}). While it is open the storage's close keeps the
     * arena. Thread-safe.
     */
    public static final class ExportLease implements AutoCloseable {
        private final DevicePageStorage storage;
        private final byte[] handle;
        private boolean closed;

        private ExportLease(DevicePageStorage storage, byte[] handle) {
            this.storage = storage;
            this.handle = handle;
        }

        /**
         * {@return a copy of the exported handle, for {@link DeviceIpc#open} in another process}
         *
         * @throws IllegalStateException if the lease or the storage is closed: a closed pool's arena is not handed out
         */
        public synchronized byte[] handle() {
            if (closed) {
                throw new IllegalStateException("export lease of " + storage + " is closed");
            }
            if (storage.isClosed()) {
                throw new IllegalStateException("the exported " + storage + " is closed: its arena is not handed out again");
            }
            return handle.clone();
        }

        /** {@return the exported storage} */
        public DevicePageStorage storage() {
            return storage;
        }

        /**
         * Ends the lease: the caller states that every process that opened its handle has closed its mapping or is gone.
         * A closed storage whose last lease this is frees its arena now. Idempotent.
         */
        @Override
        public synchronized void close() {
            if (!closed) {
                closed = true;
                storage.leaseEnded();
            }
        }

        @Override
        public synchronized String toString() {
            return "export lease of " + storage + (closed ? ", closed" : "");
        }
    }

    private static byte[] encode(DevicePageStorage storage, CUipcMemHandle h) {
        final DeviceLayout d = storage.deviceLayout();
        final ByteBuffer b = ByteBuffer.allocate(EXPORT_BYTES).order(ByteOrder.LITTLE_ENDIAN);
        b.putInt(MAGIC).putInt(VERSION).putLong(d.layout().fingerprint()).putInt(d.pages()).putInt(storage.deviceOrdinal()).putLong(d.arenaBytes());
        b.put(bytes(h));
        return b.array();
    }

    /**
     * Opens another process's exported arena.
     *
     * @param exported the bytes {@link #export} produced
     * @param layout   the layout this process expects; a different fingerprint is refused
     * @return the opened arena; close it to stop this process's access
     * @throws IllegalArgumentException if the bytes are not a kvpool IPC handle of this layout, or claim more memory than
     *                                  the allocation they map holds (nothing is left open then)
     * @throws CudaException            if a driver call fails
     */
    public static OpenedArena open(byte[] exported, KvLayout layout) {
        final ByteBuffer b = ByteBuffer.wrap(exported).order(ByteOrder.LITTLE_ENDIAN);
        if (exported.length != EXPORT_BYTES) {
            throw new IllegalArgumentException("not a kvpool IPC handle: " + exported.length + " bytes, a handle has " + EXPORT_BYTES);
        }
        final int magic = b.getInt();
        final int version = b.getInt();
        if (magic != MAGIC || version != VERSION) {
            throw new IllegalArgumentException(String.format(java.util.Locale.ROOT,
                "not a kvpool IPC handle of this version: magic 0x%08x version %d, expected 0x%08x version %d", magic, version, MAGIC, VERSION));
        }
        final long fp = b.getLong();
        if (fp != layout.fingerprint()) {
            throw new IllegalArgumentException("the exported pool's layout fingerprint 0x" + Long.toHexString(fp) + " is not this side's 0x"
                + Long.toHexString(layout.fingerprint()) + " (" + layout + ")");
        }
        final int pages = b.getInt();
        final int ordinal = b.getInt();
        final long arenaBytes = b.getLong();
        final byte[] raw = new byte[HANDLE_BYTES];
        b.get(raw);
        if (ordinal < 0) {
            throw new IllegalArgumentException("exported arena on device " + ordinal + ": not a device ordinal");
        }
        final DeviceLayout d = DeviceLayout.of(layout, pages);
        if (d.arenaBytes() != arenaBytes) {
            throw new IllegalArgumentException("exported arena of " + arenaBytes + " bytes; " + pages + " pages of " + layout + " are "
                + d.arenaBytes());
        }
        Cuda.requireAvailable();
        return new OpenedArena(d, ordinal, handle(raw));
    }

    /** Another process's arena, opened in this one. */
    public static final class OpenedArena implements AutoCloseable {
        private final DeviceLayout layout;
        private final CUdevice device = new CUdevice();
        private final CUcontext context = new CUcontext();
        private final DevicePageStorage.DevicePtr arena = new DevicePageStorage.DevicePtr();
        private boolean closed;

        OpenedArena(DeviceLayout layout, int ordinal, CUipcMemHandle handle) {
            this.layout = layout;
            CudaException.check(CudaException.code(() -> JCudaDriver.cuDeviceGet(device, ordinal)), "cuDeviceGet(" + ordinal + ")");
            CudaException.check(CudaException.code(() -> JCudaDriver.cuDevicePrimaryCtxRetain(context, device)), "cuDevicePrimaryCtxRetain");
            final int c = CudaException.code(() -> JCudaDriver.cuCtxSetCurrent(context));
            if (c != 0) {
                CudaException.code(() -> JCudaDriver.cuDevicePrimaryCtxRelease(device)); // retained just above: not kept
                throw new CudaException("cuCtxSetCurrent", c, "");
            }
            final int r = CudaException.code(() -> JCudaDriver.cuIpcOpenMemHandle(arena, handle, CUipcMem_flags.CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS));
            if (r != 0) {
                CudaException.code(() -> JCudaDriver.cuDevicePrimaryCtxRelease(device));
                throw new CudaException("cuIpcOpenMemHandle", r, layout.arenaBytes() + "-byte arena of " + layout.pages() + " pages");
            }
            // The page count and size are the peer's word; the kernels index the arena by them. The allocation the
            // handle mapped must hold them, or a corrupt or hostile handle would have this process write past it.
            final CUdeviceptr base = new CUdeviceptr();
            final long[] size = new long[1];
            final int q = CudaException.code(() -> JCudaDriver.cuMemGetAddressRange(base, size, arena));
            if (q != 0 || size[0] < layout.arenaBytes()) {
                CudaException.code(() -> JCudaDriver.cuIpcCloseMemHandle(arena));
                CudaException.code(() -> JCudaDriver.cuDevicePrimaryCtxRelease(device));
                if (q != 0) {
                    throw new CudaException("cuMemGetAddressRange", q, "the opened " + layout.arenaBytes() + "-byte arena");
                }
                throw new IllegalArgumentException("the exported arena claims " + layout.pages() + " pages (" + layout.arenaBytes()
                    + " bytes), but the memory its handle maps holds " + size[0] + " bytes");
            }
        }

        /** {@return the arena layout} */
        public DeviceLayout layout() {
            return layout;
        }

        /**
         * {@return the opened arena's device address in this process} Plane {@code q}, page {@code p} is at
         * {@code + q * planeBytes + p * pageStride}. For kernels launched in the primary context of the
         * exported device; valid until {@link #close()}. Any thread.
         *
         * @throws IllegalStateException if closed
         */
        public synchronized long address() {
            if (closed) {
                throw new IllegalStateException("opened arena is closed");
            }
            return arena.address();
        }

        /**
         * Writes one page (host layout) into the other process's arena (per-plane copies: tests and debugging).
         * Any thread; returns once the copy is done.
         *
         * @param page the destination slot in the arena
         * @param src  the page's bytes, host layout
         * @throws IllegalStateException     if closed
         * @throws IndexOutOfBoundsException if {@code page} is not a slot of the arena, or {@code src} is
         *                                   shorter than a page
         * @throws CudaException             if a driver call fails
         */
        public synchronized void writePage(int page, MemorySegment src) {
            if (closed) {
                throw new IllegalStateException("opened arena is closed");
            }
            Objects.checkIndex(page, layout.pages());
            CudaException.check(CudaException.code(() -> JCudaDriver.cuCtxSetCurrent(context)), "cuCtxSetCurrent");
            final ByteBuffer bb = src.asSlice(0, layout.layout().bytesPerPage()).asByteBuffer();
            for (int plane = 0; plane < layout.planes(); plane++) {
                final int q = plane;
                CudaException.check(CudaException.code(() -> JCudaDriver.cuMemcpyHtoD(arena.withByteOffset(q * layout.planeBytes() + page * layout.pageStride()),
                    Pointer.to(bb).withByteOffset(layout.hostOffset(q)), layout.pageStride())), "cuMemcpyHtoD(page " + page + ")");
            }
            CudaException.check(CudaException.code(() -> JCudaDriver.cuCtxSynchronize()), "cuCtxSynchronize");
        }

        /**
         * Closes this process's mapping: after it returns, this process can no longer write. Idempotent: a second call
         * does nothing, whatever the first did. The caller proves first that no copy or kernel of its own still writes
         * through the mapping.
         *
         * <p>The mapping belongs to the context it was opened in, and {@code cuIpcCloseMemHandle} acts in the calling
         * thread's current context. If that context cannot be made current, the mapping and the context reference stay
         * until this process exits (a leak, not a fault) rather than being closed in whatever context the thread has,
         * or none, where the call would fail silently and leave it mapped anyway.
         *
         * @throws CudaException if the context cannot be made current ({@code cuCtxSetCurrent}); the message names the
         *                       driver's code and the mapping kept (address and size)
         */
        @Override
        public synchronized void close() {
            if (!closed) {
                closed = true;
                final int current = CudaException.code(() -> JCudaDriver.cuCtxSetCurrent(context));
                if (current != 0) {
                    throw new CudaException("cuCtxSetCurrent", current, "closing an opened IPC mapping: its "
                        + layout.arenaBytes() + "-byte mapping at 0x" + Long.toHexString(arena.address())
                        + " and its context reference stay until this process exits (a leak, not a fault)");
                }
                CudaException.code(() -> JCudaDriver.cuIpcCloseMemHandle(arena));
                CudaException.code(() -> JCudaDriver.cuDevicePrimaryCtxRelease(device));
            }
        }
    }
}
