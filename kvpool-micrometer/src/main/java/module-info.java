/**
 * Micrometer {@code MeterBinder}s for kvpool's pools and transfer engines. The transfer binders need
 * kvpool-transfer, an optional dependency: an application that binds only pools does not read it.
 */
@SuppressWarnings({"requires-automatic", "requires-transitive-automatic"}) // micrometer.core: automatic, no descriptor
module io.kvpool.micrometer {
    requires transitive io.kvpool;
    requires static io.kvpool.transfer;
    requires transitive micrometer.core;

    exports io.kvpool.micrometer;
}
