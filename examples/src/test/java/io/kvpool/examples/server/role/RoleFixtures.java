package io.kvpool.examples.server.role;

/**
 * What the tests that drive the whole server (in {@code io.kvpool.examples.server}) read of a role's internals.
 * Test code only; none of it is public in the package itself.
 */
public final class RoleFixtures {

    private RoleFixtures() {
    }

    /** @return {@link DecodeRole#senderLinks()} */
    public static int senderLinks(DecodeRole decode) {
        return decode.senderLinks();
    }
}
