/**
 * kvpool's pool: page layout, generation-tagged page handles, sequences, prefix sharing, admission and host
 * storage. Depends on the JDK alone.
 *
 * <p>{@code io.kvpool} and {@code io.kvpool.storage} are the application's API. {@code io.kvpool.spi}, the
 * writer-pin operations a transport applies to pages it receives into, is exported to the transport
 * modules only.
 */
@SuppressWarnings("module") // the qualified exports name modules that are compiled after this one
module io.kvpool {
    exports io.kvpool;
    exports io.kvpool.storage;
    exports io.kvpool.spi to io.kvpool.transfer, io.kvpool.cuda;
}
