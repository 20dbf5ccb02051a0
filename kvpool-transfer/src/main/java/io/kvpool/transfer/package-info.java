/**
 * Prefill → decode page transfer: the protocol, its engines, and the transport SPI.
 *
 * <h2>The protocol (this comment is its one drawing)</h2>
 * <pre>
 *  decode (TransferReceiver)                                   prefill (TransferSender), rank r of n
 *  ─────────────────────────                                   ────────────────────────────────────
 *  link up ── HELLO(versions [min,max], layout fingerprint, model, environment, build) ──▶
 *            ◀── HELLO (answered in kind: to a version-1 HELLO, a version-1 HELLO of one version)
 *            the link speaks v = the highest version both ranges hold; every later frame carries v
 *            (a HELLO's header names its body layout, 2 for every range, so version-2 code reads a later HELLO)
 *            no common version, or layout / model / environment differ (build too, with strictBuild):
 *            REFUSE(both sides' values, both ranges), link closed; nothing else is accepted before the
 *            HELLOs match. A differing build is allowed: logged once per link, exported (peerBuilds()).
 *            A copy of the peer's HELLO later is ignored (counted); another HELLO fails the link.
 *            (version-1 code sends its HELLO at once and reads only version 1: prefill is rolled out first)
 *  v ≥ 4, each side once the peer's HELLO passed:
 *            ── INSTANCE(this engine's random id) ──▶   ◀── INSTANCE
 *            the link is UP only once the peer's INSTANCE arrived (Peer.remoteInstance()); upPeerOf(id) finds
 *            the link to the engine that prepared a request. A copy is ignored; another id fails the link.
 *
 *  heartbeat (v ≥ 3), both sides, while the link is up (Heartbeat: idle, timeout):
 *            nothing heard for idle ── PING(token) ──▶      ◀── PONG(token), sent from the duty cycle
 *            still nothing heard for timeout after the PING: the link FAILED, as if the transport lost it
 *            (any frame counts as heard; every engine answers PINGs, also with its own heartbeat OFF)
 *            a link whose handshake (HELLO, and INSTANCE on v ≥ 4) is not done idle + timeout after it was
 *            added fails in HANDSHAKE (any version)
 *
 *  start(request, tokens): admission (typed rejection, never a placeholder) → append → pin every page
 *  rejected (admission, no slot, a sender down):
 *            ── CANCEL(request, rejected, why) ──▶ (v ≥ 2)    an offer still waiting: released at once;
 *                                                              none yet: its offer ends when it comes
 *  rejected because the request is receiving already: no CANCEL to that transfer's senders (the offers are its)
 *  RECEIVING → register pages [first(r), first(r+1)) for each sender
 *            ── DESCRIPTOR(request, slot, generation, tokens, layout, n, r, handles, region key) ──▶
 *                                                              offer(request, sequence) (either order)
 *            ◀══ one-sided writes, ≤ maxPagesInFlight at a time ══  putBatch … every write OK …
 *                                                              flush: proves delivery of every write
 *            ◀── COMPLETION(slot, generation, r, tokens, first page, checksums, posted, ok, failed) ──
 *  every rank completed: tokens == expected? no page holds the canary? every checksum (keyed by
 *  request, page, tokens — never by slot) matches? ── yes: commitReceive, sequence → decode
 *                                                  └─ no: FAILED, drain path below
 *
 *  abort / failure (either side, any time before commit)
 *            ── ABORT(slot, generation, reason) ──▶            marked FAILED first: nothing more posted
 *            ── CANCEL(request, aborted, why) ──▶ (v ≥ 2)     an offer whose descriptor never came: released
 *                                                              at once. Right after an ABORT of an attempt an offer
 *                                                              took: that ABORT's echo, nothing more (not even to
 *                                                              a retry's offer). A CANCEL never ends an attempt
 *                                                              under way: it names the request, not the attempt.
 *                                                              Source pages are released only once every write
 *                                                              the sender posted for the request is terminal
 *  pages DRAINING; the sequence is closed                     wait until every posted write is terminal
 *  (only the writer pins hold the pages)                      (OK / FAILED / CANCELED), then flush
 *            ◀── DRAINED(slot, generation, r, posted, proven, unproven) ──
 *  unproven == 0 from every unconfirmed rank → drained → FREE            (outcome drained)
 *  unproven > 0, or a rank's link lost          → QUARANTINED            (outcome error)
 *  no DRAINED by the drain deadline             → QUARANTINED            (outcome timeout)
 *  QUARANTINED → FREE only when, for each unconfirmed rank, the transport proves no write can land:
 *  the registration was revoked, or the peer's link was torn down on the receiver's side. Never a timer.
 *  a suspect rank's link that cannot revoke is retired (v ≥ 3), not torn down at once:
 *            ── CANCEL(link, retiring, why) ──▶                the link takes no new descriptor: open a
 *            no new DESCRIPTOR on it; those in flight finish   fresh one for new work; finish those in flight
 *            then torn down (the quarantine's proof)
 *  on a link of version 1 or 2 (whose sender cannot be told) it is torn down at once, failing what runs on it
 * </pre>
 * <b>Request ids.</b> A descriptor finds its offer by request id alone, and checksums are keyed by it. So an id must
 * name one request between a sender and a receiver for as long as a transfer of it may run (the sender's descriptor
 * timeout, the receiver's completion timeout): an offer of another request under an id the receiver is receiving
 * would be taken as that request's KV, and no check can tell them apart. Draw ids that do not repeat, e.g. a random
 * per-process epoch in the high bits and a counter below. A receiver refuses to start an id it is receiving already,
 * and does not CANCEL that transfer's senders for it.
 *
 * <p>Acknowledgements are keyed by transfer slot <em>and</em> generation and accepted only from the rank's
 * own link; early, stale, duplicate, foreign-link and inconsistent ones are ignored and counted
 * ({@link io.kvpool.transfer.ReceiverMetrics}). A sender that never saw a generation answers its ABORT
 * with DRAINED(rank −1, nothing posted); one that finished repeats its true counts.
 *
 * <h2>Pieces</h2>
 * <ul>
 *   <li>{@link io.kvpool.transfer.TransferReceiver}, {@link io.kvpool.transfer.TransferSender}: the two
 *       engines, single-threaded duty cycles ({@code doWork()}) over any number of links.</li>
 *   <li>{@link io.kvpool.transfer.spi.PeerLink}: the transport SPI (control frames, register, put batch,
 *       flush, cancel, tear down) with the semantics every transport keeps.</li>
 *   <li>Transports: {@link io.kvpool.transfer.sim} (in-JVM, deterministic fault injection, for tests),
 *       {@link io.kvpool.transfer.shm} (processes on one host through a mapped pool file),
 *       {@link io.kvpool.transfer.ucx} (UCX via JUCX, between hosts, over UCX's tcp transport).</li>
 *   <li>{@code io.kvpool.transfer.wire} (exported to kvpool-cuda only): the versioned, strictly decoded control messages.</li>
 *   <li>{@link io.kvpool.transfer.KvChecksum} and {@link io.kvpool.transfer.PageChecksums}, the seam through which
 *       engines compute it (on host pages by default; kvpool-cuda plugs in one kernel launch per run of pages for
 *       device pools), {@link io.kvpool.transfer.PeerIdentity}, {@link io.kvpool.transfer.TransferSafeguard},
 *       {@link io.kvpool.transfer.ReceiverMetrics}.</li>
 * </ul>
 */
package io.kvpool.transfer;
