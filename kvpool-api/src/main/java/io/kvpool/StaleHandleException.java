package io.kvpool;

/**
 * A page handle was refused: its generation no longer matches its slot, it was issued by another pool, or it names no
 * page of this pool. {@link #refusal()} says which, as the result code of the same name in {@link PageHandle} would.
 */
public final class StaleHandleException extends IllegalStateException {
    private static final long serialVersionUID = 1L;

    /** Why a handle was refused; each is the {@link PageHandle} result code of the same name. */
    public enum Refusal {
        /** {@link PageHandle#STALE}: the slot was freed (and maybe reused) since the handle was issued. */
        STALE,
        /** {@link PageHandle#FOREIGN}: another pool in this process issued it (e.g. prefill's handle used on decode). */
        FOREIGN,
        /** {@link PageHandle#INVALID}: no page of this pool has that slot. */
        INVALID
    }

    private final long handle;
    private final Refusal refusal;

    StaleHandleException(long handle, Refusal refusal, String message) {
        super(message);
        this.handle = handle;
        this.refusal = refusal;
    }

    /** {@return the refused handle} */
    public long handle() {
        return handle;
    }

    /** {@return why it was refused} */
    public Refusal refusal() {
        return refusal;
    }
}
