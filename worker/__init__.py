"""Two-phase ledger deletion for stock Apache Pulsar.

Phase 1 (``worker.operations.phase1``) queues a ``PendingDeleteLedgerInfo`` before a ledger id leaves its topic's
metadata; phase 2 (``worker.daemon.daemon``) drains the queue and deletes from BookKeeper or tiered storage
only what the owner broker no longer uses and what storage metadata proves to be the announced ledger.
"""

__version__ = "0.1.0"
