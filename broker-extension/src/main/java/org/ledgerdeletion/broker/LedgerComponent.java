package org.ledgerdeletion.broker;

/**
 * What owns a pending deletion's ledger: the symbols of the Avro enum {@code LedgerComponent} (the worker's
 * {@code worker.formats.message.LedgerComponent}), in the schema's order. The extension queues every one:
 * MANAGED_LEDGER, MANAGED_CURSOR and DELAYED_INDEX_BUCKET through the metadata store's seam, COMPACTED_LEDGER
 * through the compaction service, SCHEMA_STORAGE through the schema storage.
 */
public enum LedgerComponent {
    MANAGED_LEDGER,
    MANAGED_CURSOR,
    SCHEMA_STORAGE,
    COMPACTED_LEDGER,
    DELAYED_INDEX_BUCKET;

    /** Whether a pending deletion of this component names its cursor (or subscription). */
    boolean namesCursor() {
        return this == MANAGED_CURSOR || this == DELAYED_INDEX_BUCKET;
    }
}
