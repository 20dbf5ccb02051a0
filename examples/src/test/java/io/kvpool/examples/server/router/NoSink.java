package io.kvpool.examples.server.router;

/** A {@link Router.Sink} that drops what it is given: for tests that look only at how a request ends. */
final class NoSink implements Router.Sink {

    static final NoSink INSTANCE = new NoSink();

    private NoSink() {
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
}
