package org.ledgerdeletion.broker;

import org.apache.pulsar.broker.PulsarService;
import org.apache.pulsar.broker.service.schema.BookkeeperSchemaStorageFactory;
import org.apache.pulsar.broker.service.schema.LedgerDeletionSchemaStorage;
import org.apache.pulsar.broker.service.schema.SchemaStorageFactory;
import org.apache.pulsar.common.protocol.schema.SchemaStorage;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * The schema registry's storage whose schema deletions queue their ledgers first. Named in broker.conf:
 * {@code schemaRegistryStorageClassName=org.ledgerdeletion.broker.LedgerDeletionSchemaStorageFactory}, beside
 * {@code managedLedgerStorageClassName=org.ledgerdeletion.broker.LedgerDeletionStorage}, whose queue it uses. Without
 * that storage it makes Pulsar's own {@code BookkeeperSchemaStorage}.
 */
public class LedgerDeletionSchemaStorageFactory implements SchemaStorageFactory {
    private static final Logger log = LoggerFactory.getLogger(LedgerDeletionSchemaStorageFactory.class);

    @Override
    public SchemaStorage create(PulsarService pulsar) throws Exception {
        if (pulsar.getManagedLedgerStorage() instanceof LedgerDeletionStorage storage
                && storage.publisher().isPresent()) {
            PendingDeletePublisher publisher = storage.publisher().get();
            log.info("[ledger-deletion] schema ledgers queued before a schema deletion drops them");
            return new LedgerDeletionSchemaStorage(pulsar, new SchemaLedgers(publisher, publisher.config()));
        }
        log.warn("[ledger-deletion] {} without {} (ledgerDeletionEnabled=true) as the managed-ledger storage: schema"
                + " ledgers are not queued", getClass().getName(), LedgerDeletionStorage.class.getName());
        return new BookkeeperSchemaStorageFactory().create(pulsar);
    }
}
