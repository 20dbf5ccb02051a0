/**
 * The example server's HTTP/1.1 front on Netty: {@link io.kvpool.examples.http.HttpFront} reads each request
 * whole, enforcing {@link io.kvpool.examples.http.HttpLimits}, and hands it to an
 * {@link io.kvpool.examples.http.HttpHandler} on a virtual thread as an {@link io.kvpool.examples.http.HttpCall}.
 *
 * <p>Dependency rule: this package knows HTTP and nothing of kvpool, the router or the roles; the server and the
 * live page depend on it, never the other way. Its errors use the server's documented shape,
 * {@code {"error":{"type":…,"reason":…,"message":…}}}.
 */
package io.kvpool.examples.http;
