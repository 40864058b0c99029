package org.ledgerdeletion.broker;

import io.opentelemetry.api.OpenTelemetry;
import java.util.concurrent.CompletableFuture;
import java.util.function.Supplier;
import org.apache.bookkeeper.client.BookKeeper;
import org.apache.bookkeeper.mledger.ManagedLedgerConfig;
import org.apache.bookkeeper.mledger.ManagedLedgerFactoryConfig;
import org.apache.bookkeeper.mledger.impl.ManagedLedgerFactoryImpl;
import org.apache.bookkeeper.mledger.impl.ManagedLedgerImpl;
import org.apache.bookkeeper.mledger.impl.MetaStore;
import org.apache.bookkeeper.stats.StatsLogger;
import org.apache.pulsar.metadata.api.extended.MetadataStoreExtended;

/**
 * Pulsar's managed-ledger factory, except that each managed ledger it opens gets a {@link MarkingMetaStore} around
 * the real one (the protected {@code createManagedLedger} hook). The queue's own topics (its namespace) get the
 * real store: their ledgers are never queued. In defer mode ({@code deferred} not null) each successful write
 * records the BookKeeper ledgers it queued and dropped, whose broker delete the metadata driver then skips.
 *
 * <p>Not wrapped, and why that leaves no leak: the factory's own delete of a topic that is not open
 * ({@code deleteManagedLedger}) deletes the ledgers first and the metadata last, so a crash leaves them listed,
 * never forgotten; read-only managed ledgers write nothing.
 */
public class MarkingManagedLedgerFactory extends ManagedLedgerFactoryImpl {
    private final PendingDeletePublisher publisher;
    private final MetaStoreAdapter adapter;
    private final DeferredDeletes deferred;
    private final CompactedLedgerIndex compacted;

    MarkingManagedLedgerFactory(MetadataStoreExtended metadataStore,
                                BookkeeperFactoryForCustomEnsemblePlacementPolicy bookKeeperGroupFactory,
                                ManagedLedgerFactoryConfig config, StatsLogger statsLogger,
                                OpenTelemetry openTelemetry, PendingDeletePublisher publisher,
                                MetaStoreAdapter adapter, DeferredDeletes deferred, CompactedLedgerIndex compacted)
            throws Exception {
        super(metadataStore, bookKeeperGroupFactory, config, statsLogger, openTelemetry);
        this.publisher = publisher;
        this.adapter = adapter;
        this.deferred = deferred;
        this.compacted = compacted;
    }

    @Override
    protected ManagedLedgerImpl createManagedLedger(BookKeeper bk, MetaStore store, String name,
                                                    ManagedLedgerConfig config,
                                                    Supplier<CompletableFuture<Boolean>> mlOwnershipChecker) {
        MetaStore chosen = store;
        if (!publisher.config().excluded(name)) {
            chosen = MarkingMetaStore.wrap(store, name, publisher, scheduledExecutor, adapter, deferred, compacted);
        }
        return super.createManagedLedger(bk, chosen, name, config, mlOwnershipChecker);
    }
}
