package org.ledgerdeletion.broker;

/**
 * Which copy of a ledger a pending deletion is for: the symbols of the Avro enum {@code LedgerType} (the worker's
 * {@code worker.formats.message.LedgerType}).
 */
public enum LedgerType {
    /** The BookKeeper copy. */
    LEDGER,
    /** The tiered-storage copy, identified by its offload context. */
    OFFLOAD_LEDGER
}
