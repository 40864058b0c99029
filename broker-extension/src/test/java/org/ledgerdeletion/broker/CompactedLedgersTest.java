package org.ledgerdeletion.broker;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.List;
import java.util.OptionalLong;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import org.junit.jupiter.api.Test;

/** A compaction queues the compacted ledger it replaces first; in defer mode it holds that ledger's delete. */
class CompactedLedgersTest {
    private static final String TOPIC = "persistent://public/default/t";

    private final FakeMarker marker = new FakeMarker();
    private final AtomicInteger compactions = new AtomicInteger();
    private volatile CompletableFuture<Void> outcome = CompletableFuture.completedFuture(null);

    private CompletableFuture<Void> compaction() {
        compactions.incrementAndGet();
        return outcome;
    }

    private static CompletableFuture<OptionalLong> current(long id) {
        return CompletableFuture.completedFuture(OptionalLong.of(id));
    }

    @Test
    void theCurrentCompactedLedgerIsQueuedBeforeTheCompactionRuns() throws Exception {
        CompletableFuture<Void> durable = new CompletableFuture<>();
        marker.answer = d -> durable;
        var f = new CompactedLedgers(marker, null).compact(TOPIC, current(11), this::compaction);
        assertEquals(List.of(PendingDeletion.compactedLedger(TOPIC, 11)), marker.marked());
        Thread.sleep(50);
        assertEquals(0, compactions.get(), "the compaction waits for the mark");
        durable.complete(null);
        f.get(5, TimeUnit.SECONDS);
        assertEquals(1, compactions.get());
    }

    @Test
    void aFirstCompactionQueuesNothing() throws Exception {
        new CompactedLedgers(marker, null).compact(TOPIC, CompletableFuture.completedFuture(OptionalLong.empty()),
                this::compaction).get(5, TimeUnit.SECONDS);
        new CompactedLedgers(marker, null).compact(TOPIC, CompletableFuture.failedFuture(new IllegalStateException(
                "the compacted ledger cannot be opened")), this::compaction).get(5, TimeUnit.SECONDS);
        assertEquals(List.of(), marker.marked());
        assertEquals(2, compactions.get());
    }

    @Test
    void aCompactionWhoseMarkFailsDoesNotRun() {
        marker.failing();
        var f = new CompactedLedgers(marker, null).compact(TOPIC, current(11), this::compaction);
        var e = assertThrows(ExecutionException.class, () -> f.get(5, TimeUnit.SECONDS));
        assertTrue(e.getCause().getMessage().contains("compaction not run"), e.toString());
        assertEquals(0, compactions.get(), "nothing replaced, nothing dropped unmarked");
    }

    @Test
    void aFailedCompactionFailsAsItDid() {
        outcome = CompletableFuture.failedFuture(new IllegalStateException("compaction failed"));
        var f = new CompactedLedgers(marker, null).compact(TOPIC, current(11), this::compaction);
        var e = assertThrows(ExecutionException.class, () -> f.get(5, TimeUnit.SECONDS));
        assertEquals("compaction failed", e.getCause().getMessage());
    }

    @Test
    void aCompactionThatKeepsFailingQueuesItsCompactedLedgerOnce() throws Exception {
        outcome = CompletableFuture.failedFuture(new IllegalStateException("compaction failed"));
        CompactedLedgers ledgers = new CompactedLedgers(marker, null, 2);
        double skipped = Metrics.COMPACTED_REQUEUES_SKIPPED.get();
        for (int i = 0; i < 5; i++) {
            var f = ledgers.compact(TOPIC, current(11), this::compaction);
            assertThrows(ExecutionException.class, () -> f.get(5, TimeUnit.SECONDS));
        }
        assertEquals(List.of(PendingDeletion.compactedLedger(TOPIC, 11)), marker.marked());
        assertEquals(5, compactions.get(), "every try still runs");
        assertEquals(skipped + 4, Metrics.COMPACTED_REQUEUES_SKIPPED.get());
        // It commits at last; the next compaction replaces another ledger, queued as usual.
        outcome = CompletableFuture.completedFuture(null);
        ledgers.compact(TOPIC, current(11), this::compaction).get(5, TimeUnit.SECONDS);
        ledgers.compact(TOPIC, current(12), this::compaction).get(5, TimeUnit.SECONDS);
        assertEquals(List.of(PendingDeletion.compactedLedger(TOPIC, 11), PendingDeletion.compactedLedger(TOPIC, 12)),
                marker.marked());
        // Bounded: past two topics the least recent is forgotten, and queued again if it is tried again.
        outcome = CompletableFuture.failedFuture(new IllegalStateException("compaction failed"));
        for (String t : List.of(TOPIC, TOPIC + "-b", TOPIC + "-c", TOPIC)) {
            var f = ledgers.compact(t, current(20), this::compaction);
            assertThrows(ExecutionException.class, () -> f.get(5, TimeUnit.SECONDS));
        }
        assertEquals(List.of(TOPIC, TOPIC + "-b", TOPIC + "-c", TOPIC), marker.marked().subList(2, 6).stream()
                .map(PendingDeletion::topicName).toList());
    }

    @Test
    void aMarkThatFailedIsTriedAgainByTheNextCompaction() {
        marker.failing();
        CompactedLedgers ledgers = new CompactedLedgers(marker, null);
        for (int i = 0; i < 2; i++) {
            var f = ledgers.compact(TOPIC, current(11), this::compaction);
            assertThrows(ExecutionException.class, () -> f.get(5, TimeUnit.SECONDS));
        }
        assertEquals(0, compactions.get());
        assertEquals(2, marker.calls.size());
    }

    @Test
    void deferModeSkipsTheOldLedgersDeleteOnlyIfTheCompactionCommitted() throws Exception {
        DeferredDeletes registry = new DeferredDeletes(10);
        CompletableFuture<Void> running = new CompletableFuture<>();
        outcome = running;
        var f = new CompactedLedgers(marker, registry).compact(TOPIC, current(11), this::compaction);
        // Pulsar's compactor subscription deletes the old ledger once the acknowledgement is stored, which may be
        // before the compaction's future completes: the delete waits.
        CompletableFuture<Boolean> delete = registry.claim(11);
        assertFalse(delete.isDone());
        running.complete(null);
        f.get(5, TimeUnit.SECONDS);
        assertTrue(delete.get(5, TimeUnit.SECONDS), "committed: the worker deletes it");

        outcome = CompletableFuture.failedFuture(new IllegalStateException("compaction failed"));
        var failed = new CompactedLedgers(marker, registry).compact(TOPIC, current(12), this::compaction);
        assertThrows(ExecutionException.class, () -> failed.get(5, TimeUnit.SECONDS));
        assertFalse(registry.claim(12).get(5, TimeUnit.SECONDS), "failed: still the topic's, the broker decides");
    }
}
