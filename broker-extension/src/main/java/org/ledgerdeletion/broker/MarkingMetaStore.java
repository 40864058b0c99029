package org.ledgerdeletion.broker;

import java.util.List;
import java.util.Map;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ConcurrentHashMap;
import java.util.function.Consumer;
import org.apache.bookkeeper.common.util.OrderedExecutor;
import org.apache.bookkeeper.mledger.ManagedLedgerException;
import org.apache.bookkeeper.mledger.ManagedLedgerException.MetaStoreException;
import org.apache.bookkeeper.mledger.impl.MetaStore;
import org.apache.bookkeeper.mledger.proto.MLDataFormats.ManagedCursorInfo;
import org.apache.bookkeeper.mledger.proto.MLDataFormats.ManagedLedgerInfo;
import org.apache.pulsar.metadata.api.Stat;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * One managed ledger's view of the metadata store, mark before update: a write that drops ledgers (the
 * ledger list, a cursor's ledger or delayed-delivery bucket ledgers, a cursor, the whole topic) first publishes a pending deletion for each
 * dropped ledger and offloaded copy, and goes ahead only once they are all durable (PIP-186's order). If
 * they cannot be made durable the write fails as on any metadata error: the ledgers stay listed.
 *
 * <p>What a write drops is the difference from the last state this store read or wrote (the managed
 * ledger reads its list at open; cursors are read at recovery or created through here); when that state
 * is unknown it is read first. A failed write keeps the old state, so the next write that succeeds
 * drops (and marks) them again.
 */
final class MarkingMetaStore implements MetaStore {
    private static final Logger log = LoggerFactory.getLogger(MarkingMetaStore.class);

    private final MetaStore delegate;
    private final String managedLedgerName;
    private final String topic;
    private final PendingDeletePublisher publisher;
    private final OrderedExecutor executor;
    private volatile ManagedLedgerInfo lastInfo;
    // Per cursor (znode name): the ledgers its last stored info named, its own and its delayed-delivery buckets'.
    private final Map<String, LedgerDrops.CursorLedgers> cursorLedgers = new ConcurrentHashMap<>();

    MarkingMetaStore(MetaStore delegate, String managedLedgerName, PendingDeletePublisher publisher,
                     OrderedExecutor executor) {
        this.delegate = delegate;
        this.managedLedgerName = managedLedgerName;
        this.topic = LedgerDrops.topicName(managedLedgerName);
        this.publisher = publisher;
        this.executor = executor;
    }

    private boolean mine(String name) {
        return managedLedgerName.equals(name);
    }

    @Override
    public void getManagedLedgerInfo(String name, boolean createIfMissing, Map<String, String> properties,
                                     MetaStoreCallback<ManagedLedgerInfo> callback) {
        delegate.getManagedLedgerInfo(name, createIfMissing, properties, new MetaStoreCallback<>() {
            @Override
            public void operationComplete(ManagedLedgerInfo info, Stat stat) {
                if (mine(name)) {
                    lastInfo = info;
                }
                callback.operationComplete(info, stat);
            }

            @Override
            public void operationFailed(MetaStoreException e) {
                callback.operationFailed(e);
            }
        });
    }

    @Override
    public void watchManagedLedgerInfo(String name, UpdateCallback<ManagedLedgerInfo> callback) {
        delegate.watchManagedLedgerInfo(name, callback);
    }

    @Override
    public void unwatchManagedLedgerInfo(String name) {
        delegate.unwatchManagedLedgerInfo(name);
    }

    @Override
    public void asyncUpdateLedgerIds(String name, ManagedLedgerInfo info, Stat stat,
                                     MetaStoreCallback<Void> callback) {
        if (!mine(name)) {
            delegate.asyncUpdateLedgerIds(name, info, stat, callback);
            return;
        }
        currentInfo(name).whenComplete((before, readError) -> {
            if (readError != null) {
                fail(name, "ledger list", readError, callback);
                return;
            }
            List<PendingDeletion> drops = before == null ? List.of() : LedgerDrops.droppedBy(topic, before, info);
            mark(drops).whenComplete((v, e) -> {
                ManagedLedgerInfo toWrite = info;
                if (e != null) {
                    if (!LedgerDrops.addsLedger(before, info)) {
                        // A trim (or an offload's bookkeeping): fails, so the broker deletes nothing.
                        fail(name, "ledger list", e, callback);
                        return;
                    }
                    // A rollover must go ahead (producers wait on it): written, but keeping listed what it
                    // would drop (what an earlier failed trim removed from the broker's memory only).
                    toWrite = LedgerDrops.keepListed(before, info);
                    Metrics.WRITES_KEPT.inc();
                    log.warn("[ledger-deletion] [{}] ledger list written keeping {} ledger copies listed: they"
                            + " could not be queued ({})", name, drops.size(), e.toString());
                }
                ManagedLedgerInfo written = toWrite;
                delegate.asyncUpdateLedgerIds(name, written, stat, tracking(callback, __ -> lastInfo = written));
            });
        });
    }

    @Override
    public void getCursors(String name, MetaStoreCallback<List<String>> callback) {
        delegate.getCursors(name, callback);
    }

    @Override
    public void asyncGetCursorInfo(String name, String cursor, MetaStoreCallback<ManagedCursorInfo> callback) {
        delegate.asyncGetCursorInfo(name, cursor, tracking(callback, info -> {
            if (mine(name)) {
                cursorLedgers.put(cursor, LedgerDrops.CursorLedgers.of(info));
            }
        }));
    }

    @Override
    public void asyncUpdateCursorInfo(String name, String cursor, ManagedCursorInfo info, Stat stat,
                                      MetaStoreCallback<Void> callback) {
        if (!mine(name)) {
            delegate.asyncUpdateCursorInfo(name, cursor, info, stat, callback);
            return;
        }
        LedgerDrops.CursorLedgers after = LedgerDrops.CursorLedgers.of(info);
        LedgerDrops.CursorLedgers known = cursorLedgers.get(cursor);
        if (known != null && LedgerDrops.droppedByCursorWrite(topic, cursor, known, after).isEmpty()) {
            // The common case (mark-delete persisted, same ledger, same buckets): nothing dropped, no extra read.
            delegate.asyncUpdateCursorInfo(name, cursor, info, stat,
                    tracking(callback, __ -> cursorLedgers.put(cursor, after)));
            return;
        }
        // A cursor ledger switch, or a bucket property removed (Pulsar removes it after deleting the bucket's
        // snapshot ledger, or with the cursor): queued before the write that forgets them.
        currentCursor(name, cursor)
                .thenApply(before -> LedgerDrops.droppedByCursorWrite(topic, cursor, before, after))
                .thenCompose(this::mark)
                .whenComplete((v, e) -> {
                    if (e != null) {
                        fail(name, "cursor " + cursor, e, callback);
                        return;
                    }
                    delegate.asyncUpdateCursorInfo(name, cursor, info, stat,
                            tracking(callback, __ -> cursorLedgers.put(cursor, after)));
                });
    }

    @Override
    public void asyncRemoveCursor(String name, String cursor, MetaStoreCallback<Void> callback) {
        if (!mine(name)) {
            delegate.asyncRemoveCursor(name, cursor, callback);
            return;
        }
        // Its ledger and any bucket snapshot ledgers its properties still name (a subscription deleted while
        // delayed delivery is off for the topic keeps them: Pulsar clears buckets only when it is on).
        currentCursor(name, cursor)
                .thenApply(before -> LedgerDrops.droppedByCursorWrite(topic, cursor, before,
                        LedgerDrops.CursorLedgers.NONE))
                .thenCompose(this::mark)
                .whenComplete((v, e) -> {
                    if (e != null) {
                        fail(name, "removal of cursor " + cursor, e, callback);
                        return;
                    }
                    delegate.asyncRemoveCursor(name, cursor, tracking(callback, __ -> cursorLedgers.remove(cursor)));
                });
    }

    @Override
    public void removeManagedLedger(String name, MetaStoreCallback<Void> callback) {
        if (!mine(name)) {
            delegate.removeManagedLedger(name, callback);
            return;
        }
        // Read afresh: the topic is going, and whatever its metadata still lists is queued with it.
        readInfo(name)
                .thenApply(before -> before == null ? List.<PendingDeletion>of()
                        : LedgerDrops.droppedWithTopic(topic, before))
                .thenCompose(this::mark)
                .whenComplete((v, e) -> {
                    if (e != null) {
                        fail(name, "topic metadata", e, callback);
                        return;
                    }
                    delegate.removeManagedLedger(name, callback);
                });
    }

    @Override
    public Iterable<String> getManagedLedgers() throws MetaStoreException {
        return delegate.getManagedLedgers();
    }

    @Override
    public CompletableFuture<Boolean> asyncExists(String ledgerName) {
        return delegate.asyncExists(ledgerName);
    }

    @Override
    public CompletableFuture<Map<String, String>> getManagedLedgerPropertiesAsync(String name) {
        return delegate.getManagedLedgerPropertiesAsync(name);
    }

    // ---------------------------------------------------------------------------------------------------

    private CompletableFuture<Void> mark(List<PendingDeletion> drops) {
        if (drops.isEmpty()) {
            return CompletableFuture.completedFuture(null);
        }
        Metrics.WRITES_HELD.inc();
        log.info("[ledger-deletion] [{}] metadata write drops {} ledger copies: marking first {}",
                managedLedgerName, drops.size(), drops);
        return publisher.publish(drops);
    }

    private CompletableFuture<ManagedLedgerInfo> currentInfo(String name) {
        ManagedLedgerInfo known = lastInfo;
        return known != null ? CompletableFuture.completedFuture(known) : readInfo(name);
    }

    /** The stored ledger list, or null if the topic has no metadata (nothing to drop). */
    private CompletableFuture<ManagedLedgerInfo> readInfo(String name) {
        CompletableFuture<ManagedLedgerInfo> f = new CompletableFuture<>();
        delegate.getManagedLedgerInfo(name, false, null, new MetaStoreCallback<>() {
            @Override
            public void operationComplete(ManagedLedgerInfo info, Stat stat) {
                f.complete(info);
            }

            @Override
            public void operationFailed(MetaStoreException e) {
                if (e instanceof ManagedLedgerException.MetadataNotFoundException) {
                    f.complete(null);
                } else {
                    f.completeExceptionally(e);
                }
            }
        });
        return f;
    }

    /** The ledgers the cursor's stored info names; {@link LedgerDrops.CursorLedgers#NONE} for a new cursor. */
    private CompletableFuture<LedgerDrops.CursorLedgers> currentCursor(String name, String cursor) {
        LedgerDrops.CursorLedgers known = cursorLedgers.get(cursor);
        if (known != null) {
            return CompletableFuture.completedFuture(known);
        }
        CompletableFuture<LedgerDrops.CursorLedgers> f = new CompletableFuture<>();
        delegate.asyncGetCursorInfo(name, cursor, new MetaStoreCallback<>() {
            @Override
            public void operationComplete(ManagedCursorInfo info, Stat stat) {
                f.complete(LedgerDrops.CursorLedgers.of(info));
            }

            @Override
            public void operationFailed(MetaStoreException e) {
                if (e instanceof ManagedLedgerException.MetadataNotFoundException) {
                    f.complete(LedgerDrops.CursorLedgers.NONE);
                } else {
                    f.completeExceptionally(e);
                }
            }
        });
        return f;
    }

    private <T> void fail(String name, String what, Throwable e, MetaStoreCallback<T> callback) {
        Metrics.WRITES_FAILED.inc();
        log.warn("[ledger-deletion] [{}] {} not written: its dropped ledgers could not be queued ({}); they stay"
                + " listed", name, what, e.toString());
        MetaStoreException ex = new MetaStoreException("pending deletions not durable: " + e);
        executor.executeOrdered(name, () -> callback.operationFailed(ex));
    }

    private static <T> MetaStoreCallback<T> tracking(MetaStoreCallback<T> callback, Consumer<T> onSuccess) {
        return new MetaStoreCallback<>() {
            @Override
            public void operationComplete(T result, Stat stat) {
                onSuccess.accept(result);
                callback.operationComplete(result, stat);
            }

            @Override
            public void operationFailed(MetaStoreException e) {
                callback.operationFailed(e);
            }
        };
    }
}
