"""The bytes a deletion frees, read from what storage said before the delete (``worker.core.stored``): a
closed BookKeeper ledger's metadata ``length`` (logical bytes; a ledger never closed: unknown, never a
guess), an offloaded copy's object sizes, nothing when nothing was stored. One rule for the daemon
(``Result.freed_bytes``), the replay's report, ``dlq list`` and ``inflight`` (docs/operations.md, "Metrics").
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
