/**
 * The pool an inference engine codes against. Build a {@link io.kvpool.KvPool} from a
 * {@link io.kvpool.KvLayout} ({@link io.kvpool.KvPool#builder}); the build refuses a max context the pool cannot
 * hold for one request ({@link io.kvpool.PoolCapacityException}). Each request is admitted
 * ({@link io.kvpool.KvPool#admit}: a typed {@link io.kvpool.Admission.Decision}, never a placeholder) and then
 * holds a {@link io.kvpool.Sequence}: its pages, its reservation, its prefix-cache entries. Pages are named by
 * generation-tagged {@link io.kvpool.PageHandle handles}, so a handle kept past its page's reuse is refused
 * ({@link io.kvpool.StaleHandleException}), never served another request's KV. {@link io.kvpool.KvCopy},
 * {@link io.kvpool.BlockTable} and {@link io.kvpool.storage.KernelView} are the views a model's kernels need.
 *
 * <p>Threads, guarantees and accounting: {@code docs/pool.md}. Each class states its own threading rule.
 */
package io.kvpool;
