package org.ledgerdeletion.broker;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.List;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;
import org.junit.jupiter.api.Test;

/** Defer mode's registry: what it records, once, within its bound and its expiry, and a compaction's hold. */
class DeferredDeletesTest {
    private final AtomicLong now = new AtomicLong();
    private final DeferredDeletes registry = new DeferredDeletes(3, 1000, 200, now::get);

    private boolean skipped(long id) throws Exception {
        return registry.claim(id).get(5, TimeUnit.SECONDS);
    }

    @Test
    void aRecordedLedgersDeleteIsSkippedOnceAndOnlyIts() throws Exception {
        assertEquals(2, registry.record(List.of(1L, 2L)));
        assertFalse(skipped(3), "a ledger never recorded is deleted by the broker");
        assertTrue(skipped(1));
        assertFalse(skipped(1), "claimed once: a second delete goes to BookKeeper");
        assertTrue(skipped(2));
        assertEquals(0, registry.size());
    }

    @Test
    void whenFullTheBrokerDeletesTheRest() throws Exception {
        double full = Metrics.DEFER_FULL.get();
        assertEquals(3, registry.record(List.of(1L, 2L, 3L)));
        assertEquals(0, registry.record(List.of(4L)));
        assertEquals(full + 1, Metrics.DEFER_FULL.get());
        assertFalse(skipped(4));
        assertTrue(skipped(1), "the recorded ones are still left to the worker");
        assertEquals(1, registry.record(List.of(5L)), "a claimed entry makes room");
    }

    @Test
    void expiredEntriesAreDroppedForRoomAndNeverSkipped() throws Exception {
        registry.record(List.of(1L, 2L, 3L));
        now.addAndGet(1001);
        assertFalse(skipped(3), "an expired entry is deleted by the broker");
        assertEquals(2, registry.record(List.of(4L, 5L)), "expired entries make room");
        assertEquals(2, registry.size());
        assertTrue(skipped(4));
    }

    @Test
    void aCompactionsHoldDecidesAWaitingDelete() throws Exception {
        DeferredDeletes.Hold hold = registry.hold(7);
        CompletableFuture<Boolean> waiting = registry.claim(7);
        Thread.sleep(50);
        assertFalse(waiting.isDone(), "the delete waits for the compaction's outcome");
        hold.confirm();
        assertTrue(waiting.get(5, TimeUnit.SECONDS));

        DeferredDeletes.Hold failed = registry.hold(8);
        CompletableFuture<Boolean> other = registry.claim(8);
        failed.cancel();
        assertFalse(other.get(5, TimeUnit.SECONDS), "a failed compaction: the broker deletes it");
    }

    @Test
    void aHoldConfirmedBeforeTheDeleteSkipsItAndACancelledOneIsGone() throws Exception {
        registry.hold(7).confirm();
        assertTrue(skipped(7));
        registry.hold(8).cancel();
        assertEquals(0, registry.size());
        assertFalse(skipped(8));
    }

    @Test
    void aHoldThatNeverEndsLetsTheBrokerDelete() throws Exception {
        registry.hold(9);
        long t0 = System.nanoTime();
        assertFalse(skipped(9));
        assertTrue(System.nanoTime() - t0 >= TimeUnit.MILLISECONDS.toNanos(150), "waited for the hold's limit");
    }

    @Test
    void aFullRegistryHoldsNothing() throws Exception {
        registry.record(List.of(1L, 2L, 3L));
        DeferredDeletes.Hold hold = registry.hold(9);
        hold.confirm();
        assertFalse(skipped(9));
    }

    @Test
    void theCapacityIsPositive() {
        assertThrows(IllegalArgumentException.class, () -> new DeferredDeletes(0));
    }
}
