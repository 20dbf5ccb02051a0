package io.kvpool.transfer;

import java.util.HashMap;
import java.util.Map;
import java.util.Objects;
import java.util.function.Supplier;

/**
 * Logging for events that can repeat per transfer (a quarantine, a refused descriptor): at most one line
 * per key per interval, and the line after a quiet spell says how many were left out
 * ({@code "(K more since the last line)"}). The counters in {@link ReceiverMetrics} and
 * {@link SenderMetrics} carry the detail; the log carries state changes and summaries. A 10M-transfer run
 * once wrote 1.2M quarantine lines (≈ 330 MB) before this.
 *
 * <p>Single-threaded, like the engines that own it; the clock is the engine's (tests inject one).
 */
final class RateLimitedLog {

    private static final class Key {
        long lastLine;
        long suppressed;
        System.Logger.Level level;
    }

    private final System.Logger log;
    private final NanoClock clock;
    private final long intervalNanos;
    private final Map<String, Key> keys = new HashMap<>();

    /**
     * @param log           where lines go
     * @param clock         the clock intervals are measured on
     * @param intervalNanos the least time between two lines of one key (> 0)
     */
    RateLimitedLog(System.Logger log, NanoClock clock, long intervalNanos) {
        this.log = Objects.requireNonNull(log, "log");
        this.clock = Objects.requireNonNull(clock, "clock");
        if (intervalNanos <= 0) {
            throw new IllegalArgumentException("intervalNanos must be > 0, was " + intervalNanos);
        }
        this.intervalNanos = intervalNanos;
    }

    /**
     * Logs the message unless a line of this key went out less than the interval ago; then only counts it.
     * Keys name a kind of event ({@code "quarantine"}), never a transfer: they are kept for the log's life.
     *
     * @return whether a line was written
     */
    boolean log(System.Logger.Level level, String key, Supplier<String> message) {
        if (!log.isLoggable(level)) {
            return false;
        }
        final long now = clock.nanoTime();
        final Key k = keys.get(key);
        if (k != null && now - k.lastLine < intervalNanos) {
            k.suppressed++;
            return false;
        }
        final long more = k == null ? 0 : k.suppressed;
        final Key state = k == null ? new Key() : k;
        state.lastLine = now;
        state.suppressed = 0;
        state.level = level;
        keys.putIfAbsent(key, state);
        log.log(level, more == 0 ? message.get() : message.get() + " (" + more + " more since the last line)");
        return true;
    }

    /**
     * Writes, for each key with lines left out since its last line, one line saying how many: what an owner that
     * closes calls, so that a burst that ended is still counted in the log.
     */
    void flush(String owner) {
        keys.forEach((key, k) -> {
            if (k.suppressed > 0) {
                log.log(k.level, owner + ": " + k.suppressed + " more " + key + " lines left out since the last one");
                k.suppressed = 0;
            }
        });
    }

    /** @return lines of this key left out since its last line */
    long suppressed(String key) {
        final Key k = keys.get(key);
        return k == null ? 0 : k.suppressed;
    }
}
