package org.ledgerdeletion.broker;

import io.netty.channel.EventLoopGroup;
import io.opentelemetry.api.OpenTelemetry;
import java.io.IOException;
import org.apache.bookkeeper.mledger.ManagedLedgerFactoryConfig;
import org.apache.bookkeeper.mledger.impl.ManagedLedgerFactoryImpl;
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
 * protected {@code createManagedLedgerFactory}; this class builds a {@link MarkingManagedLedgerFactory}
 * instead, and everything else (BookKeeper clients, storage classes, close) is Pulsar's own.
 */
public class LedgerDeletionStorage extends ManagedLedgerClientFactory {
    private static final Logger log = LoggerFactory.getLogger(LedgerDeletionStorage.class);

    private PendingDeletePublisher publisher;
    private Thread shutdownHook;

    @Override
    public void initialize(ServiceConfiguration conf, MetadataStoreExtended metadataStore,
                           BookKeeperClientFactory bookkeeperProvider, EventLoopGroup eventLoopGroup,
                           OpenTelemetry openTelemetry) throws Exception {
        ExtensionConfig config = ExtensionConfig.from(conf);
        if (config.enabled()) {
            publisher = new PendingDeletePublisher(config);
            log.info("[ledger-deletion] mark before update on: queue {}, excluded namespaces {}, via {}",
                    config.pendingTopic(), config.excludedNamespaces(), config.serviceUrl());
        } else {
            log.info("[ledger-deletion] disabled (ledgerDeletionEnabled=false): stock managed-ledger storage");
        }
        super.initialize(conf, metadataStore, bookkeeperProvider, eventLoopGroup, openTelemetry);
        if (publisher != null) {
            // SIGTERM: the broker closes its topics while its own serving stops; marks still waiting then
            // fail at once (their writes fail, ledgers stay listed) instead of waiting for a queue that is
            // going away.
            PendingDeletePublisher p = publisher;
            shutdownHook = new Thread(p::beginClose, "ledger-deletion-shutdown");
            Runtime.getRuntime().addShutdownHook(shutdownHook);
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
                openTelemetry, publisher);
    }

    @Override
    public void close() throws IOException {
        if (publisher != null) {
            publisher.beginClose();
        }
        try {
            super.close();
        } finally {
            if (publisher != null) {
                publisher.close();
                try {
                    Runtime.getRuntime().removeShutdownHook(shutdownHook);
                } catch (IllegalStateException shuttingDown) {
                    // already running
                }
            }
        }
    }
}
