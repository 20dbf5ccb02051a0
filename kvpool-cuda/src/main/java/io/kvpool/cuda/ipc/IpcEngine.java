package io.kvpool.cuda.ipc;

import io.kvpool.KvLayout;
import io.kvpool.storage.PageStorage;

/**
 * What a {@link CudaIpcLink} needs of the GPU, and nothing more: export an arena, open a peer's, enqueue
 * one batched copy with a completion marker, query that marker, wait for everything, close. The link's
 * state machine (terminal states, flush, cancel, teardown, errors) is written against this interface
 * only, so it runs on the CPU in tests with a host-memory engine ({@code FakeIpcEngine}); the CUDA
 * implementation is {@link JCudaIpcEngine}.
 *
 * <p>One engine per link, called only from the link's owner thread. Completion codes are
 * {@code cuEventQuery}'s: {@link #DONE}, {@link #NOT_READY}, or any other {@code CUresult}: the batch
 * failed, and may have written all, part or none of its pages.
 */
interface IpcEngine {

    /** {@code CUDA_SUCCESS}: the batch's copy finished. */
    int DONE = 0;
    /** {@code CUDA_ERROR_NOT_READY}: the batch's copy may still be running. */
    int NOT_READY = 600;

    /** A peer's exported arena, opened in this process (stays open until {@link #close()}). */
    interface Mapping {
        /** @return pages of the peer's arena */
        int pages();

        /** @return the layout fingerprint the arena was opened (and checked) for */
        long fingerprint();
    }

    /**
     * This process's export of a storage's memory. While it is not {@linkplain #end() ended} the storage keeps that
     * memory past its close: a peer may still map it. It outlives the engine that made it.
     */
    interface Export {
        /**
         * @return the handle a peer opens ({@link #open})
         * @throws IllegalStateException if the storage is closed: a closed pool's memory is not handed out again
         */
        byte[] handle();

        /** Every process that opened the handle has closed its mapping or is gone: the storage may free it. Idempotent. */
        void end();
    }

    /**
     * @return a new export of the storage's memory (the same handle bytes for the same storage); end it once no peer
     *         can map it
     * @throws IllegalArgumentException if this engine cannot export that kind of storage
     * @throws IllegalStateException    if the storage is closed
     */
    Export export(PageStorage storage);

    /**
     * Opens a peer's exported arena in this process ({@code cuIpcOpenMemHandle}).
     *
     * @param layout the layout this side writes; a handle for another fingerprint is refused
     * @throws IllegalArgumentException if the handle is malformed or for another layout
     * @throws RuntimeException         if the driver cannot open it (nothing was opened)
     */
    Mapping open(byte[] handle, KvLayout layout);

    /**
     * Enqueues ONE copy, {@code dst.page(dstPages[i]) ← source.page(srcPages[i])} for {@code i < count},
     * followed by its completion marker. Indices were checked by the caller.
     *
     * @return the batch id, for {@link #query} and {@link #release}
     * @throws IllegalArgumentException if the source cannot be copied from (nothing was enqueued)
     * @throws SubmitException          if the device refused: {@link SubmitException#enqueued()} says whether
     *                                  the copy may run anyway (then without a marker to wait on)
     */
    long submit(Mapping dst, PageStorage source, int[] srcPages, int[] dstPages, int count);

    /** @return {@link #DONE}, {@link #NOT_READY} or the error code of the batch ({@code cuEventQuery}); never blocks */
    int query(long batch);

    /** Forgets a batch whose {@link #query} returned something other than {@link #NOT_READY}. */
    void release(long batch);

    /**
     * Blocks until every copy this engine enqueued has finished or failed ({@code cuStreamSynchronize}).
     *
     * @return {@link #DONE} or the error code
     */
    int drain();

    /** @return a code's name and number, e.g. {@code "CUDA_ERROR_ILLEGAL_ADDRESS (700)"} */
    String describe(int code);

    /**
     * {@link #drain()}s, then closes every opened mapping ({@code cuIpcCloseMemHandle}: this process can no
     * longer write into the peers' arenas) and frees everything. A drain that does not answer {@link #DONE} proves
     * nothing: the mappings and whatever a queued copy reads stay then, for the process's life (a WARNING says so),
     * so that such a copy cannot land in memory mapped or allocated there later. Idempotent.
     */
    void close();
}
