package io.kvpool.micrometer;

import io.kvpool.transfer.FailureReason;
import io.kvpool.transfer.IncomingTransfer;
import io.kvpool.transfer.ReceiverMetrics;
import io.kvpool.transfer.SenderMetrics;
import io.kvpool.transfer.TransferReceiver;
import io.kvpool.transfer.TransferSender;
import io.micrometer.core.instrument.FunctionTimer;
import io.micrometer.core.instrument.Meter;
import io.micrometer.core.instrument.MeterRegistry;
import io.micrometer.core.instrument.Tags;
import io.micrometer.core.instrument.TimeGauge;
import io.micrometer.core.instrument.simple.SimpleMeterRegistry;
import org.junit.jupiter.api.Test;

import java.lang.ref.Reference;
import java.lang.ref.WeakReference;
import java.util.Locale;
import java.util.Map;
import java.util.TreeSet;
import java.util.concurrent.TimeUnit;
import java.util.function.ToLongFunction;

import static org.junit.jupiter.api.Assertions.*;

/** The receiver's and the sender's binders on a {@link SimpleMeterRegistry}, over a simulated network. */
class TransferMeterBindersTest {

    static Map<String, Meter> bindReceiver(SimRig rig, MeterRegistry registry) {
        new TransferReceiverMeterBinder(rig.receiver, Tags.of("pool", "decode")).bindTo(registry);
        return Meters.byKey(registry, "pool", "decode");
    }

    static Map<String, Meter> bindSender(SimRig rig, MeterRegistry registry) {
        new TransferSenderMeterBinder(rig.sender, Tags.of("pool", "prefill")).bindTo(registry);
        return Meters.byKey(registry, "pool", "prefill");
    }

    @Test
    void everyTransferMeterIsRegisteredWithADescriptionAndTheCommonTags() {
        try (SimRig rig = new SimRig()) {
            final SimpleMeterRegistry registry = new SimpleMeterRegistry();
            final Map<String, Meter> rx = bindReceiver(rig, registry);
            final Map<String, Meter> tx = bindSender(rig, registry);
            final TreeSet<String> expected = new TreeSet<>();
            expected.add("kvpool.transfer.started");
            expected.add("kvpool.transfer.committed");
            for (FailureReason r : FailureReason.values()) {
                expected.add("kvpool.transfer.failures{reason=" + r.name().toLowerCase(Locale.ROOT) + "}");
            }
            for (String o : new String[] {"drained", "timeout", "error"}) {
                expected.add("kvpool.transfer.deferred.releases{outcome=" + o + "}");
            }
            expected.add("kvpool.transfer.deferred.held");
            expected.add("kvpool.transfer.quarantined");
            expected.add("kvpool.transfer.quarantine.releases");
            for (String proof : new String[] {"sender", "revoked", "link_torn_down", "none"}) {
                expected.add("kvpool.transfer.released.ranks{proof=" + proof + "}");
            }
            expected.add("kvpool.transfer.deferred.hold");
            expected.add("kvpool.transfer.deferred.hold.max");
            for (String why : new String[] {"before_registration", "stale_generation", "duplicate", "wrong_peer", "inconsistent", "late"}) {
                expected.add("kvpool.transfer.acks.ignored{reason=" + why + "}");
            }
            expected.add("kvpool.transfer.cancels.sent");
            expected.add("kvpool.transfer.allocation.faults");
            expected.add("kvpool.transfer.links.retired");
            expected.add("kvpool.peer.info{build=build-1}");
            expected.add("kvpool.peer.links");
            expected.add("kvpool.peer.heartbeat.failures");
            expected.add("kvpool.peer.refused");
            expected.add("kvpool.peer.frames.malformed");
            expected.add("kvpool.peer.hellos.duplicate");
            assertEquals(expected, rx.keySet());
            final TreeSet<String> expectedTx = new TreeSet<>(java.util.List.of("kvpool.transfer.sender.offers",
                "kvpool.transfer.sender.completed", "kvpool.transfer.sender.drained",
                "kvpool.transfer.sender.writes.posted", "kvpool.transfer.sender.writes.failed", "kvpool.transfer.sender.forced.cancels",
                "kvpool.transfer.sender.descriptors.duplicate", "kvpool.transfer.sender.descriptors.timeout",
                "kvpool.transfer.sender.cancels.received{outcome=ended}",
                "kvpool.transfer.sender.cancels.received{outcome=ignored}", "kvpool.transfer.sender.cancels.received{outcome=retiring}",
                "kvpool.peer.info{build=build-1}", "kvpool.peer.links", "kvpool.peer.heartbeat.failures", "kvpool.peer.refused",
                "kvpool.peer.frames.malformed", "kvpool.peer.hellos.duplicate"));
            for (FailureReason r : FailureReason.values()) {
                expectedTx.add("kvpool.transfer.sender.failures{reason=" + r.name().toLowerCase(Locale.ROOT) + "}");
            }
            assertEquals(expectedTx, tx.keySet());
            assertEquals(rx.size() + tx.size(), registry.getMeters().size(), "every meter carries the common tag");
            for (Map<String, Meter> meters : java.util.List.of(rx, tx)) {
                meters.forEach((key, m) -> {
                    assertNotNull(m.getId().getDescription(), key);
                    assertFalse(m.getId().getDescription().isBlank(), key);
                });
            }
            assertEquals(Meter.Type.GAUGE, rx.get("kvpool.transfer.deferred.held").getId().getType());
            assertEquals(Meter.Type.GAUGE, rx.get("kvpool.transfer.quarantined").getId().getType());
            assertInstanceOf(FunctionTimer.class, rx.get("kvpool.transfer.deferred.hold"));
            assertInstanceOf(TimeGauge.class, rx.get("kvpool.transfer.deferred.hold.max"));
            assertEquals(Meter.Type.COUNTER, rx.get("kvpool.transfer.failures{reason=aborted}").getId().getType());
            tx.forEach((key, m) -> assertEquals(key.startsWith("kvpool.peer.info") || key.equals("kvpool.peer.links")
                ? Meter.Type.GAUGE : Meter.Type.COUNTER, m.getId().getType(), key));
            assertEquals(Meter.Type.COUNTER, rx.get("kvpool.peer.heartbeat.failures").getId().getType());
            assertEquals(Meter.Type.GAUGE, rx.get("kvpool.peer.info{build=build-1}").getId().getType());
        }
    }

    @Test
    void metersFollowACommittedTransferAndAnAbortedOneThatDrains() {
        try (SimRig rig = new SimRig()) {
            final SimpleMeterRegistry registry = new SimpleMeterRegistry();
            final Map<String, Meter> rx = bindReceiver(rig, registry);
            final Map<String, Meter> tx = bindSender(rig, registry);

            final IncomingTransfer ok = rig.transfer(1, 10); // 3 pages
            rig.run(200);
            assertEquals(IncomingTransfer.State.COMMITTED, ok.state(), ok::toString);
            ok.sequence().close();
            assertEquals(1, Meters.value(rx.get("kvpool.transfer.started")));
            assertEquals(1, Meters.value(rx.get("kvpool.transfer.committed")));
            assertEquals(1, Meters.value(tx.get("kvpool.transfer.sender.completed")));
            assertEquals(3, Meters.value(tx.get("kvpool.transfer.sender.writes.posted")));

            final IncomingTransfer aborted = rig.transfer(2, 10);
            rig.run(1); // the descriptor may be out; the writes may be in flight
            assertTrue(rig.receiver.abort(aborted, "client went away"));
            assertEquals(3, Meters.value(rx.get("kvpool.transfer.deferred.held")), "the aborted transfer's pages are held");
            rig.run(200);
            assertEquals(IncomingTransfer.State.RELEASED, aborted.state(), aborted::toString);
            assertEquals(2, Meters.value(rx.get("kvpool.transfer.started")));
            assertEquals(1, Meters.value(rx.get("kvpool.transfer.committed")));
            assertEquals(1, Meters.value(rx.get("kvpool.transfer.failures{reason=aborted}")));
            assertEquals(0, Meters.value(rx.get("kvpool.transfer.failures{reason=checksum_mismatch}")));
            assertEquals(1, Meters.value(rx.get("kvpool.transfer.deferred.releases{outcome=drained}")));
            assertEquals(0, Meters.value(rx.get("kvpool.transfer.deferred.held")), "freed after the sender's DRAINED");
            assertEquals(1, Meters.value(rx.get("kvpool.transfer.released.ranks{proof=sender}")), "its one rank, proven by the sender");
            assertEquals(0, Meters.value(rx.get("kvpool.transfer.released.ranks{proof=none}")));
            final FunctionTimer hold = (FunctionTimer) rx.get("kvpool.transfer.deferred.hold");
            assertEquals(1, hold.count());
            final ReceiverMetrics rm = rig.receiver.metrics();
            assertTrue(rm.holdNanosTotal() > 0, "the simulated clock moved while the pages were held");
            assertEquals(rm.holdNanosTotal(), hold.totalTime(TimeUnit.NANOSECONDS), 1.0);
            assertEquals(rm.holdNanosMax(), ((TimeGauge) rx.get("kvpool.transfer.deferred.hold.max")).value(TimeUnit.NANOSECONDS), 1.0);
            assertEquals(1, Meters.value(tx.get("kvpool.transfer.sender.drained")));

            everyMeterReadsItsGetter(rx, rm);
            final SenderMetrics sm = rig.sender.metrics();
            final Map<String, ToLongFunction<SenderMetrics>> senderGetters = new java.util.HashMap<>();
            senderGetters.put("kvpool.transfer.sender.offers", SenderMetrics::offered);
            senderGetters.put("kvpool.transfer.sender.completed", SenderMetrics::completed);
            senderGetters.put("kvpool.transfer.sender.drained", SenderMetrics::drainedSent);
            senderGetters.put("kvpool.transfer.sender.writes.posted", SenderMetrics::writesPosted);
            senderGetters.put("kvpool.transfer.sender.writes.failed", SenderMetrics::writesFailed);
            senderGetters.put("kvpool.transfer.sender.forced.cancels", SenderMetrics::forcedCancels);
            senderGetters.put("kvpool.transfer.sender.descriptors.duplicate", SenderMetrics::duplicateDescriptors);
            senderGetters.put("kvpool.transfer.sender.descriptors.timeout", SenderMetrics::descriptorTimeouts);
            senderGetters.put("kvpool.transfer.sender.cancels.received{outcome=ended}", SenderMetrics::cancelled);
            senderGetters.put("kvpool.transfer.sender.cancels.received{outcome=ignored}", SenderMetrics::cancelsIgnored);
            senderGetters.put("kvpool.transfer.sender.cancels.received{outcome=retiring}", SenderMetrics::linksRetired);
            for (FailureReason r : FailureReason.values()) {
                senderGetters.put("kvpool.transfer.sender.failures{reason=" + r.name().toLowerCase(Locale.ROOT) + "}", m -> m.failures(r));
            }
            senderGetters.forEach((key, getter) -> assertEquals(getter.applyAsLong(sm), Meters.value(tx.get(key)), key));
        }
    }

    @Test
    void cancelCountersFollowARequestDecodeRefusesAndACancelNamingNoOffer() {
        try (SimRig rig = new SimRig()) {
            final SimpleMeterRegistry registry = new SimpleMeterRegistry();
            final Map<String, Meter> rx = bindReceiver(rig, registry);
            final Map<String, Meter> tx = bindSender(rig, registry);
            final io.kvpool.Sequence s = rig.prefill.admit(10, 0).sequence();
            s.append(10);
            io.kvpool.transfer.testkit.Kv.write(s, 5);
            rig.sender.offer(5, s);
            s.close();
            // decode cannot admit 10 + 10,000 tokens: REJECTED before any descriptor, and the sender is told (CANCEL)
            final IncomingTransfer refused = rig.receiver.start(5, 10, 10_000, rig.peer);
            assertEquals(IncomingTransfer.State.REJECTED, refused.state());
            rig.run(50);
            assertEquals(1, Meters.value(rx.get("kvpool.transfer.cancels.sent")));
            assertEquals(1, Meters.value(tx.get("kvpool.transfer.sender.cancels.received{outcome=ended}")));
            assertEquals(1, Meters.value(tx.get("kvpool.transfer.sender.offers")));
            assertEquals(1, Meters.value(tx.get("kvpool.transfer.sender.failures{reason=rejected}")), "the refused offer ended, REJECTED");
            assertEquals(0, Meters.value(tx.get("kvpool.transfer.sender.cancels.received{outcome=ignored}")));
            assertEquals(0, rig.sender.activeTransfers(), "the offer ended at once");
            rig.receiver.start(77, 10, 10_000, rig.peer); // not offered: kept, since prefill may still offer it
            rig.run(50);
            assertEquals(2, Meters.value(rx.get("kvpool.transfer.cancels.sent")));
            assertEquals(0, Meters.value(tx.get("kvpool.transfer.sender.cancels.received{outcome=ignored}")));
            rig.net.advance(java.time.Duration.ofSeconds(61).toNanos()); // past the sender's descriptor timeout, 60 s
            rig.sender.doWork();
            assertEquals(1, Meters.value(tx.get("kvpool.transfer.sender.cancels.received{outcome=ignored}")),
                "no offer came for it: counted as ignored");
        }
    }

    @Test
    void peerInfoHasARowPerBuildUpAndFollowsABuildThatComesAndGoes() {
        try (SimRig rig = new SimRig()) {
            final SimpleMeterRegistry registry = new SimpleMeterRegistry();
            new TransferReceiverMeterBinder(rig.receiver, Tags.of("pool", "decode")).bindTo(registry);
            assertEquals(1, Meters.value(Meters.byKey(registry, "pool", "decode").get("kvpool.peer.info{build=build-1}")));
            assertEquals(1, Meters.value(Meters.byKey(registry, "pool", "decode").get("kvpool.peer.links")));
            // a second prefill, on another build (a rollout), links up
            final io.kvpool.KvPool pool2 = io.kvpool.transfer.testkit.Kv.pool(8);
            final TransferSender other = TransferSender.builder(pool2, io.kvpool.transfer.PeerIdentity.of(
                io.kvpool.transfer.testkit.Kv.LAYOUT, "test-model@r1", "test", "build-2")).clock(rig.net.clock()).build();
            final io.kvpool.transfer.sim.SimLink[] l = rig.net.connect("prefill-2", "decode", true);
            other.addPeer(l[0]);
            rig.receiver.addPeer(l[1]);
            for (int i = 0; i < 20; i++) {
                rig.run(1);
                other.doWork();
            }
            assertEquals(2, Meters.value(Meters.byKey(registry, "pool", "decode").get("kvpool.peer.links")), "the read refreshes the rows");
            Map<String, Meter> rx = Meters.byKey(registry, "pool", "decode");
            assertEquals(1, Meters.value(rx.get("kvpool.peer.info{build=build-1}")));
            assertEquals(1, Meters.value(rx.get("kvpool.peer.info{build=build-2}")));
            other.close();
            for (int i = 0; i < 20; i++) {
                rig.run(1);
                other.doWork();
            }
            assertEquals(1, Meters.value(Meters.byKey(registry, "pool", "decode").get("kvpool.peer.links")));
            rx = Meters.byKey(registry, "pool", "decode");
            assertNull(rx.get("kvpool.peer.info{build=build-2}"), "a build with no link UP has no row");
            assertEquals(1, Meters.value(rx.get("kvpool.peer.info{build=build-1}")));
            pool2.close();
        }
    }

    @Test
    void aHandshakeRefusedForItsEnvironmentIsCountedOnBothEnginesMeters() {
        try (SimRig rig = new SimRig()) {
            final SimpleMeterRegistry registry = new SimpleMeterRegistry();
            new TransferReceiverMeterBinder(rig.receiver, Tags.of("pool", "decode")).bindTo(registry);
            final io.kvpool.KvPool pool2 = io.kvpool.transfer.testkit.Kv.pool(8);
            // a prefill deployed against the wrong environment: the 2023 outage's mismatch, refused and now visible
            final TransferSender staging = TransferSender.builder(pool2, io.kvpool.transfer.PeerIdentity.of(
                io.kvpool.transfer.testkit.Kv.LAYOUT, "test-model@r1", "staging", "build-1")).clock(rig.net.clock()).build();
            new TransferSenderMeterBinder(staging, Tags.of("pool", "staging-prefill")).bindTo(registry);
            final io.kvpool.transfer.sim.SimLink[] l = rig.net.connect("prefill-2", "decode", true);
            staging.addPeer(l[0]);
            rig.receiver.addPeer(l[1]);
            for (int i = 0; i < 20; i++) {
                rig.run(1);
                staging.doWork();
            }
            final Map<String, Meter> rx = Meters.byKey(registry, "pool", "decode");
            final Map<String, Meter> tx = Meters.byKey(registry, "pool", "staging-prefill");
            assertEquals(1, rig.receiver.refusedPeers(), "decode refused the link");
            assertEquals(rig.receiver.refusedPeers(), Meters.value(rx.get("kvpool.peer.refused")));
            assertTrue(staging.refusedPeers() >= 1, "the sender counts its refused link too");
            assertEquals(staging.refusedPeers(), Meters.value(tx.get("kvpool.peer.refused")));
            assertEquals(rig.receiver.malformedFrames(), Meters.value(rx.get("kvpool.peer.frames.malformed")));
            assertEquals(rig.receiver.duplicateHellos(), Meters.value(rx.get("kvpool.peer.hellos.duplicate")));
            staging.close();
            pool2.close();
        }
    }

    @Test
    void closedEngineBindersRemoveEveryMeterAndPeerRowAndRefuseToBindAgain() {
        try (SimRig rig = new SimRig()) {
            final SimpleMeterRegistry registry = new SimpleMeterRegistry();
            final TransferReceiverMeterBinder rb = new TransferReceiverMeterBinder(rig.receiver, Tags.of("pool", "decode"));
            final TransferSenderMeterBinder sb = new TransferSenderMeterBinder(rig.sender, Tags.of("pool", "prefill"));
            rb.bindTo(registry);
            sb.bindTo(registry);
            assertEquals(1, Meters.value(Meters.byKey(registry, "pool", "decode").get("kvpool.peer.info{build=build-1}")));
            assertEquals(1, Meters.value(Meters.byKey(registry, "pool", "prefill").get("kvpool.peer.info{build=build-1}")));
            final int bound = registry.getMeters().size();
            final TransferReceiverMeterBinder twin = new TransferReceiverMeterBinder(rig.receiver, Tags.of("pool", "decode"));
            twin.bindTo(registry); // a twin: nothing new, and the meters stay until it closes too
            assertEquals(bound, registry.getMeters().size());
            twin.close();
            rb.close();
            sb.close();
            sb.close(); // idempotent
            assertTrue(registry.getMeters().isEmpty(), "left after close: " + registry.getMeters().stream()
                .map(m -> Meters.key(m, "")).toList());
            assertThrows(IllegalStateException.class, () -> rb.bindTo(registry));
            // a binder made again for the same engine takes the names back, rows included
            final Map<String, Meter> rx = bindReceiver(rig, registry);
            assertEquals(1, Meters.value(rx.get("kvpool.peer.info{build=build-1}")));
            assertEquals(1, Meters.value(rx.get("kvpool.peer.links")));
        }
    }

    @Test
    void anEngineBinderDroppedUnclosedHasATwinThatRemovesEveryMeterAndRow() throws InterruptedException {
        try (SimRig rig = new SimRig()) {
            final SimpleMeterRegistry registry = new SimpleMeterRegistry();
            final WeakReference<TransferReceiverMeterBinder> gone = bindAndForget(rig, registry);
            for (int i = 0; i < 100 && gone.get() != null; i++) {
                System.gc();
                Thread.sleep(10);
            }
            assertNull(gone.get(), "the first binder was collected");
            System.gc();
            final int bound = registry.getMeters().size();
            final TransferReceiverMeterBinder twin = new TransferReceiverMeterBinder(rig.receiver, Tags.of("pool", "decode"));
            twin.bindTo(registry); // the same engine and tags: nothing new, not "another binder"
            assertEquals(bound, registry.getMeters().size());
            assertEquals(1, Meters.value(Meters.byKey(registry, "pool", "decode").get("kvpool.peer.info{build=build-1}")));
            twin.close(); // the last live binder: the meters go, and the rows its dropped twin made
            assertTrue(registry.getMeters().isEmpty(), "left after close: " + registry.getMeters().stream()
                .map(m -> Meters.key(m, "")).toList());
        }
    }

    private static WeakReference<TransferReceiverMeterBinder> bindAndForget(SimRig rig, SimpleMeterRegistry registry) {
        final TransferReceiverMeterBinder first = new TransferReceiverMeterBinder(rig.receiver, Tags.of("pool", "decode"));
        first.bindTo(registry);
        return new WeakReference<>(first);
    }

    @Test
    void anEngineBinderRemovesOnlyItsOwnPeerInfoRowsAfterTheRegistryWasCleared() {
        try (SimRig first = new SimRig(); SimRig second = new SimRig()) {
            final SimpleMeterRegistry registry = new SimpleMeterRegistry();
            final TransferReceiverMeterBinder a = new TransferReceiverMeterBinder(first.receiver, Tags.of("pool", "decode"));
            a.bindTo(registry);
            registry.clear(); // the application's own: a's meters and rows are gone without its close
            final TransferReceiverMeterBinder b = new TransferReceiverMeterBinder(second.receiver, Tags.of("pool", "decode"));
            b.bindTo(registry);
            a.close(); // its rows' ids are b's now: not its rows
            final Map<String, Meter> m = Meters.byKey(registry, "pool", "decode");
            assertNotNull(m.get("kvpool.peer.info{build=build-1}"), "a's close removed b's peer-info row: " + m.keySet());
            assertEquals(1, Meters.value(m.get("kvpool.peer.links")));
            b.close();
            assertEquals(0, registry.getMeters().size());
        }
    }

    @Test
    void aBinderWhoseMetersAFilterDeniedStillRemovesItsPeerInfoRowsOnClose() {
        // a registry that exports only the peer-info rows: every other meter comes back a no-op the registry never
        // holds, which must not make the record look cleared (its close would then leave the rows)
        try (SimRig rig = new SimRig()) {
            final SimpleMeterRegistry registry = new SimpleMeterRegistry();
            registry.config().meterFilter(io.micrometer.core.instrument.config.MeterFilter.denyUnless(
                id -> id.getName().equals("kvpool.peer.info")));
            final TransferReceiverMeterBinder a = new TransferReceiverMeterBinder(rig.receiver, Tags.of("pool", "decode"));
            a.bindTo(registry);
            assertEquals(1, registry.getMeters().size(), () -> "the row: " + registry.getMeters());
            a.close();
            assertEquals(0, registry.getMeters().size(), () -> "left after close: " + registry.getMeters());
        }
    }

    @Test
    void aBindRefusedPartWayLeavesNoPeerInfoRowBehind() {
        try (SimRig rig = new SimRig()) {
            final SimpleMeterRegistry registry = new SimpleMeterRegistry();
            // a meter of another type under the links gauge's name: its registration, after the info rows', throws
            registry.counter("kvpool.peer.links", "pool", "decode");
            final TransferReceiverMeterBinder rb = new TransferReceiverMeterBinder(rig.receiver, Tags.of("pool", "decode"));
            assertThrows(IllegalArgumentException.class, () -> rb.bindTo(registry));
            assertEquals(java.util.List.of("kvpool.peer.links"), registry.getMeters().stream().map(m -> m.getId().getName()).toList(),
                "only the meter that was there before");
        }
    }

    @Test
    void aRegistryDroppedWithItsBindersUnclosedCanBeCollected() throws InterruptedException {
        // the record of what each registry shows must not keep the registry: a role that never closes its binders
        // makes a registry per server, and each would stay for the life of the JVM
        try (SimRig rig = new SimRig()) {
            final WeakReference<SimpleMeterRegistry> ref = bindAndDrop(rig);
            for (int i = 0; i < 100 && ref.get() != null; i++) {
                System.gc();
                Thread.sleep(10);
            }
            assertNull(ref.get(), "the registry stayed reachable after it and its binders were dropped");
        }
    }

    private static WeakReference<SimpleMeterRegistry> bindAndDrop(SimRig rig) {
        final SimpleMeterRegistry registry = new SimpleMeterRegistry();
        new TransferReceiverMeterBinder(rig.receiver, Tags.of("pool", "decode")).bindTo(registry);
        new TransferSenderMeterBinder(rig.sender, Tags.of("pool", "prefill")).bindTo(registry);
        return new WeakReference<>(registry);
    }

    @Test
    void peerInfoRowsReadFromManyThreadsWhileLinksComeAndGoEndCorrect() throws Exception {
        // registries read from their own threads (several scrapes at once, too) while the engine's thread adds and
        // drops links of another build: the rows' refresh must neither throw nor end wrong
        try (SimRig rig = new SimRig()) {
            final SimpleMeterRegistry registry = new SimpleMeterRegistry();
            new TransferReceiverMeterBinder(rig.receiver, Tags.of("pool", "decode")).bindTo(registry);
            final Meter links = Meters.byKey(registry, "pool", "decode").get("kvpool.peer.links");
            final java.util.concurrent.atomic.AtomicBoolean stop = new java.util.concurrent.atomic.AtomicBoolean();
            final java.util.concurrent.ConcurrentLinkedQueue<Throwable> errors = new java.util.concurrent.ConcurrentLinkedQueue<>();
            final java.util.List<Thread> readers = new java.util.ArrayList<>();
            for (int i = 0; i < 4; i++) {
                readers.add(Thread.ofPlatform().start(() -> {
                    while (!stop.get()) {
                        try {
                            final double v = Meters.value(links);
                            if (v < 1 || v > 2) {
                                errors.add(new AssertionError("links " + v));
                            }
                            Meters.byKey(registry, "pool", "decode").forEach((k, m) -> Meters.value(m));
                        } catch (Throwable t) {
                            errors.add(t);
                        }
                    }
                }));
            }
            final io.kvpool.KvPool pool2 = io.kvpool.transfer.testkit.Kv.pool(8);
            for (int round = 0; round < 40; round++) {
                final TransferSender other = TransferSender.builder(pool2, io.kvpool.transfer.PeerIdentity.of(
                    io.kvpool.transfer.testkit.Kv.LAYOUT, "test-model@r1", "test", "build-2")).clock(rig.net.clock()).build();
                final io.kvpool.transfer.sim.SimLink[] l = rig.net.connect("prefill-2", "decode", true);
                other.addPeer(l[0]);
                rig.receiver.addPeer(l[1]);
                for (int i = 0; i < 10; i++) {
                    rig.run(1);
                    other.doWork();
                }
                other.close();
                for (int i = 0; i < 10; i++) {
                    rig.run(1);
                    other.doWork();
                }
            }
            stop.set(true);
            for (Thread t : readers) {
                t.join();
            }
            assertTrue(errors.isEmpty(), () -> errors.size() + " errors, first: " + errors.peek());
            assertEquals(1, Meters.value(links));
            final Map<String, Meter> rx = Meters.byKey(registry, "pool", "decode");
            assertNull(rx.get("kvpool.peer.info{build=build-2}"));
            assertEquals(1, Meters.value(rx.get("kvpool.peer.info{build=build-1}")));
            pool2.close();
        }
    }

    @Test
    void theBindersAndTheirMetersDoNotKeepTheEnginesAlive() throws InterruptedException {
        final SimpleMeterRegistry registry = new SimpleMeterRegistry();
        final SimRig[] holder = {new SimRig()};
        final WeakReference<TransferReceiver> rx = new WeakReference<>(holder[0].receiver);
        final WeakReference<TransferSender> tx = new WeakReference<>(holder[0].sender);
        final TransferReceiverMeterBinder rb = new TransferReceiverMeterBinder(holder[0].receiver, Tags.of("pool", "decode"));
        final TransferSenderMeterBinder sb = new TransferSenderMeterBinder(holder[0].sender, Tags.of("pool", "prefill"));
        rb.bindTo(registry);
        sb.bindTo(registry);
        holder[0].close();
        holder[0] = null;
        for (int i = 0; i < 100 && (rx.get() != null || tx.get() != null); i++) {
            System.gc();
            Thread.sleep(10);
        }
        assertNull(rx.get(), "the receiver's binder or meters kept it reachable");
        assertNull(tx.get(), "the sender's binder or meters kept it reachable");
        assertTrue(Double.isNaN(Meters.value(Meters.byKey(registry, "pool", "decode").get("kvpool.transfer.deferred.held"))));
        Reference.reachabilityFence(rb);
        Reference.reachabilityFence(sb);
    }

    @Test
    void nullArgumentsAreRefused() {
        try (SimRig rig = new SimRig()) {
            assertThrows(NullPointerException.class, () -> new TransferReceiverMeterBinder(null));
            assertThrows(NullPointerException.class, () -> new TransferReceiverMeterBinder(rig.receiver, null));
            assertThrows(NullPointerException.class, () -> new TransferReceiverMeterBinder(rig.receiver).bindTo(null));
            assertThrows(NullPointerException.class, () -> new TransferSenderMeterBinder(null));
            assertThrows(NullPointerException.class, () -> new TransferSenderMeterBinder(rig.sender, null));
            assertThrows(NullPointerException.class, () -> new TransferSenderMeterBinder(rig.sender).bindTo(null));
        }
    }

    /** Each receiver meter with a count or a value reads its own {@link ReceiverMetrics} getter. */
    static void everyMeterReadsItsGetter(Map<String, Meter> rx, ReceiverMetrics m) {
        assertEquals(m.started(), Meters.value(rx.get("kvpool.transfer.started")));
        assertEquals(m.committed(), Meters.value(rx.get("kvpool.transfer.committed")));
        for (FailureReason r : FailureReason.values()) {
            assertEquals(m.failures(r), Meters.value(rx.get("kvpool.transfer.failures{reason=" + r.name().toLowerCase(Locale.ROOT) + "}")), r::name);
        }
        for (ReceiverMetrics.Outcome o : ReceiverMetrics.Outcome.values()) {
            assertEquals(m.deferredRelease(o), Meters.value(rx.get("kvpool.transfer.deferred.releases{outcome=" + o.name().toLowerCase(Locale.ROOT) + "}")),
                o::name);
        }
        assertEquals(m.heldPages(), Meters.value(rx.get("kvpool.transfer.deferred.held")));
        assertEquals(m.quarantinedPages(), Meters.value(rx.get("kvpool.transfer.quarantined")));
        assertEquals(m.quarantineReleases(), Meters.value(rx.get("kvpool.transfer.quarantine.releases")));
        for (io.kvpool.transfer.WriteProof p : io.kvpool.transfer.WriteProof.values()) {
            assertEquals(m.releasedRanks(p), Meters.value(rx.get("kvpool.transfer.released.ranks{proof=" + p.name().toLowerCase(Locale.ROOT) + "}")),
                p::name);
        }
        assertEquals(m.holdsEnded(), Meters.value(rx.get("kvpool.transfer.deferred.hold")));
        assertEquals(m.ackBeforeRegistration(), Meters.value(rx.get("kvpool.transfer.acks.ignored{reason=before_registration}")));
        assertEquals(m.ackStaleGeneration(), Meters.value(rx.get("kvpool.transfer.acks.ignored{reason=stale_generation}")));
        assertEquals(m.ackDuplicate(), Meters.value(rx.get("kvpool.transfer.acks.ignored{reason=duplicate}")));
        assertEquals(m.ackWrongPeer(), Meters.value(rx.get("kvpool.transfer.acks.ignored{reason=wrong_peer}")));
        assertEquals(m.ackInconsistent(), Meters.value(rx.get("kvpool.transfer.acks.ignored{reason=inconsistent}")));
        assertEquals(m.ackLate(), Meters.value(rx.get("kvpool.transfer.acks.ignored{reason=late}")));
    }
}
