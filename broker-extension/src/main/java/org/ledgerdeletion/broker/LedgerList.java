package org.ledgerdeletion.broker;

import java.util.Collections;
import java.util.LinkedHashMap;
import java.util.Map;
import java.util.SortedMap;
import java.util.TreeMap;

/**
 * What the extension keeps of a topic's {@code ManagedLedgerInfo}: its ledgers by id with their offload state,
 * read from the info's serialized bytes (its own copy: Pulsar 4.2+ reuses its info objects).
 *
 * <p>Field numbers are those of Pulsar's {@code MLDataFormats.proto} (unchanged from 2.x to 5.0):
 * ManagedLedgerInfo {ledgerInfo = 1}, LedgerInfo {ledgerId = 1, entries = 2, offloadContext = 5}, OffloadContext
 * {uidMsb = 1, uidLsb = 2, bookkeeperDeleted = 4, driverMetadata = 6}, OffloadDriverMetadata {name = 1,
 * properties = 2},
 * KeyValue {key = 1, value = 2}.
 */
record LedgerList(SortedMap<Long, Ledger> ledgers, byte[] bytes) {
    static final int LEDGER_INFO = 1;

    /**
     * One listed ledger.
     *
     * @param entries its entry count as recorded when it was closed; -1 while it is open (not recorded yet)
     * @param bookkeeperDeleted its BookKeeper copy is released (offloaded, and the offload deletion lag passed)
     * @param offload its offload attempt, if it has one (both uuid halves set), else null
     * @param field the ledger's whole {@code ledgerInfo} field as encoded, to write it back unchanged
     */
    record Ledger(long id, long entries, boolean bookkeeperDeleted, PendingDeletion.Offload offload, byte[] field) {
        /** Holds no data: closed empty, or open as listed (a write that drops an open ledger found it empty). */
        boolean empty() {
            return entries <= 0 && offload == null;
        }
    }

    LedgerList {
        ledgers = Collections.unmodifiableSortedMap(new TreeMap<>(ledgers));
    }

    static LedgerList parse(byte[] managedLedgerInfo) {
        SortedMap<Long, Ledger> ledgers = new TreeMap<>();
        ProtoWire.Reader r = new ProtoWire.Reader(managedLedgerInfo);
        while (r.next()) {
            if (r.field() == LEDGER_INFO) {
                Ledger ledger = ledger(r.message());
                ledgers.put(ledger.id(), new Ledger(ledger.id(), ledger.entries(), ledger.bookkeeperDeleted(),
                        ledger.offload(), r.rawField()));
            } else {
                r.skip();
            }
        }
        return new LedgerList(ledgers, managedLedgerInfo);
    }

    private static Ledger ledger(ProtoWire.Reader r) {
        Long id = null;
        long entries = -1;
        boolean bkDeleted = false;
        PendingDeletion.Offload offload = null;
        while (r.next()) {
            switch (r.field()) {
                case 1 -> id = r.int64();
                case 2 -> entries = r.int64();
                case 5 -> {
                    ProtoWire.Reader oc = r.message();
                    Long msb = null;
                    Long lsb = null;
                    String driver = "";
                    Map<String, String> meta = new LinkedHashMap<>();
                    while (oc.next()) {
                        switch (oc.field()) {
                            case 1 -> msb = oc.int64();
                            case 2 -> lsb = oc.int64();
                            case 4 -> bkDeleted = oc.bool();
                            case 6 -> driver = driverMetadata(oc.message(), meta);
                            default -> oc.skip();
                        }
                    }
                    offload = msb != null && lsb != null ? new PendingDeletion.Offload(msb, lsb, driver, meta) : null;
                }
                default -> r.skip();
            }
        }
        if (id == null) {
            throw new IllegalArgumentException("a LedgerInfo without its ledgerId");
        }
        return new Ledger(id, entries, bkDeleted, offload, null);
    }

    private static String driverMetadata(ProtoWire.Reader r, Map<String, String> properties) {
        String name = "";
        while (r.next()) {
            switch (r.field()) {
                case 1 -> name = r.string();
                case 2 -> {
                    var kv = r.stringPair();
                    properties.put(kv.getKey(), kv.getValue());
                }
                default -> r.skip();
            }
        }
        return name;
    }

    /** The info's bytes with its ledger list replaced by {@code ledgers} (in id order), every other field kept. */
    byte[] withLedgers(SortedMap<Long, Ledger> replacement) {
        ProtoWire.Writer w = new ProtoWire.Writer();
        for (Ledger l : replacement.values()) {
            w.raw(l.field());
        }
        ProtoWire.Reader r = new ProtoWire.Reader(bytes);
        while (r.next()) {
            r.skip();
            if (r.field() != LEDGER_INFO) {
                w.raw(r.rawField());
            }
        }
        return w.toByteArray();
    }
}
