package io.kvpool.cuda;

/**
 * Position-keyed checksums submitted on a caller's stream ({@link DevicePageStorage#submitChecksums}): poll
 * with {@link #isDone()}, wait for the values with {@link #await()}, then {@link #close()} to free the
 * batch's device buffer. The results stay on the device until the first {@link #await()}, which copies them
 * back in one copy. Thread-safe.
 */
public final class ChecksumBatch implements AutoCloseable {

    private final DeviceBatch batch;
    private final long resultOffset;
    private final int count;
    private int[] results;

    ChecksumBatch(DeviceBatch batch, long resultOffset, int count) {
        this.batch = batch;
        this.resultOffset = resultOffset;
        this.count = count;
    }

    /** {@return whether the device finished the checksums} */
    public boolean isDone() {
        return batch.isDone();
    }

    /**
     * Waits for the device, then returns the checksums, one per key in key order (the same values as
     * {@link DevicePageStorage#checksums(int[], int, ChecksumKeys)}).
     *
     * @return a new array each call
     * @throws IllegalStateException if the batch was closed before the values were read
     */
    public synchronized int[] await() {
        if (results == null) {
            final int[] r = new int[count];
            batch.read(resultOffset, r);
            results = r;
        }
        return results.clone();
    }

    /** {@return how many pages the batch checksums} */
    public int size() {
        return count;
    }

    /**
     * Waits for the batch and frees its device buffer. Idempotent; values already read stay readable. Without proof that
     * the batch ended, the buffer stays until this process exits ({@link DeviceBatch#close()}).
     *
     * @throws CudaException if the context cannot be made current or the wait fails; the message names the buffer kept
     */
    @Override
    public void close() {
        batch.close();
    }
}
