package io.kvpool.transfer;

import io.kvpool.KvLayout;

import java.util.ArrayList;
import java.util.List;
import java.util.Objects;

/**
 * What a peer says about itself when a link comes up, and what the other side checks before any page
 * moves, so that e.g. a production pool refuses a staging build. The version ranges must overlap (the link
 * speaks the highest version both share); layout, model and environment must be equal; the build may differ
 * (a progressive rollout mixes builds) unless a side asks for strict builds. {@link #mismatches} names each
 * difference with both values.
 *
 * @param minVersion        the oldest protocol version the peer's code speaks (this code: 1)
 * @param maxVersion        the newest (this code: 4); a version-1 peer's range is one version
 * @param layoutFingerprint {@link KvLayout#fingerprint()} of the peer's pool
 * @param modelId           the model (and revision) whose KV the pool holds, e.g. {@code "glm-4.6@r3"}
 * @param environment       the deployment environment, e.g. {@code "production"} or {@code "staging"}
 * @param buildVersion      the build of the serving code, e.g. a release tag or commit
 */
public record PeerIdentity(int minVersion, int maxVersion, long layoutFingerprint, String modelId, String environment,
                           String buildVersion) {

    /** Longest UTF-8 encoding accepted for each string field (the wire format's limit). */
    public static final int MAX_FIELD_BYTES = 256;

    /**
     * Validates the fields: a version range from 1 up, not empty; strings non-null, non-blank, at most
     * {@link #MAX_FIELD_BYTES} bytes of UTF-8.
     *
     * @throws NullPointerException     if a string field is null
     * @throws IllegalArgumentException if the version range is empty or starts below 1, or a string field is blank or
     *                                  too long
     */
    public PeerIdentity {
        if (minVersion > maxVersion) {
            throw new IllegalArgumentException("version range [" + minVersion + ", " + maxVersion + "] is empty");
        }
        if (minVersion < 1) { // a HELLO's range is what the peer speaks: no version below 1 was ever spoken
            throw new IllegalArgumentException("version range [" + minVersion + ", " + maxVersion + "] starts below 1");
        }
        check("modelId", modelId);
        check("environment", environment);
        check("buildVersion", buildVersion);
    }

    /**
     * An identity that speaks exactly one protocol version, as version-1 code did.
     *
     * @param protocolVersion   the one version spoken
     * @param layoutFingerprint {@link io.kvpool.KvLayout#fingerprint()} of the pool's layout
     * @param modelId           the model served, e.g. {@code "glm-4.6@r3"}
     * @param environment       the deployment environment, e.g. {@code "production"}
     * @param buildVersion      the build of the serving code
     * @throws NullPointerException     if a string field is null
     * @throws IllegalArgumentException if a string field is blank or too long for a HELLO
     */
    public PeerIdentity(int protocolVersion, long layoutFingerprint, String modelId, String environment, String buildVersion) {
        this(protocolVersion, protocolVersion, layoutFingerprint, modelId, environment, buildVersion);
    }

    /** {@return the newest protocol version the peer speaks, {@link #maxVersion()}} */
    public int protocolVersion() {
        return maxVersion;
    }

    /** {@return the range as {@code "[min,max]"}} */
    public String versions() {
        return "[" + minVersion + "," + maxVersion + "]";
    }

    /**
     * {@return this identity speaking only the versions in {@code [min, max]} (e.g. {@code (1, 1)}: as version-1 code)}
     *
     * @param min the oldest version spoken
     * @param max the newest version spoken
     * @throws IllegalArgumentException if {@code min > max}
     */
    public PeerIdentity withVersions(int min, int max) {
        return new PeerIdentity(min, max, layoutFingerprint, modelId, environment, buildVersion);
    }

    /**
     * The highest version both ranges hold. A link speaks it when this build's wire format writes it
     * (4 for this code); a range set by hand beyond that is announced up to it only, so the link settles on a
     * version both write, or is refused if the common versions are all beyond it.
     *
     * @param remote the other side's identity
     * @return the highest protocol version both ranges hold, or -1 if they do not overlap
     */
    public int commonVersion(PeerIdentity remote) {
        final int v = Math.min(maxVersion, remote.maxVersion);
        return v >= Math.max(minVersion, remote.minVersion) ? v : -1;
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
        return new PeerIdentity(io.kvpool.transfer.wire.WireFormat.MIN_VERSION, io.kvpool.transfer.wire.WireFormat.VERSION,
            layout.fingerprint(), modelId, environment, buildVersion);
    }

    /**
     * Compares this identity, the local one, with a peer's, field by field.
     *
     * @param remote the other side's identity
     * @return one line per differing field, {@code "environment: local=production remote=staging"}; empty if compatible
     *         (a differing build is allowed: see {@link #mismatches(PeerIdentity, boolean)})
     */
    public List<String> mismatches(PeerIdentity remote) {
        return mismatches(remote, false);
    }

    /**
     * Compares two identities field by field.
     *
     * @param remote      the other side's identity
     * @param strictBuild whether a differing build is a mismatch too
     * @return one line per differing field, {@code "environment: local=production remote=staging"}, or
     *         {@code "protocol versions: local=[1,2] remote=[3,3]"} for ranges with no version in common; empty if compatible
     */
    public List<String> mismatches(PeerIdentity remote, boolean strictBuild) {
        return mismatches(remote, strictBuild, Integer.MAX_VALUE);
    }

    /**
     * {@link #mismatches(PeerIdentity, boolean)} with each name longer than {@code maxChars} characters cut to its head
     * and tail around "..": a REFUSE carries at most {@link #MAX_FIELD_BYTES} bytes, and must still name both values.
     */
    List<String> mismatches(PeerIdentity remote, boolean strictBuild, int maxChars) {
        final List<String> out = new ArrayList<>();
        if (commonVersion(remote) < 0) {
            out.add("protocol versions: local=" + versions() + " remote=" + remote.versions());
        }
        if (layoutFingerprint != remote.layoutFingerprint) {
            out.add("layout fingerprint: local=" + hex(layoutFingerprint) + " remote=" + hex(remote.layoutFingerprint));
        }
        if (!modelId.equals(remote.modelId)) {
            out.add("model: local=" + cut(modelId, maxChars) + " remote=" + cut(remote.modelId, maxChars));
        }
        if (!environment.equals(remote.environment)) {
            out.add("environment: local=" + cut(environment, maxChars) + " remote=" + cut(remote.environment, maxChars));
        }
        if (strictBuild && !buildVersion.equals(remote.buildVersion)) {
            out.add("build: local=" + cut(buildVersion, maxChars) + " remote=" + cut(remote.buildVersion, maxChars));
        }
        return out;
    }

    /**
     * Refuses a peer whose identity differs where a link always refuses: no protocol version in common, or another
     * layout, model or environment. A differing build is accepted (see {@link #mismatches(PeerIdentity, boolean)}).
     * Identities alone do not show one more refusal: common versions that this build's wire format cannot write.
     *
     * @param remote the other side's identity
     * @throws PeerMismatchException naming every differing field with both values
     */
    public void requireCompatible(PeerIdentity remote) {
        final List<String> m = mismatches(remote, false);
        if (!m.isEmpty()) {
            throw new PeerMismatchException(this, remote, m);
        }
    }

    /** @return {@code s}, or its first and last {@code max / 2 - 1} code points around ".." if it has more than {@code max} */
    private static String cut(String s, int max) {
        if (s.codePointCount(0, s.length()) <= max) {
            return s;
        }
        final int keep = Math.max(1, max / 2 - 1); // whole code points: never half a surrogate pair
        return s.substring(0, s.offsetByCodePoints(0, keep)) + ".." + s.substring(s.offsetByCodePoints(s.length(), -keep));
    }

    static String hex(long v) {
        return "0x" + Long.toHexString(v);
    }
}
