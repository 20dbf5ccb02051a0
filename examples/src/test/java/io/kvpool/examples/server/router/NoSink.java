package io.kvpool.examples.server.router;

import java.util.function.BooleanSupplier;

/** A {@link Router.Sink} that drops what it is given: for tests that look only at how a request ends. */
final class NoSink implements Router.Sink {

    /** A client that never leaves. */
    static final NoSink INSTANCE = new NoSink(() -> false);

    private final BooleanSupplier gone;

    private NoSink(BooleanSupplier gone) {
        this.gone = gone;
    }

    /** @return a sink whose client is gone once {@code gone} says so */
    static NoSink leavingWhen(BooleanSupplier gone) {
        return new NoSink(gone);
    }

    @Override
    public void admitted(long requestId) {
    }

    @Override
    public void heartbeat() {
    }

    @Override
    public void token(String text) {
    }

    @Override
    public boolean clientGone() {
        return gone.getAsBoolean();
    }
}
