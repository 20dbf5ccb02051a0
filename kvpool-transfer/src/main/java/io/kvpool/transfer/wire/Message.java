package io.kvpool.transfer.wire;

import io.kvpool.transfer.PeerIdentity;

import java.util.Arrays;
import java.util.Objects;

/** The control messages (see {@link WireFormat} for their encoding). */
public sealed interface Message {

    /** {@return the type code} */
    int type();

    /**
     * A peer's identity, sent first by both sides of a link.
     *
     * @param identity the sending side's identity
     */
    record Hello(PeerIdentity identity) implements Message {
        /**
         * Creates the message.
         *
         * @throws NullPointerException if {@code identity} is null
         */
        public Hello {
            Objects.requireNonNull(identity, "identity");
        }

        @Override
        public int type() {
            return WireFormat.HELLO;
        }
    }

    /**
     * The sender of this refuses the link.
     *
     * @param reason why, naming both sides' values
     */
    record Refuse(String reason) implements Message {
        /**
         * Creates the message.
         *
         * @throws NullPointerException if {@code reason} is null
         */
        public Refuse {
            Objects.requireNonNull(reason, "reason");
        }

        @Override
        public int type() {
            return WireFormat.REFUSE;
        }
    }

    /**
     * Receiver → senders: where to write one request's KV.
     *
     * @param requestId         the request (keys the checksums)
     * @param transferId        the receiver's transfer slot ("room"), reused across requests
     * @param generation        bumped each time the transfer slot is reused; acks must carry it
     * @param expectedTokens    the exact number of tokens the receiver will accept
     * @param layoutFingerprint the receiver pool's layout
     * @param senders           how many senders write into this transfer (each covers a page range, see
     *                          {@link io.kvpool.transfer.TransferPlan#firstPage})
     * @param senderRank        which of them this descriptor is for
     * @param pageHandles       the destination pages' generation-tagged handles, in logical order; empty in a
     *                          descriptor decoded without them ({@link WireCodec#decode(java.nio.ByteBuffer, boolean)})
     * @param regionKey         transport-specific bytes that let the sender address the pages
     * @param pages             how many destination pages the descriptor names: {@code pageHandles.length} unless the
     *                          handles were not decoded
     */
    record Descriptor(long requestId, long transferId, int generation, int expectedTokens, long layoutFingerprint,
                      int senders, int senderRank, long[] pageHandles, byte[] regionKey, int pages) implements Message {
        /**
         * Creates the message; it keeps the arrays, not copies.
         *
         * @throws NullPointerException     if {@code pageHandles} or {@code regionKey} is null
         * @throws IllegalArgumentException if {@code pages} is negative, or {@code pageHandles} is neither empty nor
         *                                  {@code pages} long
         */
        public Descriptor {
            Objects.requireNonNull(pageHandles, "pageHandles");
            Objects.requireNonNull(regionKey, "regionKey");
            if (pages < 0 || pageHandles.length != pages && pageHandles.length != 0) {
                throw new IllegalArgumentException(pageHandles.length + " page handles for " + pages + " pages");
            }
        }

        /**
         * Creates the message with its page handles ({@code pages} is their count); it keeps the arrays, not copies.
         *
         * @param requestId         the request
         * @param transferId        the receiver's transfer slot
         * @param generation        the slot's generation
         * @param expectedTokens    the exact number of tokens the receiver will accept
         * @param layoutFingerprint the receiver pool's layout
         * @param senders           how many senders write into this transfer
         * @param senderRank        which of them this descriptor is for
         * @param pageHandles       the destination pages' handles, in logical order
         * @param regionKey         transport-specific bytes that let the sender address the pages
         * @throws NullPointerException if {@code pageHandles} or {@code regionKey} is null
         */
        public Descriptor(long requestId, long transferId, int generation, int expectedTokens, long layoutFingerprint,
                          int senders, int senderRank, long[] pageHandles, byte[] regionKey) {
            this(requestId, transferId, generation, expectedTokens, layoutFingerprint, senders, senderRank, pageHandles,
                regionKey, Objects.requireNonNull(pageHandles, "pageHandles").length);
        }

        /** {@return whether {@link #pageHandles()} holds every page's handle (false once decoded without them)} */
        public boolean hasPageHandles() {
            return pageHandles.length == pages;
        }

        @Override
        public int type() {
            return WireFormat.DESCRIPTOR;
        }

        @Override
        public boolean equals(Object o) {
            return o instanceof Descriptor d && requestId == d.requestId && transferId == d.transferId
                && generation == d.generation && expectedTokens == d.expectedTokens
                && layoutFingerprint == d.layoutFingerprint && senders == d.senders && senderRank == d.senderRank
                && Arrays.equals(pageHandles, d.pageHandles) && Arrays.equals(regionKey, d.regionKey) && pages == d.pages;
        }

        @Override
        public int hashCode() {
            return Objects.hash(requestId, transferId, generation, expectedTokens, layoutFingerprint, senders, senderRank,
                Arrays.hashCode(pageHandles), Arrays.hashCode(regionKey), pages);
        }

        @Override
        public String toString() {
            return "Descriptor[request=" + requestId + ", transfer=" + transferId + "/" + generation + ", tokens="
                + expectedTokens + ", pages=" + pages + (hasPageHandles() ? "" : " (handles not decoded)") + ", rank="
                + senderRank + "/" + senders + "]";
        }
    }

    /**
     * Sender → receiver: this sender's writes are all delivered (flushed).
     *
     * @param transferId the descriptor's transfer slot
     * @param generation the descriptor's generation of that slot
     * @param senderRank the descriptor's sender rank
     * @param tokenCount tokens the sender holds for the request
     * @param firstPage  the first page of the sender's share ({@link io.kvpool.transfer.TransferPlan#firstPage})
     * @param checksums  per-page checksums for pages {@code firstPage ..}, or {@code null} if the sender
     *                   computes none
     * @param posted     writes the sender posted for this transfer
     * @param succeeded  of those, completed successfully
     * @param failed     of those, completed with an error
     */
    record Completion(long transferId, int generation, int senderRank, int tokenCount, int firstPage, int[] checksums,
                      long posted, long succeeded, long failed) implements Message {
        @Override
        public int type() {
            return WireFormat.COMPLETION;
        }

        @Override
        public boolean equals(Object o) {
            return o instanceof Completion c && transferId == c.transferId && generation == c.generation
                && senderRank == c.senderRank && tokenCount == c.tokenCount && firstPage == c.firstPage
                && Arrays.equals(checksums, c.checksums) && posted == c.posted && succeeded == c.succeeded
                && failed == c.failed;
        }

        @Override
        public int hashCode() {
            return Objects.hash(transferId, generation, senderRank, tokenCount, firstPage, Arrays.hashCode(checksums),
                posted, succeeded, failed);
        }

        @Override
        public String toString() {
            return "Completion[transfer=" + transferId + "/" + generation + ", rank=" + senderRank + ", tokens="
                + tokenCount + ", firstPage=" + firstPage + ", checksums=" + (checksums == null ? "none" : checksums.length)
                + ", posted=" + posted + ", ok=" + succeeded + ", failed=" + failed + "]";
        }
    }

    /**
     * Either side (or a router): stop this transfer.
     *
     * @param transferId the descriptor's transfer slot
     * @param generation the descriptor's generation of that slot
     * @param reason     one of the reason codes below
     * @param detail     what happened, for logs
     */
    record Abort(long transferId, int generation, int reason, String detail) implements Message {
        /** Reason codes. */
        public static final int REQUESTED = 1, SENDER_FAILED = 2, RECEIVER_FAILED = 3, TIMEOUT = 4, UNKNOWN_TRANSFER = 5;
        /**
         * The sender is closing (its process stops) with the transfer under way: another sender can serve a retry.
         * Code that predates it reads it as any other sender abort.
         */
        public static final int SENDER_CLOSING = 6;
        /**
         * A write or the flush of the sender failed, or the flush did not prove delivery: the link's fault, not the
         * request's, so the same request sent again can succeed (on the link's successor if decode retires it). Code
         * that predates it reads it as any other sender abort.
         */
        public static final int WRITE_FAILED = 7;

        /**
         * Creates the message.
         *
         * @throws NullPointerException if {@code detail} is null
         */
        public Abort {
            Objects.requireNonNull(detail, "detail");
        }

        @Override
        public int type() {
            return WireFormat.ABORT;
        }
    }

    /**
     * Sender → receiver: every write this sender posted for the transfer reached a terminal state.
     * {@code succeeded} counts the writes proven delivered by a flush; {@code failed} the others (failed,
     * cancelled, or unproven), which may still land — a DRAINED with {@code failed > 0} is no proof. Rank
     * {@code -1} with zero counts means: nothing of this link's was ever in flight for the transfer.
     *
     * @param transferId the descriptor's transfer slot
     * @param generation the descriptor's generation of that slot
     * @param senderRank the descriptor's sender rank, or {@code -1} (see above)
     * @param posted     writes the sender posted for this transfer
     * @param succeeded  of those, proven delivered by a flush
     * @param failed     the others: failed, cancelled or unproven
     */
    record Drained(long transferId, int generation, int senderRank, long posted, long succeeded, long failed) implements Message {
        @Override
        public int type() {
            return WireFormat.DRAINED;
        }
    }

    /**
     * Receiver → sender (version 2 and later): the receiver will not take this request — it rejected it at
     * admission, or its transfer failed. Keyed by request id, since a rejected request never had a transfer slot. The
     * sender releases an offer of the request still waiting for its descriptor at once, and keeps a CANCEL that comes
     * before the offer for the descriptor timeout. It ends nothing under way: an attempt that reached the sender is
     * ended by the ABORT (by slot and generation) the receiver sends first, and the CANCEL right after such an ABORT is
     * its echo. Other CANCELs are ignored (counted).
     *
     * <p>With {@link #RETIRING} and request id {@link #LINK} it names no request but the link it arrives on: the
     * receiver retired it (a write on it was unproven and it cannot revoke one registration), so no new transfer
     * will start on it; the transfers in flight on it finish, then the receiver tears it down. The sender opens a
     * fresh link for new work. A sender that predates it holds no offer of request {@link #LINK} and ignores it.
     *
     * @param requestId the request the receiver will not take, or {@link #LINK}
     * @param reason    {@link #REJECTED}, {@link #ABORTED} or {@link #RETIRING}
     * @param detail    why, for the sender's log (truncated to fit the frame)
     */
    record Cancel(long requestId, int reason, String detail) implements Message {
        /** Reason code: the receiver's admission rejected the request. */
        public static final int REJECTED = 1;
        /** Reason code: the receiver's transfer of the request failed or was aborted. */
        public static final int ABORTED = 2;
        /** Reason code: the receiver retired the link this arrives on (request id {@link #LINK}). */
        public static final int RETIRING = 3;
        /** The request id of a CANCEL that names the link, not a request. */
        public static final long LINK = -1;

        /**
         * Checks the detail.
         *
         * @throws NullPointerException if {@code detail} is null
         */
        public Cancel {
            Objects.requireNonNull(detail, "detail");
        }

        @Override
        public int type() {
            return WireFormat.CANCEL;
        }
    }

    /**
     * Either side → the other (version 3 and later): a heartbeat. An engine sends it on a link it has heard
     * nothing from for a while; the peer answers with a {@link Pong} carrying the same token at once. Any frame
     * from the peer proves it alive, not only the PONG.
     *
     * @param token echoed by the answer (the sender's clock reading, so the answer tells the round trip)
     */
    record Ping(long token) implements Message {
        @Override
        public int type() {
            return WireFormat.PING;
        }
    }

    /**
     * The answer to a {@link Ping} (version 3 and later).
     *
     * @param token the PING's token
     */
    record Pong(long token) implements Message {
        @Override
        public int type() {
            return WireFormat.PONG;
        }
    }

    /**
     * The sending engine's instance id, once per link right after the HELLOs (version 4 and later).
     *
     * @param instance the id, never 0 (0 stands for none: a peer of an older version sends no id)
     */
    record Instance(long instance) implements Message {
        /**
         * Creates the message.
         *
         * @throws IllegalArgumentException if {@code instance} is 0
         */
        public Instance {
            if (instance == 0) {
                throw new IllegalArgumentException("instance id 0 stands for none; an engine's id is never 0");
            }
        }

        @Override
        public int type() {
            return WireFormat.INSTANCE;
        }
    }
}
