"""What the daemon knows of a message when it hands it to the pipeline, passed with it (never ambient).

- **When** (:attr:`Dispatch.at`, the event loop's clock): every message dispatched together was received before
  that instant, so a read of the metadata store that *started* at or after it is as fresh as a read the message
  would have made for itself then. Reads shared by the messages of a batch (the single-flight reads of Pulsar's
  store, the live-state snapshots) are given only to messages dispatched before they started.
- **What its batch already read** (:attr:`Dispatch.reads`): the daemon's batch sweep reads the metadata znode of
  every BookKeeper ledger its batch names in one multiRead; a message's inspection takes its ledger's read from
  there, once (:meth:`Dispatch.take` removes it), so a duplicate decided after it, or a second look at the same
  message, reads again and sees the first one's delete. The sweep's read stands in for the inspection: it started
  after the message was received, and an inspection has no freshness of its own to keep (the versioned delete
  refuses metadata that changed since it was read, and the epoch check vouches for the live state).

Outside the daemon (scan, the replay, ``purge-topic``, tests) there is no dispatch: every read is the caller's own.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True, slots=True)
class Dispatch:
    at: float
    # ledger id -> (bytes, stat) of its metadata znode, shared by the messages of one batch.
    reads: dict[int, tuple[bytes, Any]] = field(default_factory=dict)

    def take(self, ledger_id: int) -> tuple[bytes, Any] | None:
        """The batch's read of the ledger's metadata znode, once; None when there is none to give."""
        return self.reads.pop(ledger_id, None)


def since(dispatch: Dispatch | None) -> float | None:
    """The instant a shared read must have started at or after to serve this message (None: share nothing)."""
    return None if dispatch is None else dispatch.at
