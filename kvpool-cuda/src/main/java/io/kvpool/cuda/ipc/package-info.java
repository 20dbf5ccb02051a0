/**
 * The CUDA IPC transport of {@code kvpool-transfer}'s SPI ({@link io.kvpool.transfer.spi.PeerLink}): a
 * prefill and a decode process on one node, both pools in GPU memory
 * ({@link io.kvpool.cuda.DevicePageStorage}), pages written one-sidedly from the prefill arena into the
 * decode arena by a kernel the prefill process launches. Control frames use the shared-memory
 * transport's control channel ({@link io.kvpool.transfer.shm.ShmTransport#listen(java.nio.file.Path)},
 * control only): the bootstrap over a Unix socket, then the frames through its shared-memory rings (or on the
 * socket, with a peer that speaks bootstrap version 2 or a listener that could not create the ring file). The transfer protocol itself is drawn in {@code io.kvpool.transfer}'s package comment.
 *
 * <h2>Protocol and lifetime (this comment is its one drawing)</h2>
 * <pre>
 *  decode process (exporter)                                       prefill process (importer)
 *  CudaIpcListener.accept()                                        CudaIpcTransport.connect(socket)
 *  ───────────────────────                                         ────────────────────────────────
 *  unix socket ◀── bootstrap(pid) ─────────────────────────────── (pid must be a live process here)
 *              ─── bootstrap(pid) ───────────────────────────────▶
 *              ⇄ HELLO / HELLO (kvpool frames from here on, in order, at most once; in the control rings)
 *
 *  register(pool storage, slots)
 *    cuIpcGetMemHandle(arena) → 96-byte DeviceIpc handle (magic, version, layout fingerprint, pages,
 *    device, arena bytes, cudaIpcMemHandle) under an export lease, once per link and storage;
 *    exported := true. While the lease is open the pool's close keeps the arena (no cuMemFree)
 *              ── DESCRIPTOR(…, region key = "CIPK" v1 · handle · slots) ──▶  attach(key): checks the key
 *                                                                 first putBatch for this handle:
 *                                                                   DeviceIpc.open → cuIpcOpenMemHandle
 *                                                                   (fingerprint checked; once per link+handle)
 *                                                                 putBatch(n pages), on the link's stream:
 *                                                                   cuMemcpyHtoDAsync(2n indices)
 *    arena pages ◀═══════ kvpool_ipc_put_pages: ONE launch, n pages × all planes ══  cuLaunchKernel
 *                                                                   cuEventRecord(e_k)      ── batch k posted
 *                                                                 poll: cuEventQuery(e_oldest)
 *                                                                   DONE  → n × onWriteDone(OK)
 *                                                                   error → n × onWriteDone(FAILED), link down
 *                                                                 flush: answered when every batch before it
 *                                                                   is DONE (ok) — proves delivery
 *                                                                 cancelWrites: recalls nothing (no CANCELED)
 *              ◀── COMPLETION / DRAINED ──
 *  commit, or DRAINING → QUARANTINED …
 *
 *  tearDown(): closes the socket               ─── EOF ───▶       link fails → close():
 *    proven (true) only when the peer process is gone:              cuStreamSynchronize (every copy done,
 *    its context, mapping and queued kernels died with it           true terminal states queued), then
 *    (false while it lives; an exporter cannot revoke               cuIpcCloseMemHandle — a live, well-behaved
 *    a mapping another process opened)                              peer unmaps here, but only its death
 *    proven: the export leases end; a closed pool                   is a proof the exporter can check
 *    frees its arena with the last one. close() alone:
 *    ended if the peer is gone, else ExportReaper asks
 *    once a second until it is
 * </pre>
 *
 * <h2>Pieces</h2>
 * <ul>
 *   <li>{@link io.kvpool.cuda.ipc.CudaIpcTransport}, {@link io.kvpool.cuda.ipc.CudaIpcListener}: making links.</li>
 *   <li>{@link io.kvpool.cuda.ipc.CudaIpcLink}: the link's state machine (terminal states, flush, cancel,
 *       teardown and its proof, errors), written against a package-private engine seam ({@code IpcEngine}:
 *       export, open, submit one batch, query, drain, close) so that it is tested on the CPU with a
 *       host-memory engine; {@code JCudaIpcEngine} is the CUDA one.</li>
 *   <li>{@code RegionKey}: the region key's format. The put kernel, {@value io.kvpool.cuda.Kernels#IPC_PUT_PAGES},
 *       is in the pool's source and committed fatbin ({@link io.kvpool.cuda.Kernels}); {@code JCudaIpcEngine}
 *       loads that fatbin as a module of its own in the source storage's primary context.</li>
 * </ul>
 */
package io.kvpool.cuda.ipc;
