"""When the worker asks the bookies for a garbage collection (``bookkeeper.gc_trigger_bytes``).

A bookie gives the disk of a deleted ledger back only when its own garbage collection runs (every
``gcWaitTime``; an entry log goes once every ledger in it is deleted, or by compaction). The worker may ask
for one collection sooner, once the BookKeeper ledgers it deleted since the last request add up to a
threshold, and never twice within a minimum interval: one request per threshold, never a loop.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(slots=True)
class GcAccount:
    """Bytes freed since the last request, and when that request was made (a monotonic clock)."""

    threshold_bytes: int
    min_interval_s: float
    pending_bytes: int = 0
    last_request_at: float | None = None

    def add(self, freed_bytes: int, now: float) -> bool:
        """Count one deletion's bytes; True when a collection is due now. The caller then makes the
        request (once): the count starts again from zero and the interval from ``now``, whatever the
        request's outcome, so a failing bookie is asked again only after another threshold and interval."""
        if self.threshold_bytes <= 0:
            return False
        self.pending_bytes += max(0, freed_bytes)
        if self.pending_bytes < self.threshold_bytes:
            return False
        if self.last_request_at is not None and now - self.last_request_at < self.min_interval_s:
            return False
        self.pending_bytes = 0
        self.last_request_at = now
        return True
