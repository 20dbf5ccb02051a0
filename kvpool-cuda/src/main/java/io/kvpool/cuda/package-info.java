/**
 * Device page storage on JCuda and batched block-copy kernels. Placeholder: issue #4 builds this on
 * the {@link io.kvpool.storage.PageStorage} SPI of {@code kvpool-api}.
 */
package io.kvpool.cuda;
