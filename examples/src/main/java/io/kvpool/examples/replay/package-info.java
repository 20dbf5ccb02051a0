/**
 * The 2026 incident replayed over HTTP against the example server ({@code ./dev example replay},
 * {@link io.kvpool.examples.replay.ReplayCommand}): an undersized prefill pool, tenants with secret
 * markers, over-capacity requests, aborts and injected faults, and a table of what came back. See
 * {@link io.kvpool.examples.replay.Replay} for what the safe server does with the incident's
 * configuration and what {@code --unsafe-incident} shows.
 */
package io.kvpool.examples.replay;
