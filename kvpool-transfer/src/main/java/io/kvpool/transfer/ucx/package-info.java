/**
 * The UCX transport ({@link io.kvpool.transfer.ucx.UcxTransport}): one-sided puts through JUCX, over UCX's tcp
 * transport only (RDMA and shared-memory transports would write without the fence a teardown relies on). JUCX is an optional dependency: without it on the class path, asking for
 * this transport throws {@link io.kvpool.transfer.ucx.UcxUnavailableException} naming what to add. It also needs
 * the native UCX library and {@code --enable-native-access}.
 */
package io.kvpool.transfer.ucx;
