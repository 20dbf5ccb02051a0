package io.kvpool.cuda;

/**
 * How {@link DevicePageStorage#offload} and {@link DevicePageStorage#restore} move a batch of pages between
 * the arena and pinned host memory ({@link PinnedPageBuffer}). Both issue ONE operation per batch, never one
 * per page.
 *
 * <p>The default should be whichever measures faster: {@code OffloadBenchmark} runs both against contiguous
 * pinned copies on the GPU machine ({@code offload}/{@code restore} versus
 * {@code offloadMemcpyBatch}/{@code restoreMemcpyBatch}). {@link #KERNEL} stays the default until that
 * measurement says otherwise.
 */
public enum OffloadEngine {
    /**
     * One {@code kvpool_gather_pages}/{@code kvpool_scatter_pages} launch whose threads read or write the
     * device-mapped pinned memory directly over the bus (SMs move the bytes; the copy engines stay free).
     */
    KERNEL,
    /**
     * One {@code cuMemcpyBatchAsync} call (CUDA 12.8+ driver, bound through {@link MemcpyBatch}) holding one
     * copy per page and plane ({@code pages × 2·layers} copies of {@code pageStride} bytes): the copy engines
     * move the bytes. Needs a stream other than the legacy NULL stream.
     */
    MEMCPY_BATCH
}
