package io.kvpool.examples.load;

/**
 * One request the generator sends, decided by {@link Mix#shot} from the seed and its index alone.
 *
 * @param index        its number in the run (0, 1, …)
 * @param tenant       whose key it carries ({@code Authorization: Bearer sk-<tenant>})
 * @param kind         normal, over capacity (larger than the prefill pool, within the advertised context) or garbage
 * @param prompt       the prompt: the tenant's secret markers ({@link Markers}); empty for garbage
 * @param promptTokens tokens of the prompt under the echo model's tokenizer
 * @param maxTokens    {@code max_tokens}
 * @param stream       whether it asks for server-sent events
 * @param abortAfter   -1: read to the end; 0: disconnect once the server admitted it (the KV transfer in
 *                     flight); k &gt; 0: disconnect after k streamed tokens. An abort is always streamed
 * @param garbage      the bad input it sends, for {@link Kind#GARBAGE}; else {@code null}
 */
public record Shot(long index, String tenant, Kind kind, String prompt, int promptTokens, int maxTokens, boolean stream,
                   int abortAfter, Garbage garbage) {

    /** What sort of request. */
    public enum Kind {
        /** A request that fits. */
        NORMAL,
        /** A prompt larger than the prefill pool can hold, within the advertised context (the incident's request). */
        OVER_CAPACITY,
        /** Bad HTTP input that must get its 4xx and change nothing. */
        GARBAGE
    }

    /** @return whether the client disconnects before the end */
    public boolean aborts() {
        return abortAfter >= 0;
    }
}
