/**
 * The echo model the roles run instead of a network: {@link io.kvpool.examples.server.echo.EchoTokenizer} (one token
 * per word), {@link io.kvpool.examples.server.echo.EchoKv} (the prompt written into, and read back from, KV pages) and
 * {@link io.kvpool.examples.server.echo.EchoDecoder} (answers the prompt back from decode's pages, proving which bytes
 * arrived).
 *
 * <p>Dependency rule: uses only {@code link} (for {@link io.kvpool.examples.server.link.PageIo}).
 */
package io.kvpool.examples.server.echo;
