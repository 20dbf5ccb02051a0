/**
 * Micrometer {@link io.micrometer.core.instrument.binder.MeterBinder}s for kvpool: {@link
 * io.kvpool.micrometer.KvPoolMeterBinder} for a pool's gauges and counters, {@link
 * io.kvpool.micrometer.TransferReceiverMeterBinder} and {@link io.kvpool.micrometer.TransferSenderMeterBinder}
 * for the transfer engines. Meter names are dotted ({@code kvpool.pool.pages}); each registry renders them
 * in its own convention ({@code kvpool_pool_pages} in Prometheus). No binder keeps what it observes alive.
 * The module README has the meter table.
 */
package io.kvpool.micrometer;
