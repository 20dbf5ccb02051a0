/**
 * The contract between the transfer engines and a transport. A {@link io.kvpool.transfer.spi.PeerLink} carries
 * control frames and one-sided page writes to one peer and reports events through a
 * {@link io.kvpool.transfer.spi.LinkListener}; a receiver exposes its pages through a
 * {@link io.kvpool.transfer.spi.Registration}, which a sender attaches as a
 * {@link io.kvpool.transfer.spi.RemoteRegion}. The rules every transport keeps (a write's completion is not its
 * delivery; a flush proves delivery; revocation or teardown ends remote access) are stated on {@code PeerLink}.
 */
package io.kvpool.transfer.spi;
