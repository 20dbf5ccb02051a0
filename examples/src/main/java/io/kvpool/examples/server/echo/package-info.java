/**
 * The echo model the roles run instead of a network: {@link io.kvpool.examples.server.echo.EchoTokenizer} (word
 * pieces of at most 8 UTF-8 bytes), {@link io.kvpool.examples.server.echo.EchoKv} (the prompt written into, and read back from, KV pages) and
 * {@link io.kvpool.examples.server.echo.EchoDecoder} (answers the prompt back from decode's pages, proving which bytes
 * arrived).
 *
 * <p>Dependency rule: uses only {@code link} (for {@link io.kvpool.examples.server.link.PageIo}).
 */
package io.kvpool.examples.server.echo;
