/**
 * Device page storage on JCuda and batched block-copy kernels. Issue #4 builds it on
 * the {@link io.kvpool.storage.PageStorage} SPI of {@code kvpool-api}.
 */
package io.kvpool.cuda;
