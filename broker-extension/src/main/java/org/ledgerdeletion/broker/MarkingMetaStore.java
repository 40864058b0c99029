package org.ledgerdeletion.broker;

import java.lang.reflect.InvocationHandler;
import java.lang.reflect.InvocationTargetException;
import java.lang.reflect.Method;
import java.lang.reflect.Proxy;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.OptionalLong;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.RejectedExecutionException;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.function.BiConsumer;
import java.util.function.Consumer;
import java.util.function.Supplier;
import org.apache.bookkeeper.common.util.OrderedExecutor;
import org.apache.bookkeeper.mledger.ManagedLedgerException;
import org.apache.bookkeeper.mledger.ManagedLedgerException.MetaStoreException;
import org.apache.bookkeeper.mledger.impl.MetaStore;
import org.apache.bookkeeper.mledger.impl.MetaStore.MetaStoreCallback;
import org.apache.pulsar.metadata.api.Stat;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * One managed ledger's view of the metadata store, mark before update: a write that drops ledgers (the ledger
 * list, a cursor's ledger or its delayed-delivery bucket ledgers, a cursor, the whole topic) first has a pending
 * deletion made durable for each dropped ledger and offloaded copy (PIP-186's order).
 *
 * <p>A {@link Proxy} over the broker's own {@code MetaStore} interface, which calls the real store reflectively
 * and reads its metadata objects as bytes ({@link MetaStoreAdapter}): one jar serves every Pulsar line whatever
 * its metadata classes. It intercepts the six calls that read or write this managed ledger's list, its cursors
 * and its removal; everything else goes to the real store unchanged.
 *
 * <p>What a write drops is the difference from the last state this store read or wrote; when that state is
 * unknown (never read, or a write of it failed, which may or may not have landed) it is read afresh first; a
 * cursor's removal and the topic's always read afresh. If the marks cannot be made durable in time:
 * <ul>
 *   <li>a write that only drops (a trim, an offload's bookkeeping) fails as on any metadata error: the ledgers
 *       stay listed, the broker deletes nothing, and drops them again later;</li>
 *   <li>a write that also adds a ledger (a rollover: producers wait on it) goes ahead, writing the ledgers with data
 *       it would drop back into the list as they were, to be queued by a later write (empty ones Pulsar deletes
 *       itself once the write lands: let go, counted unmarked);</li>
 *   <li>a cursor write (a cursor's ledger switched, a cursor closed with its position in the znode, a bucket
 *       property removed), a cursor's removal and a topic's removal go ahead as on a stock broker: failing them
 *       would lose acknowledgements or refuse unsubscribes and deletions. What they drop is left unmarked (logged,
 *       counted in {@code ledger_deletion_broker_unmarked_total}): the broker deletes those ledgers itself right
 *       after such a write (topics' ledgers before it), so only a failed delete or a crash in between leaves one
 *       behind, as on stock, and {@code scan} finds it. A later message would arrive after the metadata forgot
 *       the ledger, which is what marking first exists to avoid, and a closing broker has no later write.</li>
 * </ul>
 * Every path ends in the caller's callback, exactly once: an exception anywhere in the extension's own code
 * fails the write (or lets a write that must go ahead proceed), never leaves the topic's metadata mutex held.
 */
final class MarkingMetaStore implements InvocationHandler {
    private static final Logger log = LoggerFactory.getLogger(MarkingMetaStore.class);

    private final MetaStore delegate;
    private final String managedLedgerName;
    private final String topic;
    private final Marker marker;
    private final OrderedExecutor executor;
    private final MetaStoreAdapter adapter;
    // Defer mode's registry (null: off): what a successful write dropped, once queued, the worker deletes.
    private final DeferredDeletes deferred;
    // The compacted ledger each topic's compaction service has loaded (null: not known), dropped with __compaction.
    private final CompactedLedgerIndex compacted;
    // The topic's ledger list as last read or written; null: unknown, read it before the next write.
    private volatile LedgerList lastInfo;
    // Per cursor (znode name): the ledgers its last stored info named; absent: unknown, read it first.
    private final Map<String, CursorLedgers> cursorLedgers = new ConcurrentHashMap<>();

    private MarkingMetaStore(MetaStore delegate, String managedLedgerName, Marker marker, OrderedExecutor executor,
                             MetaStoreAdapter adapter, DeferredDeletes deferred, CompactedLedgerIndex compacted) {
        this.delegate = delegate;
        this.managedLedgerName = managedLedgerName;
        this.topic = ManagedLedgerName.parse(managedLedgerName).orElseThrow(
                () -> new IllegalArgumentException("not a topic's managed ledger: " + managedLedgerName)).topic();
        this.marker = marker;
        this.executor = executor;
        this.adapter = adapter;
        this.deferred = deferred;
        this.compacted = compacted;
    }

    /** {@code delegate}, marking before the writes of managed ledger {@code managedLedgerName} that drop ledgers. */
    static MetaStore wrap(MetaStore delegate, String managedLedgerName, Marker marker, OrderedExecutor executor,
                          MetaStoreAdapter adapter) {
        return wrap(delegate, managedLedgerName, marker, executor, adapter, null, null);
    }

    /**
     * As above; in defer mode ({@code deferred} not null) each write that succeeds records the BookKeeper ledgers it
     * dropped and had queued, so the broker's own delete of them is left to the worker; {@code compacted} (or null)
     * names the topic's compacted ledger, queued with the removal of its {@code __compaction} cursor.
     */
    static MetaStore wrap(MetaStore delegate, String managedLedgerName, Marker marker, OrderedExecutor executor,
                          MetaStoreAdapter adapter, DeferredDeletes deferred, CompactedLedgerIndex compacted) {
        return (MetaStore) Proxy.newProxyInstance(MetaStore.class.getClassLoader(), new Class<?>[] {MetaStore.class},
                new MarkingMetaStore(delegate, managedLedgerName, marker, executor, adapter, deferred, compacted));
    }

    @Override
    @SuppressWarnings("unchecked")
    public Object invoke(Object proxy, Method method, Object[] args) throws Throwable {
        String name = method.getName();
        if (method.getDeclaringClass() == Object.class) {
            return switch (name) {
                case "equals" -> proxy == args[0];
                case "hashCode" -> System.identityHashCode(proxy);
                default -> "MarkingMetaStore[" + managedLedgerName + "]";
            };
        }
        int arity = args == null ? 0 : args.length;
        if (arity > 0 && managedLedgerName.equals(args[0])) {
            switch (name + "/" + arity) {
                case "getManagedLedgerInfo/4" -> {
                    getManagedLedgerInfo((boolean) args[1], (Map<String, String>) args[2],
                            (MetaStoreCallback<Object>) args[3]);
                    return null;
                }
                case "asyncUpdateLedgerIds/4" -> {
                    asyncUpdateLedgerIds(args[1], (Stat) args[2], once((MetaStoreCallback<Object>) args[3]));
                    return null;
                }
                case "asyncGetCursorInfo/3" -> {
                    asyncGetCursorInfo((String) args[1], (MetaStoreCallback<Object>) args[2]);
                    return null;
                }
                case "asyncUpdateCursorInfo/5" -> {
                    asyncUpdateCursorInfo((String) args[1], args[2], (Stat) args[3],
                            once((MetaStoreCallback<Object>) args[4]));
                    return null;
                }
                case "asyncRemoveCursor/3" -> {
                    asyncRemoveCursor((String) args[1], once((MetaStoreCallback<Object>) args[2]));
                    return null;
                }
                case "removeManagedLedger/2" -> {
                    removeManagedLedger(once((MetaStoreCallback<Object>) args[1]));
                    return null;
                }
                default -> {
                    // not intercepted: below
                }
            }
        }
        if (method.isDefault() && name.equals("getManagedLedgerInfo")) {
            // The interface's shorter form calls the full one on this proxy, which tracks what it reads.
            return InvocationHandler.invokeDefault(proxy, method, args);
        }
        try {
            return method.invoke(delegate, args);
        } catch (InvocationTargetException e) {
            throw e.getCause();
        }
    }

    // ---------------------------------------------------------------------------------------------------------
    // The intercepted calls, for this managed ledger's own name.

    private void getManagedLedgerInfo(boolean createIfMissing, Map<String, String> properties,
                                      MetaStoreCallback<Object> callback) {
        MetaStoreAdapter.call(adapter.getManagedLedgerInfo, delegate, managedLedgerName, createIfMissing, properties,
                callback((info, stat) -> {
                    lastInfo = readOrNull("ledger list", () -> LedgerList.parse(adapter.ledgerInfoBytes(info)));
                    callback.operationComplete(info, stat);
                }, callback::operationFailed));
    }

    private void asyncUpdateLedgerIds(Object info, Stat stat, MetaStoreCallback<Object> callback) {
        String what = "ledger list";
        guarded(callback, what, () -> {
            // Bytes now: Pulsar may reuse the object once this call returns.
            byte[] bytes = adapter.ledgerInfoBytes(info);
            LedgerList after = LedgerList.parse(bytes);
            CompletableFuture<LedgerList> current = currentInfo();
            // Known state: the common case, written at once with Pulsar's own object; else a copy, later.
            boolean inCall = current.isDone();
            current.whenComplete((before, readError) -> guarded(callback, what, () -> {
                if (readError != null) {
                    fail(what, "the stored ledger list could not be read (" + readError + ")", callback);
                    return;
                }
                List<PendingDeletion> drops = before == null ? List.of() : LedgerDrops.droppedBy(topic, before, after);
                if (drops.isEmpty()) {
                    writeLedgerIds(inCall ? info : adapter.ledgerInfo(bytes), after, stat, List.of(), callback);
                    return;
                }
                mark(drops).whenComplete((v, e) -> guarded(callback, what, () -> {
                    if (e == null) {
                        writeLedgerIds(adapter.ledgerInfo(bytes), after, stat, drops, callback);
                    } else if (!LedgerDrops.addsLedger(before, after)) {
                        // A trim (or an offload's bookkeeping): fails, so the broker deletes nothing.
                        fail(what, "its dropped ledgers could not be queued (" + e + "); they stay listed", callback);
                    } else {
                        // A rollover must go ahead (producers wait on it): written, keeping listed what it would
                        // drop (what an earlier failed trim removed from the broker's memory only).
                        LedgerList kept = LedgerList.parse(LedgerDrops.keepListed(before, after));
                        Metrics.WRITES_KEPT.inc();
                        List<PendingDeletion> letGo = LedgerDrops.droppedBy(topic, before, kept);
                        for (PendingDeletion d : letGo) {
                            Metrics.UNMARKED.labels(d.ledgerType().name()).inc();
                        }
                        log.warn("[ledger-deletion] [{}] ledger list written keeping {} ledger copies listed: they"
                                + " could not be queued ({}); empty ones the broker deletes itself, unqueued: {}",
                                managedLedgerName, drops.size() - letGo.size(), e.toString(), letGo);
                        writeLedgerIds(adapter.ledgerInfo(kept.bytes()), kept, stat, List.of(), callback);
                    }
                }));
            }));
        });
    }

    /** Writes the ledger list; {@code queued}: what it drops, durable on the queue (deferred once written). */
    private void writeLedgerIds(Object info, LedgerList written, Stat stat, List<PendingDeletion> queued,
                                MetaStoreCallback<Object> callback) {
        MetaStoreAdapter.call(adapter.asyncUpdateLedgerIds, delegate, managedLedgerName, info, stat,
                tracking(callback, () -> {
                    lastInfo = written;
                    defer(queued);
                }, () -> lastInfo = null));
    }

    private void asyncGetCursorInfo(String cursor, MetaStoreCallback<Object> callback) {
        MetaStoreAdapter.call(adapter.asyncGetCursorInfo, delegate, managedLedgerName, cursor,
                callback((info, stat) -> {
                    CursorLedgers read = readOrNull("cursor " + cursor,
                            () -> CursorLedgers.parse(adapter.cursorInfoBytes(info)));
                    if (read != null) {
                        cursorLedgers.put(cursor, read);
                    } else {
                        cursorLedgers.remove(cursor);
                    }
                    callback.operationComplete(info, stat);
                }, callback::operationFailed));
    }

    private void asyncUpdateCursorInfo(String cursor, Object info, Stat stat, MetaStoreCallback<Object> callback) {
        String what = "cursor " + cursor;
        byte[] bytes;
        CursorLedgers after;
        try {
            bytes = adapter.cursorInfoBytes(info);
            after = CursorLedgers.parse(bytes);
        } catch (RuntimeException e) {
            log.error("[ledger-deletion] [{}] {}: its info could not be read (a defect, please report it): written"
                    + " unmarked, scan finds what it drops", managedLedgerName, what, e);
            cursorLedgers.remove(cursor);
            MetaStoreAdapter.call(adapter.asyncUpdateCursorInfo, delegate, managedLedgerName, cursor, info, stat,
                    callback);
            return;
        }
        Runnable written = () -> cursorLedgers.put(cursor, after);
        Runnable unknown = () -> cursorLedgers.remove(cursor);
        CursorLedgers known = cursorLedgers.get(cursor);
        if (known != null && LedgerDrops.droppedByCursorWrite(topic, cursor, known, after).isEmpty()) {
            // The common case (same ledger, same buckets): nothing dropped, no extra read.
            MetaStoreAdapter.call(adapter.asyncUpdateCursorInfo, delegate, managedLedgerName, cursor, info, stat,
                    tracking(callback, written, unknown));
            return;
        }
        // A cursor ledger switch (or the close that stores the position in the znode with no ledger), or a bucket
        // property removed (Pulsar removes it after deleting the bucket's snapshot ledger).
        CompletableFuture<CursorLedgers> before = known != null ? CompletableFuture.completedFuture(known)
                : readCursor(cursor);
        markOrGoAhead(what, before.thenApply(b -> LedgerDrops.droppedByCursorWrite(topic, cursor, b, after)))
                .whenComplete((queued, e) -> guarded(callback, what, () -> MetaStoreAdapter.call(
                        adapter.asyncUpdateCursorInfo, delegate, managedLedgerName, cursor, adapter.cursorInfo(bytes),
                        stat, tracking(callback, () -> {
                            written.run();
                            defer(queued);
                        }, unknown))));
    }

    private void asyncRemoveCursor(String cursor, MetaStoreCallback<Object> callback) {
        String what = "removal of cursor " + cursor;
        // Read afresh, not from what this store last saw: a cursor write that failed may still have landed.
        // Its ledger and any bucket snapshot ledgers its properties still name (a subscription deleted while
        // delayed delivery is off for the topic keeps them: Pulsar clears buckets only when it is on).
        markOrGoAhead(what, readCursor(cursor).thenApply(
                        before -> withCompactedLedger(cursor,
                                LedgerDrops.droppedByCursorWrite(topic, cursor, before, CursorLedgers.NONE))))
                .whenComplete((queued, e) -> guarded(callback, what, () -> MetaStoreAdapter.call(
                        adapter.asyncRemoveCursor, delegate, managedLedgerName, cursor, tracking(callback, () -> {
                            cursorLedgers.remove(cursor);
                            defer(queued);
                        }, () -> cursorLedgers.remove(cursor)))));
    }

    /**
     * {@code drops}, plus the topic's compacted ledger when the cursor is {@code __compaction}: Pulsar deletes that
     * ledger right after removing the cursor (the subscription deleted, or the topic).
     */
    private List<PendingDeletion> withCompactedLedger(String cursor, List<PendingDeletion> drops) {
        if (compacted == null || !CompactedLedgerIndex.COMPACTION_CURSOR.equals(cursor)) {
            return drops;
        }
        OptionalLong id = compacted.current(topic);
        if (id.isEmpty()) {
            return drops;
        }
        List<PendingDeletion> out = new ArrayList<>(drops);
        out.add(PendingDeletion.compactedLedger(topic, id.getAsLong()));
        return out;
    }

    private void removeManagedLedger(MetaStoreCallback<Object> callback) {
        String what = "topic metadata";
        // Read afresh: the topic is going, and whatever its metadata still lists is queued with it. Nothing is
        // deferred: Pulsar deletes a topic's remaining ledgers before this write, not after it.
        markOrGoAhead(what, readInfo().thenApply(
                        before -> before == null ? List.<PendingDeletion>of() : LedgerDrops.droppedWithTopic(topic,
                                before)))
                .whenComplete((v, e) -> guarded(callback, what, () -> MetaStoreAdapter.call(
                        adapter.removeManagedLedger, delegate, managedLedgerName,
                        tracking(callback, () -> lastInfo = null, () -> lastInfo = null))));
    }

    // ---------------------------------------------------------------------------------------------------------

    private CompletableFuture<Void> mark(List<PendingDeletion> drops) {
        Metrics.WRITES_HELD.inc();
        log.info("[ledger-deletion] [{}] metadata write drops {} ledger copies: marking first {}", managedLedgerName,
                drops.size(), drops);
        try {
            CompletableFuture<Void> f = marker.mark(drops);
            return f != null ? f : CompletableFuture.failedFuture(new IllegalStateException("no mark future"));
        } catch (Throwable e) {
            return CompletableFuture.failedFuture(e);
        }
    }

    /**
     * Marks what {@code drops} completes with, for a write that goes ahead whatever happens: always completes
     * normally, once the marks are durable (with what was marked) or have failed (with nothing: what they were for
     * is then logged and counted).
     */
    private CompletableFuture<List<PendingDeletion>> markOrGoAhead(String what,
                                                                   CompletableFuture<List<PendingDeletion>> drops) {
        CompletableFuture<List<PendingDeletion>> done = new CompletableFuture<>();
        drops.whenComplete((list, readError) -> {
            if (readError != null) {
                log.warn("[ledger-deletion] [{}] {}: the stored metadata could not be read ({}); written unmarked,"
                        + " scan finds what it drops", managedLedgerName, what, readError.toString());
                done.complete(List.of());
                return;
            }
            if (list.isEmpty()) {
                done.complete(List.of());
                return;
            }
            mark(list).whenComplete((v, e) -> {
                if (e != null) {
                    for (PendingDeletion d : list) {
                        Metrics.UNMARKED.labels(d.ledgerType().name()).inc();
                    }
                    log.warn("[ledger-deletion] [{}] {} written without its pending deletions ({}): left to scan: {}",
                            managedLedgerName, what, e.toString(), list);
                    done.complete(List.of());
                } else {
                    done.complete(list);
                }
            });
        });
        return done;
    }

    /**
     * Defer mode, after a write that succeeded: its queued BookKeeper copies that the broker deletes through the
     * storage's clients and that the worker can always delete (its closed ledgers, the compacted ledger a
     * {@code __compaction} cursor's removal drops) are left to the worker. Not recorded, so the broker deletes them
     * as a stock broker does (each is still queued, which covers a delete that fails):
     * <ul>
     *   <li>cursor ledgers: Pulsar deletes a cursor's old ledger without closing it (at a ledger switch, at a
     *       close, at an unsubscribe), so only a worker able to recover open ledgers (fence them on the bookies)
     *       could delete it, and they come one per switch or unload, not in the bursts defer mode is for;</li>
     *   <li>bucket ledgers: deleted through another client, and before the write that drops them;</li>
     *   <li>schema ledgers: deleted by the schema storage, not through this store.</li>
     * </ul>
     */
    private void defer(List<PendingDeletion> queued) {
        if (deferred == null || queued == null || queued.isEmpty()) {
            return;
        }
        List<Long> ids = queued.stream()
                .filter(d -> d.ledgerType() == LedgerType.LEDGER
                        && (d.component() == LedgerComponent.MANAGED_LEDGER
                        || d.component() == LedgerComponent.COMPACTED_LEDGER))
                .map(PendingDeletion::ledgerId).toList();
        if (!ids.isEmpty()) {
            int n = deferred.record(ids);
            log.info("[ledger-deletion] [{}] {} of {} ledgers left to the worker (defer mode){}", managedLedgerName,
                    n, ids.size(), n < ids.size() ? "; the registry is full, the broker deletes the rest" : "");
        }
    }

    private CompletableFuture<LedgerList> currentInfo() {
        LedgerList known = lastInfo;
        return known != null ? CompletableFuture.completedFuture(known) : readInfo();
    }

    /** The stored ledger list, or null if the topic has no metadata (nothing to drop). */
    private CompletableFuture<LedgerList> readInfo() {
        CompletableFuture<LedgerList> f = new CompletableFuture<>();
        try {
            MetaStoreAdapter.call(adapter.getManagedLedgerInfo, delegate, managedLedgerName, false, null,
                    callback((info, stat) -> supply(f, () -> LedgerList.parse(adapter.ledgerInfoBytes(info))),
                            e -> completeRead(f, e, null)));
        } catch (RuntimeException e) {
            f.completeExceptionally(e);
        }
        return f;
    }

    /** The ledgers the cursor's stored info names; {@link CursorLedgers#NONE} for a cursor not stored. */
    private CompletableFuture<CursorLedgers> readCursor(String cursor) {
        CompletableFuture<CursorLedgers> f = new CompletableFuture<>();
        try {
            MetaStoreAdapter.call(adapter.asyncGetCursorInfo, delegate, managedLedgerName, cursor,
                    callback((info, stat) -> supply(f, () -> CursorLedgers.parse(adapter.cursorInfoBytes(info))),
                            e -> completeRead(f, e, CursorLedgers.NONE)));
        } catch (RuntimeException e) {
            f.completeExceptionally(e);
        }
        return f;
    }

    private static <T> void supply(CompletableFuture<T> f, Supplier<T> value) {
        try {
            f.complete(value.get());
        } catch (RuntimeException e) {
            f.completeExceptionally(e);
        }
    }

    /** A read that failed: {@code absent} if there is nothing stored, the failure otherwise. */
    private static <T> void completeRead(CompletableFuture<T> f, MetaStoreException e, T absent) {
        if (e instanceof ManagedLedgerException.MetadataNotFoundException) {
            f.complete(absent);
        } else {
            f.completeExceptionally(e);
        }
    }

    /** A store callback of {@code complete} and {@code failed} (untyped: its result is this line's metadata class). */
    private MetaStoreCallback<Object> callback(BiConsumer<Object, Stat> complete, Consumer<MetaStoreException> failed) {
        return new MetaStoreCallback<>() {
            @Override
            public void operationComplete(Object result, Stat stat) {
                complete.accept(result, stat);
            }

            @Override
            public void operationFailed(MetaStoreException e) {
                failed.accept(e);
            }
        };
    }

    /** What {@code read} returns, or null (logged: a defect) if it throws; the state is then read again later. */
    private <T> T readOrNull(String what, Supplier<T> read) {
        try {
            return read.get();
        } catch (RuntimeException e) {
            log.error("[ledger-deletion] [{}] {} could not be read (a defect, please report it); read again before"
                    + " the next write", managedLedgerName, what, e);
            return null;
        }
    }

    /** Runs {@code body}; anything it throws fails the write through {@link #fail}. */
    private void guarded(MetaStoreCallback<Object> callback, String what, Runnable body) {
        try {
            body.run();
        } catch (Throwable e) {
            fail(what, "the extension failed (" + e + ")", callback);
        }
    }

    /** The write fails, on the managed ledger's own ordered thread (as the store's own failures do). */
    private void fail(String what, String why, MetaStoreCallback<Object> callback) {
        Metrics.WRITES_FAILED.inc();
        log.warn("[ledger-deletion] [{}] {} not written: {}", managedLedgerName, what, why);
        MetaStoreException ex = new MetaStoreException("ledger-deletion extension: " + what + " not written: " + why);
        try {
            executor.executeOrdered(managedLedgerName, () -> callback.operationFailed(ex));
        } catch (RejectedExecutionException shutDown) {
            callback.operationFailed(ex);
        }
    }

    /** {@code callback}, then {@code onSuccess} or {@code onFailure} first (neither may keep it from running). */
    private MetaStoreCallback<Object> tracking(MetaStoreCallback<Object> callback, Runnable onSuccess,
                                              Runnable onFailure) {
        return new MetaStoreCallback<>() {
            @Override
            public void operationComplete(Object result, Stat stat) {
                run(onSuccess);
                callback.operationComplete(result, stat);
            }

            @Override
            public void operationFailed(MetaStoreException e) {
                run(onFailure);
                callback.operationFailed(e);
            }

            private void run(Runnable r) {
                try {
                    r.run();
                } catch (RuntimeException e) {
                    log.error("[ledger-deletion] [{}] tracking a write failed", managedLedgerName, e);
                }
            }
        };
    }

    /** {@code callback} completed at most once: a second completion (a path that failed after it) is ignored. */
    private MetaStoreCallback<Object> once(MetaStoreCallback<Object> callback) {
        AtomicBoolean done = new AtomicBoolean();
        return new MetaStoreCallback<>() {
            @Override
            public void operationComplete(Object result, Stat stat) {
                if (done.compareAndSet(false, true)) {
                    callback.operationComplete(result, stat);
                } else {
                    log.warn("[ledger-deletion] [{}] a second completion of a metadata write ignored",
                            managedLedgerName);
                }
            }

            @Override
            public void operationFailed(MetaStoreException e) {
                if (done.compareAndSet(false, true)) {
                    callback.operationFailed(e);
                } else {
                    log.warn("[ledger-deletion] [{}] a second completion of a metadata write ignored ({})",
                            managedLedgerName, e.toString());
                }
            }
        };
    }
}
