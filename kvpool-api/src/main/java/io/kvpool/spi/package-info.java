/**
 * The pool's service-provider interface for transports: {@link io.kvpool.spi.TransportHandles}, the
 * writer-pin operations a transfer engine applies to the pages it receives into. Exported only to
 * kvpool-transfer and kvpool-cuda; applications never need it.
 */
package io.kvpool.spi;
