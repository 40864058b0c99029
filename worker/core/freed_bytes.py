"""The bytes a deletion frees, read from what storage said before the delete (``worker.core.stored``).

- A BookKeeper ledger: its ``length`` in the ledger metadata, the bytes of its entries as BookKeeper
  records them when the ledger is closed. A ledger never closed (OPEN or IN_RECOVERY: one a deleted
  topic's writer left behind) has no recorded length: unknown, never a guess. The figure is logical:
  each bookie of the write quorum holds a copy, and a bookie gets its disk back only when its own garbage
  collection and compaction run.
- An offloaded copy: the sizes of its objects (data and index) as tiered storage reported them; unknown
  when it could not say.
- Nothing stored (already gone, or refused): nothing freed by this worker.

One rule for the daemon (``worker.core.decision`` puts it on ``Result.freed_bytes``, which the counter
``ledger_deletion_freed_bytes_total`` and the nightly replay's report read), ``dlq list`` and ``inflight``
(the bytes the queued ledgers would free).
"""

from __future__ import annotations

from collections.abc import Iterable

from worker.core.stored import Missing, Refused, Stored, StoredLedger, StoredObjects
from worker.formats.ledger_metadata import LedgerMetadata


def ledger_bytes(md: LedgerMetadata) -> int | None:
    """A BookKeeper ledger's bytes: its metadata length once closed, None (unknown) before."""
    return md.length if md.state.upper() == "CLOSED" else None


def freed_bytes(stored: Stored) -> int | None:
    """What deleting ``stored`` frees: bytes, 0 when there is nothing to delete, None when unknown."""
    if isinstance(stored, StoredLedger):
        return ledger_bytes(stored.metadata)
    if isinstance(stored, StoredObjects):
        return stored.size_bytes
    assert isinstance(stored, Missing | Refused)
    return 0


def sum_known(values: Iterable[int | None]) -> tuple[int, int]:
    """(sum of the known values, how many were unknown): a total is shown with what it leaves out."""
    total = unknown = 0
    for v in values:
        if v is None:
            unknown += 1
        else:
            total += v
    return total, unknown


_UNITS = ("KiB", "MiB", "GiB", "TiB", "PiB")


def human_bytes(n: int | None) -> str:
    """``1.2 GiB`` (binary units, one decimal), ``999 B`` below a KiB, ``unknown`` for None."""
    if n is None:
        return "unknown"
    if n < 1024:
        return f"{n} B"
    value = n / 1024
    for unit in _UNITS[:-1]:
        if value < 1024:
            return f"{value:.1f} {unit}"
        value /= 1024
    return f"{value:.1f} {_UNITS[-1]}"
