package org.ledgerdeletion.broker;

import io.netty.channel.EventLoopGroup;
import io.opentelemetry.api.OpenTelemetry;
import java.io.IOException;
import java.util.Optional;
import org.apache.bookkeeper.mledger.ManagedLedgerFactoryConfig;
import org.apache.bookkeeper.mledger.impl.ManagedLedgerFactoryImpl;
import org.apache.bookkeeper.mledger.impl.MetaStore;
import org.apache.bookkeeper.stats.StatsLogger;
import org.apache.pulsar.broker.BookKeeperClientFactory;
import org.apache.pulsar.broker.ManagedLedgerClientFactory;
import org.apache.pulsar.broker.ServiceConfiguration;
import org.apache.pulsar.metadata.api.extended.MetadataStoreExtended;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * The broker's managed-ledger storage with mark before update. Named in broker.conf:
 * {@code managedLedgerStorageClassName=org.ledgerdeletion.broker.LedgerDeletionStorage}.
 *
 * <p>Pulsar's default storage ({@link ManagedLedgerClientFactory}) builds its managed-ledger factory in the
 * protected {@code createManagedLedgerFactory}; this class builds a {@link MarkingManagedLedgerFactory} instead,
 * and everything else (BookKeeper clients, storage classes) is Pulsar's own.
 *
 * <p>Closing: the broker closes its topics (their cursors persist their positions, writes this extension may have
 * to mark) before it closes this storage, and the factory closes whatever is still open; the publisher closes
 * only after the factory, so no cursor's closing write ever finds it closed. There is no shutdown hook of its own.
 */
public class LedgerDeletionStorage extends ManagedLedgerClientFactory {
    private static final Logger log = LoggerFactory.getLogger(LedgerDeletionStorage.class);

    private PendingDeletePublisher publisher;
    private MetaStoreAdapter adapter;
    private DeferredDeletes deferred;
    private final CompactedLedgerIndex compactedLedgerIndex = new CompactedLedgerIndex();

    @Override
    public void initialize(ServiceConfiguration conf, MetadataStoreExtended metadataStore,
                           BookKeeperClientFactory bookkeeperProvider, EventLoopGroup eventLoopGroup,
                           OpenTelemetry openTelemetry) throws Exception {
        ExtensionConfig config = ExtensionConfig.from(conf);
        BookKeeperClientFactory clients = bookkeeperProvider;
        if (config.enabled()) {
            adapter = MetaStoreAdapter.of(MetaStore.class);
            Optional<MarkSigner> signer = MarkSigner.fromKeyFile(config.markKeyFile(), ExtensionConfig.MARK_KEY_FILE);
            publisher = PendingDeletePublisher.forBroker(config, signer);
            log.info("[ledger-deletion] mark before update on: queue {}, excluded namespaces {}, via {}; metadata"
                            + " classes: {}; messages {}", config.pendingTopic(), config.excludedNamespaces(),
                    config.serviceUrl(), adapter.describe(), signer.isPresent()
                            ? "signed (" + MarkSigner.PROPERTY + ", key from " + ExtensionConfig.MARK_KEY_FILE + ")"
                            : "unsigned (" + ExtensionConfig.MARK_KEY_FILE + " not set: the worker releases none)");
            if (config.deferBrokerDeletes()) {
                deferred = new DeferredDeletes(config.deferMaxLedgers());
                clients = new DeferringBookKeeperClientFactory(bookkeeperProvider, deferred);
                log.info("[ledger-deletion] defer mode on ({}=true): the BookKeeper copies this broker queues are"
                        + " deleted by the worker, not by the broker (at most {} awaiting their broker delete)",
                        ExtensionConfig.DEFER_BROKER_DELETES, config.deferMaxLedgers());
            }
        } else {
            log.info("[ledger-deletion] disabled (ledgerDeletionEnabled=false): stock managed-ledger storage");
        }
        super.initialize(conf, metadataStore, clients, eventLoopGroup, openTelemetry);
        if (publisher != null) {
            publisher.start();
        }
    }

    @Override
    protected ManagedLedgerFactoryImpl createManagedLedgerFactory(
            MetadataStoreExtended metadataStore, OpenTelemetry openTelemetry,
            ManagedLedgerFactoryImpl.BookkeeperFactoryForCustomEnsemblePlacementPolicy bkFactory,
            ManagedLedgerFactoryConfig managedLedgerFactoryConfig, StatsLogger statsLogger) throws Exception {
        if (publisher == null) {
            return super.createManagedLedgerFactory(metadataStore, openTelemetry, bkFactory,
                    managedLedgerFactoryConfig, statsLogger);
        }
        return new MarkingManagedLedgerFactory(metadataStore, bkFactory, managedLedgerFactoryConfig, statsLogger,
                openTelemetry, publisher, adapter, deferred, compactedLedgerIndex);
    }

    /** What each loaded topic's compaction service knows of its compacted ledger (the compaction factory fills it). */
    CompactedLedgerIndex compactedLedgerIndex() {
        return compactedLedgerIndex;
    }

    /** The publisher of this broker's pending deletions; empty when the extension is off. */
    Optional<PendingDeletePublisher> publisher() {
        return Optional.ofNullable(publisher);
    }

    /** Defer mode's registry; empty when defer mode is off. */
    Optional<DeferredDeletes> deferred() {
        return Optional.ofNullable(deferred);
    }

    @Override
    public void close() throws IOException {
        try {
            super.close();
        } finally {
            if (publisher != null) {
                publisher.close();
            }
        }
    }
}
