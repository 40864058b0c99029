"""Ledger-metadata znodes read for a whole batch, handed to the messages that would read them next.

The daemon's batch sweep (``worker.daemon.pipeline.Pipeline.settle_already_gone``) reads every BookKeeper
ledger its batch names in one multiRead: the ones that are missing are settled at once, the others go on to
the per-message pipeline with their znode already read. That read stands in for the message's own inspection: an
inspection has no freshness of its own to keep (the versioned delete refuses metadata that changed since
it was read, and the epoch check vouches for the live state), and the sweep's read was started after the
message was received, as the inspection would have been.

Each znode is given once (:func:`take` removes it): a duplicate of the same ledger, decided after the first
under its ledger lock, reads again, so it sees the first one's delete. Outside the daemon nothing sets
:data:`prefetched`, and every read is the caller's own.
"""

from __future__ import annotations

import contextvars
from typing import Any

# ledger id -> (bytes, ZnodeStat) of its metadata znode, for the messages of the current batch.
prefetched: contextvars.ContextVar[dict[int, tuple[bytes, Any]] | None] = contextvars.ContextVar(
    "prefetched_ledgers", default=None
)


def take(ledger_id: int) -> tuple[bytes, Any] | None:
    """The batch's read of the ledger's metadata znode, once; None when there is none to give."""
    reads = prefetched.get()
    if not reads:
        return None
    return reads.pop(ledger_id, None)
