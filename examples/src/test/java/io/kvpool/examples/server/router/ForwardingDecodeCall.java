package io.kvpool.examples.server.router;

import io.kvpool.examples.server.echo.EchoDecoder;
import io.kvpool.examples.server.role.DecodeCall;

import java.io.IOException;
import java.time.Duration;

/** A decode call that forwards every method to another, for tests that change one of them. */
class ForwardingDecodeCall implements DecodeCall {
    final DecodeCall real;

    ForwardingDecodeCall(DecodeCall real) {
        this.real = real;
    }

    @Override
    public Admitted awaitAdmission(Duration timeout) throws InterruptedException {
        return real.awaitAdmission(timeout);
    }

    @Override
    public TransferOutcome awaitTransfer(Duration timeout) throws InterruptedException {
        return real.awaitTransfer(timeout);
    }

    @Override
    public Generation generate(int maxTokens, EchoDecoder.TokenSink sink) throws IOException, InterruptedException {
        return real.generate(maxTokens, sink);
    }

    @Override
    public void abort(String why) {
        real.abort(why);
    }
}
