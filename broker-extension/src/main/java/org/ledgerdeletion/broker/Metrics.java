package org.ledgerdeletion.broker;

import io.prometheus.client.Counter;

/**
 * The extension's counters, in the default Prometheus registry that the broker's /metrics endpoint includes.
 * Registered once per JVM (a second storage instance in one JVM, as in tests, shares them).
 */
final class Metrics {
    static final Counter MARKED = register(Counter.build("ledger_deletion_broker_marked",
            "Pending deletions the broker extension made durable before a metadata write dropped them")
            .labelNames("ledger_type"));
    static final Counter SEND_FAILURES = register(Counter.build("ledger_deletion_broker_send_failures",
            "Failed attempts to publish a pending deletion (each is retried until the wait limit)"));
    static final Counter WRITES_HELD = register(Counter.build("ledger_deletion_broker_metadata_writes_held",
            "Metadata writes that dropped ledgers and waited for their pending deletions"));
    static final Counter WRITES_FAILED = register(Counter.build("ledger_deletion_broker_metadata_writes_failed",
            "Trims (ledger-list writes that only drop) failed because their pending deletions were not durable in"
                    + " time, or because the extension failed (ledgers kept)"));
    static final Counter FAST_FAILS = register(Counter.build("ledger_deletion_broker_fast_fails",
            "Marks failed at once while the queue is known unavailable"));
    static final Counter WRITES_KEPT = register(Counter.build("ledger_deletion_broker_metadata_writes_kept",
            "Rollover writes that went ahead keeping listed the ledgers they would drop (not queued in time)"));
    static final Counter UNMARKED = register(Counter.build("ledger_deletion_broker_unmarked",
            "Ledger copies dropped by a cursor write, a cursor removal or a topic removal that went ahead without"
                    + " their pending deletion (not durable in time): left to scan").labelNames("ledger_type"));

    private Metrics() {
    }

    private static Counter register(Counter.Builder b) {
        Counter c = b.create();
        try {
            c.register();
        } catch (IllegalArgumentException alreadyRegistered) {
            // Another class loader's copy registered it first; this copy still counts, unexported.
        }
        return c;
    }
}
