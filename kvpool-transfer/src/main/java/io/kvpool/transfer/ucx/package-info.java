/**
 * The UCX transport ({@link io.kvpool.transfer.ucx.UcxTransport}): one-sided RDMA puts, or whatever UCX picks on
 * the path (TCP here), through JUCX. JUCX is an optional dependency: without it on the class path, asking for
 * this transport throws {@link io.kvpool.transfer.ucx.UcxUnavailableException} naming what to add. It also needs
 * the native UCX library and {@code --enable-native-access}.
 */
package io.kvpool.transfer.ucx;
