package io.kvpool.transfer;

/**
 * How a transfer's pages are split among its senders: sender {@code rank} of {@code senders} writes the
 * contiguous logical pages {@code [firstPage(rank), firstPage(rank + 1))}; the first {@code pages % senders}
 * ranks get one page more. Both sides compute it, so it is never sent.
 */
public final class TransferPlan {
    private TransferPlan() {
    }

    /**
     * Finds where a sender's share of the pages starts.
     *
     * @param pages   pages in the transfer
     * @param senders senders (≥ 1)
     * @param rank    0 ≤ rank ≤ senders (rank == senders gives the end)
     * @return the first logical page of that rank
     * @throws IllegalArgumentException if an argument is out of range
     */
    public static int firstPage(int pages, int senders, int rank) {
        if (senders < 1 || rank < 0 || rank > senders || pages < 0) {
            throw new IllegalArgumentException("pages=" + pages + " senders=" + senders + " rank=" + rank);
        }
        final int base = pages / senders;
        final int extra = pages % senders;
        return rank * base + Math.min(rank, extra);
    }
}
