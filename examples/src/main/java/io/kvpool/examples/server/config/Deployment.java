package io.kvpool.examples.server.config;

import java.util.Objects;

/**
 * Who this process says it is to the other roles and the router: what the KV link's handshake announces and what
 * {@code GET /internal/status} reports. Environment, model and layout must be equal on every role and the router; a
 * build may differ (a rolling upgrade), unless {@code --strict-build} says it may not.
 *
 * @param environment the deployment environment ({@code --environment}, default {@value #DEFAULT_ENVIRONMENT})
 * @param model       the model id ({@code --model}, default {@value #DEFAULT_MODEL})
 * @param buildTag    a deployment's own name for this build (an image tag, a commit), or {@code null}
 *                    ({@code --build-tag}): announced after the jar's version, as in {@code kvpool-examples/1.0+abc123}
 * @param strictBuild whether a role or KV peer of another build is refused ({@code --strict-build}); by default it is
 *                    served, logged once and shown ({@code kvpool_peer_info}, {@code preflight})
 */
public record Deployment(String environment, String model, String buildTag, boolean strictBuild) {

    /** The environment every role announces unless {@code --environment} names another. */
    public static final String DEFAULT_ENVIRONMENT = "example";
    /** The model id every role announces unless {@code --model} names another: the example's echo model. */
    public static final String DEFAULT_MODEL = "kvpool-echo@1";
    /** This jar's build: {@code kvpool-examples/} and the jar's version ({@code dev} outside a jar). */
    public static final String JAR_BUILD = "kvpool-examples/"
        + Objects.requireNonNullElse(Deployment.class.getPackage().getImplementationVersion(), "dev");
    /** The defaults: environment "example", the echo model, no build tag, builds may differ. */
    public static final Deployment DEFAULT = new Deployment(DEFAULT_ENVIRONMENT, DEFAULT_MODEL, null, false);

    /** @throws IllegalArgumentException for a name out of bounds, naming the option and the value */
    public Deployment {
        Objects.requireNonNull(environment, "environment");
        Objects.requireNonNull(model, "model");
        if (!environment.matches("[A-Za-z0-9_.-]{1,64}")) {
            throw new IllegalArgumentException("--environment must be 1..64 of [A-Za-z0-9_.-], was '" + environment + "'");
        }
        if (!model.matches("[A-Za-z0-9_.:@/-]{1,128}")) {
            throw new IllegalArgumentException("--model must be 1..128 of [A-Za-z0-9_.:@/-], was '" + model + "'");
        }
        if (buildTag != null && !buildTag.matches("[A-Za-z0-9_.-]{1,64}")) {
            throw new IllegalArgumentException("--build-tag must be 1..64 of [A-Za-z0-9_.-], was '" + buildTag + "'");
        }
    }

    /** @return the build this process announces: {@link #JAR_BUILD}, then {@code +} and the build tag if there is one */
    public String build() {
        return buildTag == null ? JAR_BUILD : JAR_BUILD + "+" + buildTag;
    }
}
