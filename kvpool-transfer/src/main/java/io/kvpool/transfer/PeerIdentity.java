package io.kvpool.transfer;

import io.kvpool.KvLayout;

import java.util.ArrayList;
import java.util.List;
import java.util.Objects;

/**
 * What a peer says about itself when a link comes up, and what the other side checks before any page
 * moves, so that e.g. a production pool refuses a staging build. Every field must be equal on both sides;
 * {@link #mismatches} names each difference with both values.
 *
 * @param protocolVersion   {@link io.kvpool.transfer.wire.WireFormat#VERSION} of the peer's code
 * @param layoutFingerprint {@link KvLayout#fingerprint()} of the peer's pool
 * @param modelId           the model (and revision) whose KV the pool holds, e.g. {@code "glm-4.6@r3"}
 * @param environment       the deployment environment, e.g. {@code "production"} or {@code "staging"}
 * @param buildVersion      the build of the serving code, e.g. a release tag or commit
 */
public record PeerIdentity(int protocolVersion, long layoutFingerprint, String modelId, String environment, String buildVersion) {

    /** Longest UTF-8 encoding accepted for each string field (the wire format's limit). */
    public static final int MAX_FIELD_BYTES = 256;

    /**
     * Validates the fields: strings non-null, non-blank, at most {@link #MAX_FIELD_BYTES} bytes of UTF-8.
     *
     * @throws NullPointerException     if a string field is null
     * @throws IllegalArgumentException if a string field is blank or too long
     */
    public PeerIdentity {
        check("modelId", modelId);
        check("environment", environment);
        check("buildVersion", buildVersion);
    }

    private static void check(String name, String value) {
        Objects.requireNonNull(value, name);
        if (value.isBlank()) {
            throw new IllegalArgumentException(name + " must not be blank");
        }
        final int bytes = value.getBytes(java.nio.charset.StandardCharsets.UTF_8).length;
        if (bytes > MAX_FIELD_BYTES) {
            throw new IllegalArgumentException(name + " is " + bytes + " bytes of UTF-8, at most " + MAX_FIELD_BYTES);
        }
    }

    /**
     * {@return this library's protocol version and the layout's fingerprint with the given names}
     *
     * @param layout       the local pool's layout
     * @param modelId      the model (and revision) whose KV the pool holds
     * @param environment  the deployment environment
     * @param buildVersion the build of the serving code
     * @throws NullPointerException     if an argument is null
     * @throws IllegalArgumentException if a name is blank or longer than {@link #MAX_FIELD_BYTES} bytes of UTF-8
     */
    public static PeerIdentity of(KvLayout layout, String modelId, String environment, String buildVersion) {
        return new PeerIdentity(io.kvpool.transfer.wire.WireFormat.VERSION, layout.fingerprint(), modelId, environment, buildVersion);
    }

    /**
     * Compares this identity, the local one, with a peer's, field by field.
     *
     * @param remote the other side's identity
     * @return one line per differing field, {@code "environment: local=production remote=staging"}; empty if compatible
     */
    public List<String> mismatches(PeerIdentity remote) {
        final List<String> out = new ArrayList<>();
        if (protocolVersion != remote.protocolVersion) {
            out.add("protocol version: local=" + protocolVersion + " remote=" + remote.protocolVersion);
        }
        if (layoutFingerprint != remote.layoutFingerprint) {
            out.add("layout fingerprint: local=" + hex(layoutFingerprint) + " remote=" + hex(remote.layoutFingerprint));
        }
        if (!modelId.equals(remote.modelId)) {
            out.add("model: local=" + modelId + " remote=" + remote.modelId);
        }
        if (!environment.equals(remote.environment)) {
            out.add("environment: local=" + environment + " remote=" + remote.environment);
        }
        if (!buildVersion.equals(remote.buildVersion)) {
            out.add("build: local=" + buildVersion + " remote=" + remote.buildVersion);
        }
        return out;
    }

    /**
     * Refuses a peer whose identity differs from this one, the local one, in any field.
     *
     * @param remote the other side's identity
     * @throws PeerMismatchException naming every differing field with both values
     */
    public void requireCompatible(PeerIdentity remote) {
        final List<String> m = mismatches(remote);
        if (!m.isEmpty()) {
            throw new PeerMismatchException(this, remote, m);
        }
    }

    static String hex(long v) {
        return "0x" + Long.toHexString(v);
    }
}
