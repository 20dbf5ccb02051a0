/**
 * The shared-memory transport between processes on one host ({@link io.kvpool.transfer.shm.ShmTransport}): the
 * decode pool lives in a file ({@link io.kvpool.transfer.shm.MappedPageStorage}) that a prefill process maps and
 * writes with plain memory copies; control frames go through rings in a second file, or the Unix socket the
 * link was made on. For peers that trust each other (same host, same user): see {@link io.kvpool.transfer.shm.ShmLink}.
 */
package io.kvpool.transfer.shm;
