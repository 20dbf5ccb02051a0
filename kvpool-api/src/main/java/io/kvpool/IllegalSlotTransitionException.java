package io.kvpool;

/** An event that the slot state machine does not allow in the slot's current state. */
public final class IllegalSlotTransitionException extends IllegalStateException {
    private static final long serialVersionUID = 1L;

    private final int slot;
    private final long generation;
    private final SlotState state;
    private final SlotEvent event;

    IllegalSlotTransitionException(int slot, long word, SlotEvent event, String detail) {
        super((event == null ? "illegal access" : "illegal transition " + event) + " for slot " + slot + " (generation " + SlotStateMachine.generation(word)
            + ", state " + SlotStateMachine.state(word) + ", refs " + SlotStateMachine.refcount(word) + ")"
            + (detail == null ? "" : ": " + detail));
        this.slot = slot;
        this.generation = SlotStateMachine.generation(word);
        this.state = SlotStateMachine.state(word);
        this.event = event;
    }

    /** {@return the slot index} */
    public int slot() {
        return slot;
    }

    /** {@return the slot's generation when the event was refused} */
    public long generation() {
        return generation;
    }

    /** {@return the slot's state when the event was refused} */
    public SlotState state() {
        return state;
    }

    /** {@return the refused event} */
    public SlotEvent event() {
        return event;
    }
}
