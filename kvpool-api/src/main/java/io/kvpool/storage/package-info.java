/**
 * Where a pool's pages live. {@link io.kvpool.storage.PageStorage} is the backend contract (host memory here,
 * device memory in kvpool-cuda, a shared file in kvpool-transfer); {@link io.kvpool.storage.HostPageStorage} is
 * the default, in native host memory. {@link io.kvpool.storage.FillMode} says what a freed page is filled with
 * before reuse, and {@link io.kvpool.storage.KernelView} how a kernel addresses one layer's K or V.
 */
package io.kvpool.storage;
