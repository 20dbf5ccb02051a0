package io.kvpool.examples.server;

import java.io.PrintStream;

/** One subcommand of {@link KvServerMain}: {@code serve}, and later {@code replay}, {@code load}. */
public interface Subcommand {

    /** @return a one-line description for the usage text */
    String summary();

    /**
     * Runs the subcommand.
     *
     * @param args the arguments after the subcommand's name
     * @return the process exit status: 0 success, 1 failure, 2 bad usage
     */
    int run(String[] args, PrintStream out, PrintStream err) throws Exception;
}
