package org.ledgerdeletion.broker;

import java.util.Collections;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.OptionalLong;
import java.util.concurrent.CompletableFuture;
import java.util.function.Supplier;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * A compaction, mark before update: the topic's current compacted ledger (the one a successful compaction replaces
 * and Pulsar's compactor subscription then deletes) is made durable on the queue before the compaction runs.
 *
 * <ul>
 *   <li>Queued, then the compaction runs. If it commits, the old compacted ledger is no longer its topic's and the
 *       worker deletes it (or finds it gone: the broker deletes it too, unless defer mode holds it). If it fails,
 *       the ledger is still the topic's and the worker keeps it (in use) until a later compaction replaces it.</li>
 *   <li>Not queued in time (the queue down): the compaction does not run and fails as on any error; the broker's
 *       compaction check tries again later. Nothing is replaced, nothing is dropped unmarked.</li>
 *   <li>No current compacted ledger (a first compaction, or one that cannot be opened): nothing to queue.</li>
 * </ul>
 * In defer mode the old ledger is {@linkplain DeferredDeletes#hold held} while the compaction runs: the broker's
 * delete of it (after the compactor subscription's acknowledgement, or the subscription's removal once the
 * compaction ends) is skipped if the compaction committed and done by the broker if it failed.
 *
 * <p>Queued once: a compaction that keeps failing is tried again by the broker (about once a minute), and a
 * compaction of a topic with nothing new commits without replacing anything; each time the topic's compacted ledger
 * is the same. Its first copy stays on the queue (the worker keeps it while the topic names the ledger, the nightly
 * replay after that) until the ledger is gone, so those tries queue nothing more: the last compacted ledger queued
 * for each topic is remembered, for at most {@link #REMEMBERED} topics (one forgotten is queued again: a duplicate,
 * settled as the first copy is). A compaction that replaces it leaves the topic a new compacted ledger, queued by
 * the next compaction as usual.
 */
final class CompactedLedgers {
    private static final Logger log = LoggerFactory.getLogger(CompactedLedgers.class);
    /** How many topics' last queued compacted ledger this broker remembers (least recently queued forgotten). */
    static final int REMEMBERED = 10_000;

    private final Marker marker;
    private final DeferredDeletes deferred;
    private final Map<String, Long> queued;

    /** {@code deferred}: defer mode's registry, or null. */
    CompactedLedgers(Marker marker, DeferredDeletes deferred) {
        this(marker, deferred, REMEMBERED);
    }

    CompactedLedgers(Marker marker, DeferredDeletes deferred, int remembered) {
        this.marker = marker;
        this.deferred = deferred;
        this.queued = Collections.synchronizedMap(new LinkedHashMap<>(16, 0.75f, true) {
            @Override
            protected boolean removeEldestEntry(Map.Entry<String, Long> eldest) {
                return size() > remembered;
            }
        });
    }

    /**
     * Runs {@code compaction} of {@code topic} once its current compacted ledger ({@code current}) is queued.
     * Always completes, as the compaction does or with the reason it did not run.
     */
    CompletableFuture<Void> compact(String topic, CompletableFuture<OptionalLong> current,
                                    Supplier<CompletableFuture<Void>> compaction) {
        return current.exceptionally(e -> {
            // The loaded compacted ledger could not be opened: Pulsar's acknowledgement then fails before it
            // replaces (or deletes) anything.
            log.warn("[ledger-deletion] [{}] the current compacted ledger is unknown ({}): nothing queued", topic,
                    e.toString());
            return OptionalLong.empty();
        }).thenCompose(id -> {
            if (id.isEmpty()) {
                return run(compaction);
            }
            long ledger = id.getAsLong();
            CompletableFuture<Void> marked;
            if (Long.valueOf(ledger).equals(queued.get(topic))) {
                Metrics.COMPACTED_REQUEUES_SKIPPED.inc();
                log.info("[ledger-deletion] [{}] compaction tried again with compacted ledger {}: already queued",
                        topic, ledger);
                marked = CompletableFuture.completedFuture(null);
            } else {
                Metrics.WRITES_HELD.inc();
                log.info("[ledger-deletion] [{}] compaction replaces compacted ledger {}: marking first", topic,
                        ledger);
                marked = mark(List.of(PendingDeletion.compactedLedger(topic, ledger)))
                        .thenRun(() -> queued.put(topic, ledger));
            }
            return marked.handle((v, e) -> e).thenCompose(e -> {
                if (e != null) {
                    Metrics.WRITES_FAILED.inc();
                    log.warn("[ledger-deletion] [{}] compaction not run: compacted ledger {} could not be queued ({});"
                            + " it stays the topic's", topic, id.getAsLong(), e.toString());
                    return CompletableFuture.failedFuture(new IllegalStateException(
                            "ledger-deletion extension: compaction not run, its compacted ledger " + id.getAsLong()
                                    + " could not be queued: " + e, e));
                }
                DeferredDeletes.Hold hold = deferred == null ? null : deferred.hold(id.getAsLong());
                return run(compaction).whenComplete((v, failure) -> {
                    if (hold == null) {
                        return;
                    }
                    if (failure == null) {
                        hold.confirm();
                    } else {
                        hold.cancel();
                    }
                });
            });
        });
    }

    private CompletableFuture<Void> mark(List<PendingDeletion> drops) {
        try {
            CompletableFuture<Void> f = marker.mark(drops);
            return f != null ? f : CompletableFuture.failedFuture(new IllegalStateException("no mark future"));
        } catch (Throwable e) {
            return CompletableFuture.failedFuture(e);
        }
    }

    private static CompletableFuture<Void> run(Supplier<CompletableFuture<Void>> compaction) {
        try {
            CompletableFuture<Void> f = compaction.get();
            return f != null ? f : CompletableFuture.failedFuture(new IllegalStateException("no compaction future"));
        } catch (Throwable e) {
            return CompletableFuture.failedFuture(e);
        }
    }
}
