package io.kvpool.examples.server.link;

import java.util.Objects;

/** Holds the backend of {@code --device cuda} for {@link DeviceBackend#current()}. */
final class CurrentDevice {

    private static volatile DeviceBackend backend = DeviceBackend.CUDA;

    private CurrentDevice() {
    }

    static DeviceBackend get() {
        return backend;
    }

    static void set(DeviceBackend b) {
        backend = Objects.requireNonNull(b, "backend");
    }
}
