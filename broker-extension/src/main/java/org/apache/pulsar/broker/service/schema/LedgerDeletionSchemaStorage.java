package org.apache.pulsar.broker.service.schema;

import java.util.concurrent.CompletableFuture;
import org.apache.pulsar.broker.PulsarService;
import org.apache.pulsar.common.protocol.schema.SchemaVersion;
import org.ledgerdeletion.broker.SchemaLedgers;

/**
 * Pulsar's schema storage, except that deleting a schema queues the ledgers its locator lists first
 * ({@link SchemaLedgers}). Made by {@code org.ledgerdeletion.broker.LedgerDeletionSchemaStorageFactory}.
 *
 * <p>A subclass of {@code BookkeeperSchemaStorage}, in its package: the broker casts its schema storage to that class
 * (the admin API's schema metadata) and lists a topic's schema ledgers in its internal stats only for it, so a
 * wrapper would break the one and hide the other; and its only constructor is package-private. A class of this
 * package in another jar reaches it when both are loaded by the same class loader, as the broker's {@code lib/} and
 * {@code PULSAR_EXTRA_CLASSPATH} are (pulsar-broker's jar is not sealed). Only {@code delete(String, boolean)} is
 * overridden (the one-argument delete calls it); everything else is Pulsar's.
 */
public class LedgerDeletionSchemaStorage extends BookkeeperSchemaStorage {
    private final SchemaLedgers schemaLedgers;

    public LedgerDeletionSchemaStorage(PulsarService pulsar, SchemaLedgers schemaLedgers) {
        super(pulsar);
        this.schemaLedgers = schemaLedgers;
    }

    @Override
    public CompletableFuture<SchemaVersion> delete(String key, boolean forcefully) {
        return schemaLedgers.delete(key, getStoreLedgerIdsBySchemaId(key), () -> super.delete(key, forcefully));
    }
}
