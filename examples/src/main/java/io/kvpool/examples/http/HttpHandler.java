package io.kvpool.examples.http;

/**
 * Answers one request. Called on a virtual thread of its own, once the whole request (head and body) arrived;
 * the requests of one connection are handled one after another, in order.
 */
@FunctionalInterface
public interface HttpHandler {

    /**
     * Answers {@code call}: with {@link HttpCall#respond} once, or with {@link HttpCall#startStream} and writes.
     * What it leaves open the front ends: a stream is ended, a call with no answer gets a 500. An exception
     * thrown here is logged and, if nothing was sent yet, answered with a 500.
     */
    void handle(HttpCall call) throws Exception;
}
