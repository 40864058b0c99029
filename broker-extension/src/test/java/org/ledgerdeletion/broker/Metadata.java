package org.ledgerdeletion.broker;

import java.util.Map;

/**
 * Managed-ledger metadata as its wire bytes, for tests on any Pulsar line: field numbers of Pulsar's
 * {@code MLDataFormats.proto}.
 */
final class Metadata {
    private Metadata() {
    }

    /** A LedgerInfo (entries 5), without an offload. */
    static ProtoWire.Writer plain(long id) {
        return new ProtoWire.Writer().int64(1, id).int64(2, 5).int64(3, 500);
    }

    /** A LedgerInfo offloaded to aws-s3 (bucket b) as uuid msb/lsb; {@code bkDeleted}: its BookKeeper copy released. */
    static ProtoWire.Writer offloaded(long id, long msb, long lsb, boolean bkDeleted) {
        ProtoWire.Writer driver = new ProtoWire.Writer().string(1, "aws-s3")
                .message(2, new ProtoWire.Writer().string(1, "bucket").string(2, "b"));
        ProtoWire.Writer context = new ProtoWire.Writer().int64(1, msb).int64(2, lsb).bool(3, true)
                .bool(4, bkDeleted).message(6, driver);
        return new ProtoWire.Writer().int64(1, id).int64(2, 5).message(5, context);
    }

    /** A ManagedLedgerInfo listing {@code ledgers}, with one property (kept by every rewrite). */
    static byte[] ledgerList(ProtoWire.Writer... ledgers) {
        ProtoWire.Writer w = new ProtoWire.Writer();
        for (ProtoWire.Writer l : ledgers) {
            w.message(LedgerList.LEDGER_INFO, l);
        }
        return w.message(3, new ProtoWire.Writer().string(1, "owner").string(2, "test")).toByteArray();
    }

    static LedgerList list(ProtoWire.Writer... ledgers) {
        return LedgerList.parse(ledgerList(ledgers));
    }

    /** A ManagedCursorInfo naming {@code cursorLedger}, with {@code properties} as cursor properties. */
    static byte[] cursor(long cursorLedger, Map<String, String> properties) {
        ProtoWire.Writer w = new ProtoWire.Writer().int64(1, cursorLedger).int64(2, 3).int64(3, 4);
        properties.forEach((k, v) -> w.message(8, new ProtoWire.Writer().string(1, k).string(2, v)));
        return w.toByteArray();
    }

    static byte[] cursor(long cursorLedger) {
        return cursor(cursorLedger, Map.of());
    }
}
