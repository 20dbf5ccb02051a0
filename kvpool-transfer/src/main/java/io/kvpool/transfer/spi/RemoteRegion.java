package io.kvpool.transfer.spi;

/** A sender's handle on a receiver's registered pages ({@link PeerLink#attach}). */
public interface RemoteRegion {
    /** {@return how many destination pages the region addresses} */
    int pages();
}
