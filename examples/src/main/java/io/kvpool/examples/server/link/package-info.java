/**
 * The KV link between the roles, below everything else: how decode accepts prefill's links
 * ({@link io.kvpool.examples.server.link.LinkSource}, {@link io.kvpool.examples.server.link.UcxAcceptor}), the grants
 * that pair them in one JVM ({@link io.kvpool.examples.server.link.LocalGrants},
 * {@link io.kvpool.examples.server.link.GrantingLink}), injected faults and the test gate
 * ({@link io.kvpool.examples.server.link.FaultyLink}, {@link io.kvpool.examples.server.link.FaultPlan},
 * {@link io.kvpool.examples.server.link.LinkGate}), and how pages are reached on a device
 * ({@link io.kvpool.examples.server.link.PageIo}, {@link io.kvpool.examples.server.link.CopyingPageIo},
 * {@link io.kvpool.examples.server.link.DeviceBackend}).
 *
 * <p>Dependency rule: uses no other {@code io.kvpool.examples} package (only kvpool itself). Its seams: the types the
 * roles wire together, and {@link io.kvpool.examples.server.link.DeviceBackend} with
 * {@link io.kvpool.examples.server.link.CopyingPageIo}, through which a test backend stands in for the GPU.
 */
package io.kvpool.examples.server.link;
