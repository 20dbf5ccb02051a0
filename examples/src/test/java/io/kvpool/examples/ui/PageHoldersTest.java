package io.kvpool.examples.ui;

import io.kvpool.Sequence;
import org.junit.jupiter.api.Test;

import java.nio.charset.StandardCharsets;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.stream.IntStream;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

/** {@link PageHolders}: what a role books about which request holds which pages, and how it reaches {@code /api/state}. */
class PageHoldersTest {

    @Test
    void booksASequencesBlockTable_andForgetsTheRequestOnRelease() {
        try (PoolScene scene = new PoolScene(16)) {
            scene.own(3); // so the sequence does not start at slot 0
            final Sequence seq = scene.sequence(10); // 3 pages
            final int[] table = new int[3];
            seq.copyBlockTable(table, 0);
            final PageHolders holders = new PageHolders();
            holders.hold(42, "alice", "decoding", seq);
            holders.hold(43, "bob", "receiving", 5);
            assertEquals(List.of(new PoolView.Holder(43, "bob", "receiving", 5, List.of()),
                new PoolView.Holder(42, "alice", "decoding", 3, IntStream.of(table).boxed().toList())), holders.snapshot(), "largest first");
            holders.release(43);
            assertEquals(List.of(42L), holders.snapshot().stream().map(PoolView.Holder::requestId).toList());
            holders.release(42);
            assertEquals(List.of(), holders.snapshot());
            assertEquals(0, holders.size());
        }
    }

    @Test
    void aSnapshotIsBounded_keepingTheLargestHolders() {
        final PageHolders holders = new PageHolders();
        for (int i = 1; i <= PageHolders.MAX_HOLDERS + 10; i++) {
            holders.hold(i, "t" + i, "receiving", i);
        }
        final List<PoolView.Holder> s = holders.snapshot();
        assertEquals(PageHolders.MAX_HOLDERS, s.size());
        assertEquals(PageHolders.MAX_HOLDERS + 10, s.get(0).pages());
        assertEquals(11, s.get(s.size() - 1).pages(), "the 10 smallest are left out");
        assertEquals(PageHolders.MAX_HOLDERS + 10, holders.size(), "left out of the answer, not forgotten");
    }

    @Test
    void holdersGoThroughStateJsonAndBack_andAreLeftOutWhenNone() {
        final Map<String, Long> c = new LinkedHashMap<>();
        c.put("free", 1L);
        final PoolView v = new PoolView("decode", 4, "OOFR", c,
            List.of(new PoolView.Holder(9007199254740991L, "a\"lice", "decoding", 2, List.of(1, 0)), new PoolView.Holder(5, "bob", "receiving", 1, List.of())));
        final String json = new String(StateJson.writePool(v), StandardCharsets.UTF_8);
        assertEquals("{\"role\":\"decode\",\"capacity\":4,\"pages\":\"OOFR\",\"counters\":{\"free\":1},\"holders\":["
            + "{\"request_id\":9007199254740991,\"tenant\":\"a\\\"lice\",\"phase\":\"decoding\",\"pages\":2,\"slots\":[1,0]},"
            + "{\"request_id\":5,\"tenant\":\"bob\",\"phase\":\"receiving\",\"pages\":1,\"slots\":[]}]}", json);
        assertEquals(v, StateJson.readPool(json.getBytes(StandardCharsets.UTF_8)));
        assertTrue(!new String(StateJson.writePool(new PoolView("p", 1, "F", Map.of())), StandardCharsets.UTF_8).contains("holders"));
    }

    @Test
    void refusesHoldersThatDoNotFitThePoolOrTheShape() {
        final IllegalArgumentException outside = assertThrows(IllegalArgumentException.class,
            () -> new PoolView("p", 2, "OO", Map.of(), List.of(new PoolView.Holder(1, "a", "decoding", 1, List.of(2)))));
        assertEquals("request 1 holds slot 2 of a pool of 2", outside.getMessage());
        assertThrows(IllegalArgumentException.class, () -> new PoolView.Holder(1, "a", "decoding", 1, List.of(0, 1)));
        final IllegalArgumentException shape = assertThrows(IllegalArgumentException.class, () -> StateJson.readPool(
            "{\"role\":\"p\",\"capacity\":1,\"pages\":\"O\",\"counters\":{},\"holders\":[{\"request_id\":1,\"tenant\":2,\"phase\":\"x\",\"pages\":1,\"slots\":[]}]}"
                .getBytes(StandardCharsets.UTF_8)));
        assertTrue(shape.getMessage().startsWith("pool.holders[0] needs an integer request_id, text tenant and phase"), shape.getMessage());
    }
}
