package org.ledgerdeletion.broker;

import io.prometheus.client.Collector;
import io.prometheus.client.Counter;
import io.prometheus.client.Gauge;

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
    static final Counter COMPACTED_REQUEUES_SKIPPED = register(Counter.build(
            "ledger_deletion_broker_compacted_requeues_skipped",
            "Compactions tried again with a compacted ledger this broker had already queued: nothing queued again"));

    static final Counter DEFERRED = register(Counter.build("ledger_deletion_broker_deferred",
            "Broker deletes of BookKeeper ledgers skipped in defer mode: the worker deletes them"));
    static final Counter DEFER_FULL = register(Counter.build("ledger_deletion_broker_defer_full",
            "Ledgers defer mode could not take (its registry was full): the broker deleted them itself"));
    static final Gauge DEFER_REGISTRY_SIZE = register(Gauge.build("ledger_deletion_broker_defer_registry_size",
            "Ledgers whose broker delete defer mode will skip, awaiting that delete"));

    private Metrics() {
    }

    private static Counter register(Counter.Builder b) {
        return register(b.create());
    }

    private static Gauge register(Gauge.Builder b) {
        return register(b.create());
    }

    private static <C extends Collector> C register(C c) {
        try {
            c.register();
        } catch (IllegalArgumentException alreadyRegistered) {
            // Another class loader's copy registered it first; this copy still counts, unexported.
        }
        return c;
    }
}
