package org.ledgerdeletion.broker;

import io.netty.channel.EventLoopGroup;
import java.util.HashMap;
import java.util.Map;
import java.util.Optional;
import java.util.concurrent.CompletableFuture;
import org.apache.bookkeeper.client.BookKeeper;
import org.apache.bookkeeper.client.EnsemblePlacementPolicy;
import org.apache.bookkeeper.stats.StatsLogger;
import org.apache.pulsar.broker.BookKeeperClientFactory;
import org.apache.pulsar.broker.ServiceConfiguration;
import org.apache.pulsar.metadata.api.extended.MetadataStoreExtended;

/**
 * The broker's BookKeeper client factory, for the clients of the managed-ledger storage in defer mode: each client
 * it builds uses {@link DeferringMetadataDriver} in front of the real metadata driver. Nothing in {@code broker.conf}
 * changes: Pulsar's {@code BookKeeperClientFactoryImpl.create} sets the client's {@code metadataServiceUri} first and
 * then copies the ensemble-placement-policy properties it is given onto the client's configuration, so the two
 * properties added here ({@code metadataServiceUri} = {@code ledgerdeletion:<the real uri>}, and the registry)
 * reach the client. The storage's clients are the managed ledgers' and their cursors' (and the compactor's, which
 * uses the storage's default client); the schema registry and the delayed-delivery bucket storage build their own
 * clients from the broker's factory and are not affected.
 */
final class DeferringBookKeeperClientFactory implements BookKeeperClientFactory {
    /** BookKeeper's client configuration key of the metadata service uri. */
    static final String METADATA_SERVICE_URI = "metadataServiceUri";
    /** How {@code broker.conf} overrides a BookKeeper client key (Pulsar maps {@code bookkeeper_<key>}). */
    private static final String BROKER_CONF_PREFIX = "bookkeeper_";

    private final BookKeeperClientFactory delegate;
    private final DeferredDeletes registry;

    DeferringBookKeeperClientFactory(BookKeeperClientFactory delegate, DeferredDeletes registry) {
        this.delegate = delegate;
        this.registry = registry;
        DeferringMetadataDriver.register();
    }

    @Override
    public CompletableFuture<BookKeeper> create(ServiceConfiguration conf, MetadataStoreExtended store,
                                                EventLoopGroup eventLoopGroup,
                                                Optional<Class<? extends EnsemblePlacementPolicy>> policyClass,
                                                Map<String, Object> properties) {
        return delegate.create(conf, store, eventLoopGroup, policyClass, deferring(conf, properties));
    }

    @Override
    public CompletableFuture<BookKeeper> create(ServiceConfiguration conf, MetadataStoreExtended store,
                                                EventLoopGroup eventLoopGroup,
                                                Optional<Class<? extends EnsemblePlacementPolicy>> policyClass,
                                                Map<String, Object> properties, StatsLogger statsLogger) {
        return delegate.create(conf, store, eventLoopGroup, policyClass, deferring(conf, properties), statsLogger);
    }

    @Override
    public void close() {
        delegate.close();
    }

    /** {@code properties} (a placement policy's, or none) plus the two that select the deferring driver. */
    Map<String, Object> deferring(ServiceConfiguration conf, Map<String, Object> properties) {
        Map<String, Object> out = new HashMap<>();
        if (properties != null) {
            out.putAll(properties);
        }
        out.put(METADATA_SERVICE_URI, DeferringMetadataDriver.uriFor(realUri(conf, properties)));
        out.put(DeferringMetadataDriver.REGISTRY_PROPERTY, registry);
        return out;
    }

    /** The uri Pulsar would give the client: the properties' own, else broker.conf's override, else the broker's. */
    static String realUri(ServiceConfiguration conf, Map<String, Object> properties) {
        Object own = properties == null ? null : properties.get(METADATA_SERVICE_URI);
        if (own != null) {
            return own.toString();
        }
        Object override = conf.getProperties().get(BROKER_CONF_PREFIX + METADATA_SERVICE_URI);
        if (override != null && !override.toString().isBlank()) {
            return override.toString().strip();
        }
        return conf.getBookkeeperMetadataStoreUrl();
    }
}
