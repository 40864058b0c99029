package org.ledgerdeletion.broker;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.ledgerdeletion.broker.Metadata.ledgerList;
import static org.ledgerdeletion.broker.Metadata.offloaded;
import static org.ledgerdeletion.broker.Metadata.plain;

import java.lang.reflect.Method;
import java.lang.reflect.Modifier;
import java.util.List;
import java.util.Map;
import java.util.OptionalLong;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.RejectedExecutionException;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.function.Supplier;
import org.apache.bookkeeper.common.util.OrderedExecutor;
import org.apache.bookkeeper.mledger.ManagedLedgerException.MetaStoreException;
import org.apache.bookkeeper.mledger.impl.MetaStore;
import org.apache.bookkeeper.mledger.impl.MetaStore.MetaStoreCallback;
import org.apache.pulsar.metadata.api.Stat;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;

/**
 * {@link MarkingMetaStore} in the JVM, through the seam Pulsar's own tests use: a fake {@code MetaStore} delegate
 * (faults injectable) and a fake marker. Every call is made through the running line's interface, reflectively,
 * as the broker's managed ledger makes it.
 */
class MarkingMetaStoreTest {
    private static final String ML = "public/default/persistent/t";
    private static final String TOPIC = "persistent://public/default/t";

    private final FakeStore fake = new FakeStore();
    private final FakeMarker marker = new FakeMarker();
    private final MetaStoreAdapter adapter = fake.adapter;
    private final OrderedExecutor executor = OrderedExecutor.newBuilder().numThreads(1).name("test").build();
    private final MetaStore store = MarkingMetaStore.wrap(fake.proxy(), ML, marker, executor, adapter);

    @AfterEach
    void shutDown() {
        executor.shutdownNow();
    }

    /** A callback that records how it ended, and how often. */
    static final class Result implements MetaStoreCallback<Object> {
        final CompletableFuture<Object> done = new CompletableFuture<>();
        final AtomicInteger completions = new AtomicInteger();

        @Override
        public void operationComplete(Object result, Stat stat) {
            completions.incrementAndGet();
            done.complete(result);
        }

        @Override
        public void operationFailed(MetaStoreException e) {
            completions.incrementAndGet();
            done.completeExceptionally(e);
        }

        /** True if the call succeeded, false if it failed; fails the test if it never ends. */
        boolean succeeded() throws Exception {
            try {
                done.get(5, TimeUnit.SECONDS);
                return true;
            } catch (java.util.concurrent.ExecutionException e) {
                assertInstanceOf(MetaStoreException.class, e.getCause());
                return false;
            } finally {
                Thread.sleep(20);  // a second completion, if any, has time to arrive
                assertEquals(1, completions.get(), "the callback must run exactly once");
            }
        }
    }

    private Result readList() {
        Result r = new Result();
        MetaStoreAdapter.call(adapter.getManagedLedgerInfo, store, ML, false, Map.of(), r);
        return r;
    }

    private Result writeList(byte[] list) {
        Result r = new Result();
        MetaStoreAdapter.call(adapter.asyncUpdateLedgerIds, store, ML, adapter.ledgerInfo(list), null, r);
        return r;
    }

    private Result readCursor(String cursor) {
        Result r = new Result();
        MetaStoreAdapter.call(adapter.asyncGetCursorInfo, store, ML, cursor, r);
        return r;
    }

    private Result writeCursor(String cursor, byte[] info) {
        Result r = new Result();
        MetaStoreAdapter.call(adapter.asyncUpdateCursorInfo, store, ML, cursor, adapter.cursorInfo(info), null, r);
        return r;
    }

    private Result removeCursor(String cursor) {
        Result r = new Result();
        MetaStoreAdapter.call(adapter.asyncRemoveCursor, store, ML, cursor, r);
        return r;
    }

    private Result removeTopic() {
        Result r = new Result();
        MetaStoreAdapter.call(adapter.removeManagedLedger, store, ML, r);
        return r;
    }

    private void stored(byte[] list) throws Exception {
        fake.ledgerLists.put(ML, list);
        assertTrue(readList().succeeded());
        fake.calls.clear();
    }

    @Test
    void aTrimIsMarkedBeforeItsWrite() throws Exception {
        stored(ledgerList(plain(1), plain(2), plain(3)));
        CompletableFuture<Void> durable = new CompletableFuture<>();
        marker.answer = d -> durable;
        Result r = writeList(ledgerList(plain(3)));
        assertEquals(List.of(PendingDeletion.ledger(TOPIC, 1), PendingDeletion.ledger(TOPIC, 2)), marker.marked());
        Thread.sleep(50);
        assertEquals(List.of(), fake.calls, "nothing written before the marks are durable");
        durable.complete(null);
        assertTrue(r.succeeded());
        assertEquals(List.of(3L), fake.storedLedgers(ML));
    }

    @Test
    void aTrimWhoseMarkFailsIsNotWritten() throws Exception {
        stored(ledgerList(plain(1), plain(2), plain(3)));
        marker.failing();
        assertFalse(writeList(ledgerList(plain(3))).succeeded());
        assertEquals(List.of(), fake.calls);
        assertEquals(List.of(1L, 2L, 3L), fake.storedLedgers(ML));
    }

    @Test
    void aRolloverWhoseMarkFailsGoesAheadKeepingTheLedgersListed() throws Exception {
        stored(ledgerList(plain(1), plain(2), offloaded(3, 7, 8, false)));
        marker.failing();
        // A failed trim took 1 and 2 out of the broker's memory (and 3's BookKeeper copy); the rollover adds 4.
        assertTrue(writeList(ledgerList(offloaded(3, 7, 8, true), plain(4))).succeeded());
        assertEquals(List.of(1L, 2L, 3L, 4L), fake.storedLedgers(ML));
        assertFalse(LedgerList.parse(fake.ledgerLists.get(ML)).ledgers().get(3L).bookkeeperDeleted());
        // Once the queue is back, the next write marks and drops them.
        marker.answer = d -> CompletableFuture.completedFuture(null);
        marker.calls.clear();
        assertTrue(writeList(ledgerList(offloaded(3, 7, 8, true), plain(4))).succeeded());
        assertEquals(List.of(PendingDeletion.ledger(TOPIC, 1), PendingDeletion.ledger(TOPIC, 2),
                PendingDeletion.ledger(TOPIC, 3)), marker.marked());
        assertEquals(List.of(3L, 4L), fake.storedLedgers(ML));
    }

    @Test
    void anUnknownStateIsReadBeforeTheWrite() throws Exception {
        // This store never saw the topic's list (no read through it): it reads the stored one first.
        fake.ledgerLists.put(ML, ledgerList(plain(1), plain(2), plain(3)));
        assertTrue(writeList(ledgerList(plain(2), plain(3))).succeeded());
        assertEquals(List.of("getManagedLedgerInfo", "asyncUpdateLedgerIds"), fake.calls);
        assertEquals(List.of(PendingDeletion.ledger(TOPIC, 1)), marker.marked());
    }

    @Test
    void theShortReadGoesThroughTheTrackingOne() throws Exception {
        fake.ledgerLists.put(ML, ledgerList(plain(1), plain(2)));
        // The interface's default three-argument read (no properties) calls the four-argument one.
        Result read = new Result();
        for (var m : MetaStore.class.getMethods()) {
            if (m.getName().equals("getManagedLedgerInfo") && m.getParameterCount() == 3) {
                MetaStoreAdapter.call(m, store, ML, false, read);
            }
        }
        assertTrue(read.succeeded());
        fake.calls.clear();
        assertTrue(writeList(ledgerList(plain(2))).succeeded());
        assertEquals(List.of("asyncUpdateLedgerIds"), fake.calls, "no second read: the first was tracked");
        assertEquals(List.of(PendingDeletion.ledger(TOPIC, 1)), marker.marked());
    }

    @Test
    void aWriteThatFailedIsReadAfreshBeforeTheNext() throws Exception {
        stored(ledgerList(plain(1), plain(2), plain(3)));
        // The trim's write landed, but its caller was told it failed.
        fake.writes = FakeStore.Fault.AMBIGUOUS;
        assertFalse(writeList(ledgerList(plain(2), plain(3))).succeeded());
        fake.writes = FakeStore.Fault.NONE;
        marker.calls.clear();
        assertTrue(writeList(ledgerList(plain(3))).succeeded());
        assertEquals(List.of(PendingDeletion.ledger(TOPIC, 2)), marker.marked(), "drops of the stored list only");
    }

    @Test
    void aMarkThatThrowsFailsTheTrimAndNeverHoldsIt() throws Exception {
        stored(ledgerList(plain(1), plain(2)));
        marker.answer = d -> {
            throw new RejectedExecutionException("publisher closed");
        };
        assertFalse(writeList(ledgerList(plain(2))).succeeded());
        marker.answer = d -> null;
        assertFalse(writeList(ledgerList(plain(2))).succeeded());
        assertEquals(List.of(1L, 2L), fake.storedLedgers(ML));
    }

    @Test
    void aStoreThatThrowsAfterTheMarkFailsTheWrite() throws Exception {
        stored(ledgerList(plain(1), plain(2)));
        CompletableFuture<Void> durable = new CompletableFuture<>();
        marker.answer = d -> durable;
        Result r = writeList(ledgerList(plain(2)));
        fake.writes = FakeStore.Fault.THROW;
        durable.complete(null);  // the write now runs on the marker's thread, and throws there
        assertFalse(r.succeeded());
    }

    @Test
    void aCallerCallbackThatThrowsIsNotCompletedTwice() throws Exception {
        stored(ledgerList(plain(1), plain(2)));
        AtomicInteger calls = new AtomicInteger();
        MetaStoreCallback<Object> throwing = new MetaStoreCallback<>() {
            @Override
            public void operationComplete(Object result, Stat stat) {
                calls.incrementAndGet();
                throw new IllegalStateException("the caller's own bug");
            }

            @Override
            public void operationFailed(MetaStoreException e) {
                calls.incrementAndGet();
            }
        };
        MetaStoreAdapter.call(adapter.asyncUpdateLedgerIds, store, ML, adapter.ledgerInfo(ledgerList(plain(2))), null,
                throwing);
        Thread.sleep(100);
        assertEquals(1, calls.get());
    }

    @Test
    void aCursorSwitchIsMarkedBeforeItsWrite() throws Exception {
        fake.cursors.put("c", Metadata.cursor(5));
        assertTrue(readCursor("c").succeeded());
        assertTrue(writeCursor("c", Metadata.cursor(5)).succeeded());
        assertEquals(List.of(), marker.marked(), "a mark-delete on the same ledger drops nothing");
        assertTrue(writeCursor("c", Metadata.cursor(9)).succeeded());
        assertEquals(List.of(PendingDeletion.cursorLedger(TOPIC, "c", 5)), marker.marked());
        assertEquals(9, fake.storedCursorLedger("c"));
    }

    @Test
    void aCursorCloseWhoseMarkFailsStillStoresItsPosition() throws Exception {
        // Closing stores the position in the znode with no ledger (-1), dropping the cursor's ledger. Failing it
        // would lose the acknowledgements since the ledger's last entry: it goes ahead, the ledger unmarked.
        fake.cursors.put("c", Metadata.cursor(5));
        marker.failing();
        double unmarked = Metrics.UNMARKED.labels("LEDGER").get();
        assertTrue(writeCursor("c", Metadata.cursor(-1)).succeeded());
        assertEquals(-1, fake.storedCursorLedger("c"));
        assertEquals(List.of(PendingDeletion.cursorLedger(TOPIC, "c", 5)), marker.marked());
        assertEquals(unmarked + 1, Metrics.UNMARKED.labels("LEDGER").get());
    }

    @Test
    void aCursorWriteWhoseMarkThrowsStillGoesAhead() throws Exception {
        fake.cursors.put("c", Metadata.cursor(5));
        marker.answer = d -> {
            throw new RejectedExecutionException("publisher closed");
        };
        assertTrue(writeCursor("c", Metadata.cursor(-1)).succeeded());
        assertEquals(-1, fake.storedCursorLedger("c"));
    }

    @Test
    void removedBucketPropertiesAreMarkedWithTheSubscriptionName() throws Exception {
        String b1 = "#pulsar.internal.delayed.bucket_10_14";
        fake.cursors.put("my%20sub", Metadata.cursor(5, Map.of(b1, "31")));
        assertTrue(writeCursor("my%20sub", Metadata.cursor(5)).succeeded());
        assertEquals(List.of(PendingDeletion.bucketLedger(TOPIC, "my sub", 31)), marker.marked());
    }

    @Test
    void aRemovedCursorIsReadAfreshNotFromWhatThisStoreLastSaw() throws Exception {
        fake.cursors.put("c", Metadata.cursor(5));
        assertTrue(readCursor("c").succeeded());
        // The switch to 7 landed but its caller was told it failed: the store now names 7.
        fake.writes = FakeStore.Fault.AMBIGUOUS;
        assertFalse(writeCursor("c", Metadata.cursor(7)).succeeded());
        fake.writes = FakeStore.Fault.NONE;
        marker.calls.clear();
        fake.calls.clear();
        assertTrue(removeCursor("c").succeeded());
        assertEquals(List.of("asyncGetCursorInfo", "asyncRemoveCursor"), fake.calls);
        assertEquals(List.of(PendingDeletion.cursorLedger(TOPIC, "c", 7)), marker.marked());
    }

    @Test
    void aRemovedCursorIsReadAfreshEvenWhenThisStoreWroteItLast() throws Exception {
        fake.cursors.put("c", Metadata.cursor(5));
        assertTrue(readCursor("c").succeeded());
        fake.cursors.put("c", Metadata.cursor(8));  // written by a path this store did not see
        marker.calls.clear();
        assertTrue(removeCursor("c").succeeded());
        assertEquals(List.of(PendingDeletion.cursorLedger(TOPIC, "c", 8)), marker.marked());
    }

    @Test
    void unsubscribeAndTopicDeletionGoAheadWhenTheirMarksFail() throws Exception {
        fake.ledgerLists.put(ML, ledgerList(plain(1), offloaded(2, 7, 8, true)));
        fake.cursors.put("c", Metadata.cursor(5));
        marker.failing();
        assertTrue(removeCursor("c").succeeded());
        assertFalse(fake.cursors.containsKey("c"));
        assertTrue(removeTopic().succeeded());
        assertFalse(fake.ledgerLists.containsKey(ML));
        var offload = new PendingDeletion.Offload(7, 8, "aws-s3", Map.of("bucket", "b"));
        assertEquals(List.of(PendingDeletion.cursorLedger(TOPIC, "c", 5), PendingDeletion.ledger(TOPIC, 1),
                PendingDeletion.offloaded(TOPIC, 2, offload)), marker.marked());
    }

    @Test
    void aTopicDeletionMarksWhatItsMetadataStillLists() throws Exception {
        fake.ledgerLists.put(ML, ledgerList(plain(1), plain(2)));
        assertTrue(removeTopic().succeeded());
        assertEquals(List.of(PendingDeletion.ledger(TOPIC, 1), PendingDeletion.ledger(TOPIC, 2)), marker.marked());
        assertTrue(removeTopic().succeeded(), "a topic with no metadata left drops nothing");
        assertEquals(2, marker.marked().size());
    }

    @Test
    void anotherManagedLedgersCallsPassThroughUnmarked() throws Exception {
        String other = "public/default/persistent/other";
        fake.ledgerLists.put(other, ledgerList(plain(1), plain(2)));
        Result r = new Result();
        MetaStoreAdapter.call(adapter.asyncUpdateLedgerIds, store, other, adapter.ledgerInfo(ledgerList(plain(2))),
                null, r);
        assertTrue(r.succeeded());
        assertEquals(List.of(), marker.marked());
        assertEquals(List.of("asyncUpdateLedgerIds"), fake.calls);
    }

    @Test
    void deferModeRecordsWhatASuccessfulWriteDroppedAndQueued() throws Exception {
        DeferredDeletes registry = new DeferredDeletes(100);
        MetaStore deferring = MarkingMetaStore.wrap(fake.proxy(), ML, marker, executor, adapter, registry, null);
        fake.ledgerLists.put(ML, ledgerList(plain(1), plain(2), offloaded(3, 7, 8, false), plain(4)));
        // A trim that fails (the write itself): nothing recorded, the broker deletes nothing either.
        fake.writes = FakeStore.Fault.FAIL;
        Result failed = new Result();
        MetaStoreAdapter.call(adapter.asyncUpdateLedgerIds, deferring, ML,
                adapter.ledgerInfo(ledgerList(plain(4))), null, failed);
        assertFalse(failed.succeeded());
        assertEquals(0, registry.size());
        // It succeeds: 1 and 2 and 3's BookKeeper copy are recorded, not 3's offloaded copy (the offloader's).
        fake.writes = FakeStore.Fault.NONE;
        Result ok = new Result();
        MetaStoreAdapter.call(adapter.asyncUpdateLedgerIds, deferring, ML,
                adapter.ledgerInfo(ledgerList(offloaded(3, 7, 8, true), plain(4))), null, ok);
        assertTrue(ok.succeeded());
        assertEquals(3, registry.size());
        for (long id : List.of(1L, 2L, 3L)) {
            assertTrue(registry.claim(id).get(), "ledger " + id);
        }
    }

    @Test
    void deferModeRecordsNothingAWriteDroppedUnmarked() throws Exception {
        DeferredDeletes registry = new DeferredDeletes(100);
        MetaStore deferring = MarkingMetaStore.wrap(fake.proxy(), ML, marker, executor, adapter, registry, null);
        fake.cursors.put("c", Metadata.cursor(5));
        fake.cursors.put("d", Metadata.cursor(6));
        fake.ledgerLists.put(ML, ledgerList(plain(1)));
        marker.failing();
        Result close = new Result();
        MetaStoreAdapter.call(adapter.asyncUpdateCursorInfo, deferring, ML, "c", adapter.cursorInfo(
                Metadata.cursor(-1)), null, close);
        assertTrue(close.succeeded());
        assertEquals(0, registry.size(), "went ahead unmarked: the broker deletes it, as stock");
    }

    @Test
    void deferModeLeavesCursorLedgersToTheBroker() throws Exception {
        DeferredDeletes registry = new DeferredDeletes(100);
        MetaStore deferring = MarkingMetaStore.wrap(fake.proxy(), ML, marker, executor, adapter, registry, null);
        fake.cursors.put("d", Metadata.cursor(6));
        fake.ledgerLists.put(ML, ledgerList(plain(1)));
        // A cursor switch and an unsubscribe: queued, but Pulsar deletes those ledgers still open, and only a worker
        // that can recover them could; a topic deletion: Pulsar deletes its ledgers before removing its metadata.
        Result switched = new Result();
        MetaStoreAdapter.call(adapter.asyncUpdateCursorInfo, deferring, ML, "d", adapter.cursorInfo(
                Metadata.cursor(9)), null, switched);
        assertTrue(switched.succeeded());
        Result removed = new Result();
        MetaStoreAdapter.call(adapter.asyncRemoveCursor, deferring, ML, "d", removed);
        assertTrue(removed.succeeded());
        Result topic = new Result();
        MetaStoreAdapter.call(adapter.removeManagedLedger, deferring, ML, topic);
        assertTrue(topic.succeeded());
        assertEquals(List.of(6L, 9L, 1L), marker.marked().stream().map(PendingDeletion::ledgerId).toList());
        assertEquals(0, registry.size(), "nothing left to the worker: the broker deletes each of them");
        for (long id : List.of(6L, 9L, 1L)) {
            assertFalse(registry.claim(id).get(), "ledger " + id);
        }
    }

    @Test
    void removingTheCompactionCursorQueuesTheTopicsCompactedLedger() throws Exception {
        CompactedLedgerIndex index = new CompactedLedgerIndex();
        DeferredDeletes registry = new DeferredDeletes(100);
        Supplier<OptionalLong> loaded = () -> OptionalLong.of(77);
        index.register(TOPIC, loaded);
        MetaStore withIndex = MarkingMetaStore.wrap(fake.proxy(), ML, marker, executor, adapter, registry, index);
        fake.cursors.put("__compaction", Metadata.cursor(-1));
        fake.cursors.put("other", Metadata.cursor(-1));
        Result other = new Result();
        MetaStoreAdapter.call(adapter.asyncRemoveCursor, withIndex, ML, "other", other);
        assertTrue(other.succeeded());
        assertEquals(List.of(), marker.marked(), "only the compaction cursor names a compacted ledger");
        Result r = new Result();
        MetaStoreAdapter.call(adapter.asyncRemoveCursor, withIndex, ML, "__compaction", r);
        assertTrue(r.succeeded());
        assertEquals(List.of(PendingDeletion.compactedLedger(TOPIC, 77)), marker.marked());
        assertTrue(registry.claim(77).get(), "defer mode: Pulsar's delete of it, right after, is left to the worker");
        index.unregister(TOPIC, loaded);
        assertTrue(index.current(TOPIC).isEmpty());
    }

    @Test
    void everyOtherCallGoesToTheRealStoreUnchanged() throws Exception {
        // Whatever this line's interface has besides the six calls the extension intercepts (Pulsar 5.0.1 adds
        // unwatchManagedLedgerInfo(String, UpdateCallback) and close()), the real store gets it as it is.
        int checked = 0;
        for (Method m : MetaStore.class.getMethods()) {
            boolean intercepted = List.of("getManagedLedgerInfo", "asyncUpdateLedgerIds", "asyncGetCursorInfo",
                    "asyncUpdateCursorInfo", "asyncRemoveCursor", "removeManagedLedger").contains(m.getName());
            if (intercepted || m.isDefault() || Modifier.isStatic(m.getModifiers())) {
                continue;
            }
            Object[] args = new Object[m.getParameterCount()];
            if (args.length > 0 && m.getParameterTypes()[0] == String.class) {
                args[0] = ML;
            }
            var e = assertThrows(UnsupportedOperationException.class, () -> MetaStoreAdapter.call(m, store, args),
                    m.toString());
            assertEquals(m.getName(), e.getMessage());
            checked++;
        }
        assertTrue(checked >= 5, "checked " + checked);
        assertEquals("MarkingMetaStore[" + ML + "]", store.toString());
    }
}
