package io.kvpool;

/** A page handle was refused: its generation no longer matches its slot, or it names no page of this pool. */
public final class StaleHandleException extends IllegalStateException {
    private static final long serialVersionUID = 1L;

    private final long handle;

    StaleHandleException(long handle, String message) {
        super(message);
        this.handle = handle;
    }

    /** {@return the refused handle} */
    public long handle() {
        return handle;
    }
}
