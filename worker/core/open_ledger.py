"""An OPEN ledger is never deleted while something may still write it.

BookKeeper's ``state`` is OPEN while a writer holds the ledger, IN_RECOVERY while another client fences
it; only CLOSED is final. Who may write a Pulsar ledger: its topic's owner (the current ledger, a cursor's
ledger), a compaction in progress (its compacted ledger, open until the compaction records it: a
compaction can run longer than the minimum age), the schema registry while it stores a version (Pulsar
accepts a schema for a name with no topic: that write lasts milliseconds, the minimum age covers it).
While the owning topic exists, any of them may; once the topic is proven gone (the admin API and the metadata
store agree, ``worker.broker.snapshot_cache.confirm_gone``), nothing writes for it any more and an open
ledger is one its writer left behind (a deleted topic's current or cursor ledger, a compaction cut
short): deletable like a closed one, once old enough.

One rule for the worker (``worker.core.verification``: an OPEN verdict, retried as in use), the scanner
(``worker.operations.scanner``: never reported as an orphan) and, through the scanner, the nightly audit.
"""

from __future__ import annotations


def may_be_written(state: str, *, topic_exists: bool) -> bool:
    """Whether a ledger in BookKeeper ``state`` may still be written: not CLOSED, and its topic exists.
    An unknown or empty state counts as not closed."""
    return topic_exists and state.upper() != "CLOSED"
