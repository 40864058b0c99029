package org.ledgerdeletion.broker;

import java.util.Collection;
import java.util.Map;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.TimeUnit;
import java.util.function.LongSupplier;

/**
 * Defer mode's registry: the ids of BookKeeper ledgers whose broker delete the worker does instead. The broker's
 * own delete of such a ledger ({@link DeferringMetadataDriver}'s {@code removeLedgerMetadata}) completes without
 * deleting anything, once; every other delete goes to BookKeeper as on a stock broker.
 *
 * <p>An id gets here only once it is safe to leave its ledger to the worker: its pending deletion is durable on the
 * queue <em>and</em> the metadata write that dropped it succeeded ({@link #record}), so no metadata names it any
 * more and the worker, finding it unreferenced, deletes it. An id recorded any earlier could outlive a write that
 * failed: its ledger would stay listed, the worker would keep (and at last release) its message, and a later delete
 * by a path that queues nothing (the factory's delete of a topic that is not open) would then be skipped for good.
 * A compaction's old compacted ledger is {@linkplain #hold held} while the compaction runs: its delete, if it comes
 * first, waits for the compaction's outcome (skipped if it committed, done by the broker if it failed).
 *
 * <p>Bounded: at {@code capacity} ids (entries older than {@link #EXPIRY_NANOS} are dropped first) nothing more is
 * recorded and the broker deletes those ledgers itself, as it does without defer mode. The registry lives in the
 * broker's memory only: a restart forgets it, which is safe both ways (a ledger already dropped by a successful
 * write is on the queue, whoever deletes it; a broker started without defer mode deletes everything itself).
 */
final class DeferredDeletes {
    /** An id the broker has not tried to delete this long after its write never will: its entry is dropped. */
    static final long EXPIRY_NANOS = TimeUnit.MINUTES.toNanos(10);
    /** How long a delete waits for the outcome of a compaction holding its ledger before the broker deletes it. */
    static final long HOLD_WAIT_MS = TimeUnit.SECONDS.toMillis(60);

    private static final CompletableFuture<Boolean> DELETE = CompletableFuture.completedFuture(false);
    private static final CompletableFuture<Boolean> SKIP = CompletableFuture.completedFuture(true);

    private record Entry(long recordedNanos, CompletableFuture<Boolean> skip) {
    }

    /** A compaction's hold on the compacted ledger it replaces. */
    interface Hold {
        /** The compaction committed: the broker's delete of the ledger is skipped. */
        void confirm();

        /** The compaction failed: the ledger is still its topic's, and whoever deletes it later does. */
        void cancel();
    }

    private static final Hold NO_HOLD = new Hold() {
        @Override
        public void confirm() {
        }

        @Override
        public void cancel() {
        }
    };

    private final int capacity;
    private final long expiryNanos;
    private final long holdWaitMs;
    private final LongSupplier clock;
    private final Map<Long, Entry> entries = new ConcurrentHashMap<>();

    DeferredDeletes(int capacity) {
        this(capacity, EXPIRY_NANOS, HOLD_WAIT_MS, System::nanoTime);
    }

    DeferredDeletes(int capacity, long expiryNanos, long holdWaitMs, LongSupplier clock) {
        if (capacity < 1) {
            throw new IllegalArgumentException("capacity must be positive: " + capacity);
        }
        this.capacity = capacity;
        this.expiryNanos = expiryNanos;
        this.holdWaitMs = holdWaitMs;
        this.clock = clock;
    }

    /**
     * Records ledgers whose pending deletions are durable and whose dropping write succeeded. Returns how many were
     * recorded; the rest (registry full) the broker deletes itself.
     */
    int record(Collection<Long> ledgerIds) {
        int recorded = 0;
        for (long id : ledgerIds) {
            if (add(id, new Entry(clock.getAsLong(), SKIP))) {
                recorded++;
            }
        }
        Metrics.DEFER_REGISTRY_SIZE.set(entries.size());
        return recorded;
    }

    /**
     * Holds {@code ledgerId} while a compaction that will replace it runs; a no-op hold if the registry is full (the
     * broker then deletes it itself).
     */
    Hold hold(long ledgerId) {
        CompletableFuture<Boolean> outcome = new CompletableFuture<>();
        Entry entry = new Entry(clock.getAsLong(), outcome);
        if (!add(ledgerId, entry)) {
            return NO_HOLD;
        }
        Metrics.DEFER_REGISTRY_SIZE.set(entries.size());
        return new Hold() {
            @Override
            public void confirm() {
                outcome.complete(true);
            }

            @Override
            public void cancel() {
                entries.remove(ledgerId, entry);
                outcome.complete(false);
                Metrics.DEFER_REGISTRY_SIZE.set(entries.size());
            }
        };
    }

    /**
     * The broker is deleting {@code ledgerId}: completes with true if that delete is to be skipped (the worker
     * deletes the ledger), false if it goes to BookKeeper. An id is claimed once.
     */
    CompletableFuture<Boolean> claim(long ledgerId) {
        Entry e = entries.remove(ledgerId);
        if (e == null) {
            return DELETE;
        }
        Metrics.DEFER_REGISTRY_SIZE.set(entries.size());
        if (expired(e, clock.getAsLong())) {
            return DELETE;
        }
        if (e.skip().isDone()) {
            return e.skip();
        }
        // A compaction still running: its outcome decides, and a compaction that never ends leaves it to the broker.
        return e.skip().completeOnTimeout(false, holdWaitMs, TimeUnit.MILLISECONDS);
    }

    int size() {
        return entries.size();
    }

    private boolean add(long id, Entry entry) {
        if (entries.size() >= capacity) {
            entries.values().removeIf(e -> expired(e, entry.recordedNanos()));
        }
        if (entries.size() >= capacity) {
            Metrics.DEFER_FULL.inc();
            return false;
        }
        entries.put(id, entry);
        return true;
    }

    private boolean expired(Entry e, long now) {
        return now - e.recordedNanos() > expiryNanos;
    }
}
