/**
 * Prefill-to-decode page transfer with the drain handshake. Placeholder: issue #3 builds this on the
 * writer-pin states of {@link io.kvpool.SlotStateMachine}.
 */
package io.kvpool.transfer;
