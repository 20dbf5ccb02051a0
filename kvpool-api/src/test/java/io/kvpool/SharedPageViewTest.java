package io.kvpool;

import org.junit.jupiter.api.Test;

import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;

import static org.junit.jupiter.api.Assertions.*;

/**
 * A page's segment is read-only while the page is shared (another reference holds it, or it holds a published
 * prefix), and writable once its holder has it alone: a write can only reach KV nobody else reads. With
 * {@link Safeguard#SHARED_PAGE_READ_ONLY} off the same write goes through and changes the other holder's KV.
 */
class SharedPageViewTest {

    private static final int[] PROMPT = {1, 2, 3, 4, 5, 6, 7, 8, 9};

    private static void write(MemorySegment page) {
        page.set(ValueLayout.JAVA_BYTE, 0, (byte) 0x5A);
    }

    @Test
    void anAttachedPrefixPageIsReadOnlyAndTheSequencesOwnPagesAreNot() {
        try (KvPool pool = TestPools.pool(8)) {
            final Sequence publisher = pool.admit(PROMPT, 0, 7).sequence();
            publisher.append(PROMPT.length);
            TokenTags.writeSequence(publisher, 1, 0, PROMPT.length);
            publisher.publish(PROMPT, 7);
            final Sequence reader = pool.admit(PROMPT, 4, 7).sequence();
            assertEquals(8, reader.tokenCount(), "two pages attached");
            assertTrue(reader.page(0).isReadOnly());
            assertThrows(IllegalArgumentException.class, () -> write(reader.page(1)));
            reader.append(1);
            assertFalse(reader.page(2).isReadOnly(), "its own new page");
            write(reader.page(2));
            assertFalse(publisher.page(2).isReadOnly(), "the publisher's partial last page is its own");
            reader.close();
            assertEquals(1, pool.refcountOfSlot(publisher.pageIndex(0)), "the publisher holds page 0 alone again");
            assertTrue(publisher.page(0).isReadOnly(), "a published page is immutable for its publisher too");
            publisher.close();
            // the cached pages are FREE now; an attach revives them for one holder, still published: read-only
            final Sequence revived = pool.admit(PROMPT, 4, 7).sequence();
            assertEquals(8, revived.tokenCount(), "both pages revived from the cache");
            assertEquals(1, pool.refcountOfSlot(revived.pageIndex(0)));
            assertTrue(revived.page(0).isReadOnly());
            revived.close();
        }
    }

    @Test
    void aForksPagesAreReadOnlyUntilTheyAreNoLongerShared() {
        try (KvPool pool = TestPools.pool(8)) {
            final Sequence parent = pool.admit(6, 2).sequence();
            parent.append(6);
            final Sequence child = parent.fork();
            assertTrue(child.page(1).isReadOnly());
            assertTrue(parent.page(1).isReadOnly(), "the parent's partial page is shared with the child");
            child.append(1); // copy-on-write: the child's page 1 is a private copy now
            assertFalse(child.page(1).isReadOnly());
            assertFalse(parent.page(1).isReadOnly(), "the parent holds its page 1 alone again");
            assertTrue(parent.page(0).isReadOnly());
            child.close();
            assertFalse(parent.page(0).isReadOnly(), "not shared any more, never published");
            parent.close();
        }
    }

    @Test
    void aPagePinnedForAReceiveIsWritable() {
        try (KvPool pool = TestPools.pool(8)) {
            final Sequence s = pool.admit(8, 0).sequence();
            pool.handles().appendPinned(s, 8);
            assertFalse(s.page(0).isReadOnly());
            write(s.page(1));
            pool.handles().commitReceiveAll(new long[] {s.pageHandle(0), s.pageHandle(1)}, 0, 2);
            s.close();
        }
    }

    @Test
    void withTheSafeguardOffAWriteThroughASharedPageChangesTheOtherHoldersKv() {
        try (KvPool pool = TestPools.builder(8).unsafeDisable(Safeguard.SHARED_PAGE_READ_ONLY).build()) {
            final Sequence parent = pool.admit(6, 2).sequence();
            parent.append(6);
            TokenTags.writeSequence(parent, 1, 0, 6);
            final Sequence child = parent.fork();
            assertFalse(child.page(0).isReadOnly());
            child.page(0).fill((byte) 0x42);
            assertNotEquals(TokenTags.tag(1, 0), TokenTags.readSequence(parent, 0), "the parent's KV was overwritten");
            child.close();
            parent.close();
        }
    }
}
