/**
 * Device page storage on JCuda and batched block-copy kernels, built on
 * the {@link io.kvpool.storage.PageStorage} SPI of {@code kvpool-api}.
 */
package io.kvpool.cuda;
