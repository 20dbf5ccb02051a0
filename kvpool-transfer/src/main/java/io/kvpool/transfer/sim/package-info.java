/**
 * The in-JVM transport: {@link io.kvpool.transfer.sim.SimNetwork} joins pairs of
 * {@link io.kvpool.transfer.sim.SimLink}s on a virtual clock. Writes are delayed (and overtake each other),
 * failed, lost, misdirected, corrupted or late (also after their completion), and control frames lost, duplicated or delayed, as
 * {@link io.kvpool.transfer.sim.SimFaults} says, from one seed, so that a failing run replays. For tests and the
 * leak hunter: it moves bytes between pools of one process.
 */
package io.kvpool.transfer.sim;
