package io.kvpool.examples.server.role;

import io.kvpool.KvPool;
import io.kvpool.examples.server.Await;
import io.kvpool.examples.server.ServerTests;
import io.kvpool.examples.server.config.ServerConfig;
import io.kvpool.examples.server.echo.EchoTokenizer;
import io.kvpool.examples.server.link.LinkSource;
import io.kvpool.transfer.shm.MappedPageStorage;
import io.kvpool.transfer.shm.ShmListener;
import io.kvpool.transfer.shm.ShmTransport;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.List;
import java.util.Set;
import java.util.concurrent.TimeUnit;

import static org.junit.jupiter.api.Assertions.*;

/**
 * Two prefill processes linked to one decode (blue/green, or two routers' prefills): decode starts each transfer on
 * the link to the prefill engine the request names, so a request never receives the KV that the other prefill offers
 * under the same id, and refuses a call that names none. The control names the other engine, whose link (decode's
 * newest) is where every call went before instance ids: the harness then reads the other request's KV.
 */
@Timeout(value = 60, unit = TimeUnit.SECONDS)
class TwoPrefillsOneDecodeTest {

    private final ServerConfig cfg = ServerTests.small().build();
    private Path dir;
    private DecodeRole decode;
    private PrefillRole first;
    private PrefillRole second;

    @BeforeEach
    void linkTwoPrefillsToOneDecode() throws Exception {
        dir = Files.createTempDirectory("kvpool-two-prefills");
        final Path socket = dir.resolve("transfer.sock");
        final KvPool decodePool = RoleParts.decodePool(cfg, (l, n) -> MappedPageStorage.create(dir.resolve("decode.pool"), l, n));
        final ShmListener listener = ShmTransport.listen(socket, (MappedPageStorage) decodePool.storage());
        decode = new DecodeRole(decodePool, RoleParts.receiver(cfg, decodePool), LinkSource.shm(listener), null, cfg.tokenDelay(),
            DecodeRole.reservationTtl(cfg), () -> { });
        first = prefill(socket);
        Await.until(() -> decode.status().linked().size() == 1, Duration.ofSeconds(20), () -> "first prefill: " + decode.status());
        second = prefill(socket); // the newest link: where a decode call naming no engine goes
        Await.until(() -> decode.status().linked().size() == 2 && second.linkUp(), Duration.ofSeconds(20),
            () -> "second prefill: " + decode.status());
    }

    private PrefillRole prefill(Path socket) {
        final KvPool pool = RoleParts.prefillPool(cfg);
        return new PrefillRole(pool, RoleParts.sender(cfg, pool), () -> ShmTransport.connect(socket), cfg.reconnectDelay(),
            cfg.transferTimeout());
    }

    @AfterEach
    void close() throws Exception {
        for (AutoCloseable c : new AutoCloseable[] {first, second, decode}) {
            if (c != null) {
                c.close();
            }
        }
        Files.deleteIfExists(dir.resolve("transfer.sock"));
        Files.deleteIfExists(dir.resolve("decode.pool"));
        Files.deleteIfExists(dir);
    }

    @Test
    void eachRoleReportsItsEngineAndTheEnginesLinkedToIt() {
        assertNotEquals(first.instance(), second.instance());
        assertEquals(Set.of(first.instance(), second.instance()), Set.copyOf(decode.status().linked()));
        assertEquals(first.instance(), first.status().instance());
        assertEquals(List.of(decode.status().instance()), first.status().linked());
        assertNotEquals(0, decode.status().instance());
    }

    @Test
    void aRequestGetsTheKvOfThePrefillItNamesWhenAnotherOffersTheSameId() throws Exception {
        assertEquals("alice says hi", received(7, first.instance()), "the request's own KV, from the prefill it names");
    }

    @Test
    void onTheOtherEnginesLinkTheRequestReadsTheOtherRequestsKv() throws Exception {
        // the control: the same two offers, the transfer on the newest link, as decode chose before instance ids
        assertEquals("bobby says hi", received(8, second.instance()), "the newest link's offer: the other request's KV");
    }

    @Test
    void aCallNamingNoEngineIsRefusedWhileSeveralAreLinked() throws Exception {
        // a router of a build before instance ids, or one whose probe has not read its prefill yet: never a guess
        final Rejection reserve = decode.reserve(13, "alice", 4, 2);
        assertNotNull(reserve);
        assertEquals(Rejection.Reason.UNAVAILABLE, reserve.reason());
        assertTrue(reserve.message().contains("the call names none"), reserve.message());
        final DecodeCall.Admitted a = decode.start(14, "alice", 4, 2).awaitAdmission(Duration.ofSeconds(10));
        assertFalse(a.admitted());
        assertTrue(a.rejection().message().contains("the call names none"), a.rejection().message());
        assertTrue(a.rejection().message().contains(RoleStatus.hex(first.instance())), a.rejection().message());

        second.close(); // one engine left: a call naming none takes its link, as with one prefill always
        Await.until(() -> decode.status().linked().size() == 1, Duration.ofSeconds(20), () -> "green gone: " + decode.status());
        final List<byte[]> alice = EchoTokenizer.encode("alice says hi");
        assertNull(first.prefill(15, "alice", alice));
        final DecodeCall call = decode.start(15, "alice", alice.size(), 2);
        assertEquals(DecodeCall.Admitted.YES, call.awaitAdmission(Duration.ofSeconds(10)));
        assertTrue(call.awaitTransfer(Duration.ofSeconds(10)).committed());
        assertEquals("alice says hi", call.generate(2, token -> { }).kv().text());
    }

    /**
     * Alice's request at the first prefill and bob's at the second, under one id and of one length (two routers that
     * drew the same id); decode receives for alice's, naming {@code instance}. @return the text decode read from the KV
     */
    private String received(long id, long instance) throws Exception {
        final List<byte[]> alice = EchoTokenizer.encode("alice says hi");
        final List<byte[]> bob = EchoTokenizer.encode("bobby says hi");
        assertEquals(alice.size(), bob.size(), "one length: a transfer of the wrong request would otherwise fail its length check");
        assertNull(first.prefill(id, "alice", alice));
        assertNull(second.prefill(id, "bob", bob));
        final DecodeCall call = decode.start(id, "alice", alice.size(), 2, instance);
        assertEquals(DecodeCall.Admitted.YES, call.awaitAdmission(Duration.ofSeconds(10)));
        final DecodeCall.TransferOutcome outcome = call.awaitTransfer(Duration.ofSeconds(10));
        assertTrue(outcome.committed(), outcome::toString);
        final DecodeCall.Generation g = call.generate(2, token -> { });
        first.abort(id, "test over"); // the offer the transfer did not take
        second.abort(id, "test over");
        return g.kv().text();
    }

    @Test
    void aRequestNamingAPrefillThatIsNotLinkedIsRefusedRetryablyNamingTheLinks() throws Exception {
        final long elsewhere = 0x1234L;
        final Rejection reserve = decode.reserve(9, "alice", 4, 2, elsewhere);
        assertNotNull(reserve, "reserved for a prefill decode cannot receive from");
        assertEquals(Rejection.Reason.UNAVAILABLE, reserve.reason());
        assertTrue(reserve.message().contains("prefill instance 0000000000001234"), reserve.message());
        assertTrue(reserve.message().contains(RoleStatus.hex(first.instance())) && reserve.message().contains(RoleStatus.hex(second.instance())),
            reserve.message());
        final DecodeCall.Admitted a = decode.start(10, "alice", 4, 2, elsewhere).awaitAdmission(Duration.ofSeconds(10));
        assertFalse(a.admitted());
        assertEquals(Rejection.Reason.UNAVAILABLE, a.rejection().reason());
        assertTrue(a.rejection().message().contains("prefill instance 0000000000001234"), a.rejection().message());
        assertNull(decode.reserve(11, "alice", 4, 2, second.instance()), "a linked prefill's request is reserved");
        decode.unreserve(11, "test over");
        Await.until(() -> decode.pool().snapshot().inUse() == 0, Duration.ofSeconds(10), () -> "decode pool: " + decode.pool());
    }

    @Test
    void aReservationMadeNamingOneEngineServesTheCallNamingTheEngineThatTookTheOffer() throws Exception {
        // behind a balancer the router's probe read the first engine, and the second took the prefill call (its answer
        // names it); the first holds another request's offer under the same id and length
        final List<byte[]> alice = EchoTokenizer.encode("alice says hi");
        final List<byte[]> bob = EchoTokenizer.encode("bobby says hi");
        assertNull(decode.reserve(12, "alice", alice.size(), 2, first.instance()));
        assertEquals(1, decode.pendingWork(), "one reservation held");
        assertNull(second.prefill(12, "alice", alice));
        assertNull(first.prefill(12, "bob", bob));
        final DecodeCall call = decode.start(12, "alice", alice.size(), 2, second.instance());
        assertEquals(DecodeCall.Admitted.YES, call.awaitAdmission(Duration.ofSeconds(10)));
        assertTrue(call.awaitTransfer(Duration.ofSeconds(10)).committed());
        assertEquals("alice says hi", call.generate(2, token -> { }).kv().text(), "read where it was offered, not where reserved");
        first.abort(12, "test over");
        Await.until(() -> decode.pendingWork() == 0, Duration.ofSeconds(10), () -> "the reservation was taken: " + decode.status());
    }

    @Test
    void aReservationIsNotTakenByACallOfAnotherTenantOrSize() throws Exception {
        final List<byte[]> alice = EchoTokenizer.encode("alice says hi");
        assertNull(decode.reserve(16, "alice", alice.size(), 2, first.instance()));
        final DecodeCall.Admitted other = decode.start(16, "bob", alice.size(), 2, first.instance())
            .awaitAdmission(Duration.ofSeconds(10));
        assertFalse(other.admitted());
        assertTrue(other.rejection().message().contains("reserved here for another request"), other.rejection().message());
        decode.unreserve(16, "test over");
    }

    @Test
    void aStartRefusedWhileDecodeDrainsEndsTheNamedEnginesOfferAtOnce() throws Exception {
        final List<byte[]> alice = EchoTokenizer.encode("alice says hi");
        assertNull(first.prefill(17, "alice", alice));
        assertEquals(1, first.activeTransfers());
        decode.beginDrain();
        final DecodeCall.Admitted a = decode.start(17, "alice", alice.size(), 2, first.instance()).awaitAdmission(Duration.ofSeconds(10));
        assertFalse(a.admitted());
        assertTrue(a.rejection().message().contains("stopping"), a.rejection().message());
        // the descriptor timeout is 5 s here: a second or two means decode's CANCEL ended it
        Await.until(() -> first.activeTransfers() == 0, Duration.ofSeconds(2), () -> "the offer is still held: " + first.status());
    }
}
