package io.kvpool.examples.server.role;

import java.util.Objects;

/**
 * {@link Roles} held as one prefill and one decode service, closed together: prefill first (in this JVM its
 * sender aborts what is left and waits for its writes), then decode, even if closing prefill failed.
 * {@link #close()} is idempotent.
 *
 * @param <P> the prefill service's type
 * @param <D> the decode service's type
 */
public abstract class RolePair<P extends PrefillService, D extends DecodeService> implements Roles {

    protected final P prefill;
    protected final D decode;
    private boolean closed;

    public RolePair(P prefill, D decode) {
        this.prefill = Objects.requireNonNull(prefill, "prefill");
        this.decode = Objects.requireNonNull(decode, "decode");
    }

    @Override
    public final PrefillService prefill() {
        return prefill;
    }

    @Override
    public final DecodeService decode() {
        return decode;
    }

    /** Closes prefill, then decode. Idempotent. */
    @Override
    public final synchronized void close() {
        if (closed) {
            return;
        }
        closed = true;
        try {
            prefill.close();
        } finally {
            decode.close();
        }
    }
}
