/**
 * The server's configuration: {@link io.kvpool.examples.server.config.ServerConfig} and its records
 * ({@link io.kvpool.examples.server.config.Listen}, {@link io.kvpool.examples.server.config.Capacity},
 * {@link io.kvpool.examples.server.config.Timing}, {@link io.kvpool.examples.server.config.Topology},
 * {@link io.kvpool.examples.server.config.UnsafeSwitches}), and the command line that fills it
 * ({@link io.kvpool.examples.server.config.Cli}, {@link io.kvpool.examples.server.config.ServerOptions}, also used
 * by {@code load} and {@code replay}).
 *
 * <p>Dependency rule: uses only {@code echo} (the capacity check) and {@code link} (the fault plan and test gate a
 * configuration carries). Every other server package reads a {@code ServerConfig}; none is used here.
 */
package io.kvpool.examples.server.config;
