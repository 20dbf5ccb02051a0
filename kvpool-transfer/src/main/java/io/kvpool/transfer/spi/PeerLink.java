package io.kvpool.transfer.spi;

import io.kvpool.storage.PageStorage;

import java.nio.ByteBuffer;

/**
 * The transport SPI: one connection to one peer, carrying control frames and one-sided page writes.
 * A transport (in-JVM simulation, shared memory, UCX) is a way of making {@code PeerLink}s; the transfer
 * protocol ({@link io.kvpool.transfer.TransferReceiver}, {@link io.kvpool.transfer.TransferSender}) is
 * written against this interface only.
 *
 * <h2>Semantics every implementation must keep</h2>
 * <ul>
 *   <li><b>Writes are one-sided and may land late.</b> A write lands in the receiver's memory at some
 *       point after {@link #putBatch}; until the receiver {@link #tearDown tears the link down} or
 *       {@link Registration#revoke revokes} the registration (and either returns {@code true}), a write may
 *       still land, even after the sender reported it failed or gave up.</li>
 *   <li><b>A write's completion is not delivery.</b> {@link LinkListener#onWriteDone} (or a run of
 *       them, {@link LinkListener#onWritesDone}) with {@link #OK} means only that the source bytes may be reused (UCX semantics). Delivery of every write posted
 *       before a {@link #flush} that completed {@link #OK} is proven only by {@link LinkListener#onFlushDone} with
 *       {@code ok}. A write that completed {@link #FAILED} or {@link #CANCELED} is never proven by a flush, whatever it
 *       answers: it may have landed in part, and may still land (the rule above). A sender counts it unproven.</li>
 *   <li><b>Every posted write reaches exactly one terminal state</b> ({@link #OK}, {@link #FAILED},
 *       {@link #CANCELED}), reported once through {@link #poll}, alone or in a run of consecutive tokens — also after {@link #cancelWrites} and
 *       after the link failed. A transport that cannot guarantee this for some writes must never report
 *       them, so the sender never claims a drain it cannot prove.</li>
 *   <li><b>Threading.</b> Not thread-safe: one owner thread calls every method; events are delivered
 *       only from {@link #poll}, on that thread.</li>
 * </ul>
 */
public interface PeerLink extends AutoCloseable {

    /** Terminal write status: the source may be reused (not proof of delivery). */
    int OK = 0;
    /** Terminal write status: the write failed; it may still have landed, in part or whole. */
    int FAILED = 1;
    /** Terminal write status: cancelled before it was posted to the wire, or cancelled by a forced close. */
    int CANCELED = 2;

    /** {@return a short description for logs and messages, e.g. {@code "sim:prefill-0→decode-1"}} */
    String describe();

    /**
     * {@return whether the link is up} After a failure or close the control-channel and write calls throw
     * {@link LinkFailedException}; {@link #poll}, {@link #cancelWrites}, {@link #tearDown} and
     * {@link #close} do not, except as {@link #cancelWrites} says.
     */
    boolean isUp();

    // ---- control channel ----

    /**
     * Queues one encoded control frame ({@link io.kvpool.transfer.wire.WireCodec#encode}); frames on a link
     * are delivered in order, each at most once (a transport may lose them only when the link fails).
     *
     * @param frame the encoded frame, header included; the link copies it
     * @throws LinkFailedException if the link is down
     * @throws IllegalArgumentException if the frame's length does not match its header (transports that check)
     */
    void send(byte[] frame);

    /**
     * Queues one encoded control frame held between {@code frame}'s position and limit, as {@link #send(byte[])} does.
     * The link copies the bytes before it returns, so the caller may reuse the buffer; the buffer's position and limit
     * are left as they were. The default copies the frame into a new array for {@link #send(byte[])}; a link that can
     * take the bytes without that copy overrides it.
     *
     * @param frame the encoded frame, header included, between position and limit
     * @throws LinkFailedException      if the link is down
     * @throws IllegalArgumentException if the frame's length does not match its header (transports that check)
     */
    default void send(ByteBuffer frame) {
        final byte[] copy = new byte[frame.remaining()];
        frame.get(frame.position(), copy);
        send(copy);
    }

    /**
     * Delivers pending events to the listener: received frames, write and flush completions, and a link
     * failure. Never blocks.
     *
     * @param listener receives the events, on this thread, before {@code poll} returns
     * @param limit    most events to deliver
     * @return events delivered
     */
    int poll(LinkListener listener, int limit);

    // ---- receiver side ----

    /**
     * Lets the peer write the given pages of a local storage, for one transfer.
     *
     * @param storage the receiver pool's storage
     * @param slots   the destination slots, in the order the descriptor lists them; read during the call, not kept
     * @return the registration; its {@link Registration#key()} goes into the descriptor
     * @throws LinkFailedException       if the link is down
     * @throws IndexOutOfBoundsException if a slot is outside the storage ({@link SlotChecks#requireDistinct})
     * @throws IllegalArgumentException  if a slot is listed twice, or the slots do not fit one region key
     * @throws IllegalStateException     if this link cannot receive (a shared-memory link that exposes no pool)
     */
    Registration register(PageStorage storage, int[] slots);

    /**
     * Closes the peer's endpoint on this side so that no write from it can land any more, including
     * writes already in flight. Idempotent.
     *
     * @return whether that is now proven (some transports prove it only later, e.g. once the peer process
     *         is gone; call again)
     */
    boolean tearDown();

    // ---- sender side ----

    /**
     * Opens the receiver's registration named by a descriptor's region key, so this side can write into it.
     *
     * @param regionKey a descriptor's {@link io.kvpool.transfer.wire.Message.Descriptor#regionKey()}
     * @param pages     how many destination pages the key's registration covers: this sender rank's share of
     *                  the descriptor's pages, {@code firstPage(n, senders, rank + 1) - firstPage(n, senders, rank)}
     *                  ({@link io.kvpool.transfer.TransferPlan#firstPage}, n = the descriptor's page count) — not
     *                  n itself, since the descriptor lists every rank's pages; the region's pages are then
     *                  addressed 0 to {@code pages - 1}
     * @return a handle to address those pages with {@link #putBatch}
     * @throws LinkFailedException if the key is not valid for this link
     */
    RemoteRegion attach(byte[] regionKey, int pages);

    /**
     * Posts one-sided writes of whole pages: {@code region[dst[off+i]] ← source[src[off+i]]}. Each write
     * reports its terminal state later with token {@code firstToken + i}. A batch that is refused (bad
     * index, link down) throws before any of its writes is posted.
     *
     * @param region     the receiver's pages, from {@link #attach} on this link
     * @param dst        destination page numbers within the region
     * @param source     the local storage to copy from
     * @param src        source page numbers within {@code source}
     * @param off        index of the batch's first entry in {@code dst} and {@code src}
     * @param count      number of pages to write
     * @param firstToken token reported for the first write; write {@code i} reports {@code firstToken + i}
     *                   (the link reads {@code dst} and {@code src} during the call and keeps neither: the caller
     *                   reuses them)
     * @throws LinkFailedException       if the link is down
     * @throws IllegalArgumentException  if the region is not from this link or this transport cannot read
     *                                   the source storage
     * @throws IndexOutOfBoundsException if an offset or page index is out of range (some transports throw
     *                                   {@link IllegalArgumentException} instead)
     */
    void putBatch(RemoteRegion region, int[] dst, PageStorage source, int[] src, int off, int count, long firstToken);

    /**
     * Asks for proof of delivery of every write posted on this link so far that completed {@link #OK}; answered,
     * once, by {@link LinkListener#onFlushDone} (not ok if the link fails or closes first). Writes that failed are
     * not covered: see the class comment.
     *
     * @param token passed back to {@link LinkListener#onFlushDone} with the answer
     * @throws LinkFailedException if the link is down
     */
    void flush(long token);

    /**
     * Cancels the writes that can still be cancelled (not yet on the wire); every posted write still
     * reaches a terminal state through {@link #poll}. A transport that can only cancel by force-closing
     * the endpoint does so: the link goes down, and {@link #poll} reports that failure at this end too
     * ({@link LinkListener#onLinkFailed}).
     *
     * @throws LinkFailedException if the transport under the link is closed (UCX), so nothing could be cancelled;
     *                             the transport's close ends every write anyway
     */
    void cancelWrites();

    /** Closes the link; pending writes end {@link #CANCELED}. Idempotent. */
    @Override
    void close();
}
