"""What the daemon knows of a message when it hands it to the pipeline, passed with it (never ambient):
**when** (:attr:`Dispatch.at`: a read that started at or after it is as fresh as the message's own) and
**what its batch already read** (:attr:`Dispatch.reads`, taken once by :meth:`Dispatch.take`, so a
duplicate decided after it reads again and sees the first one's delete). Why that is safe: docs/design.md,
"The batched hot path". Outside the daemon there is no dispatch: every read is the caller's own.
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
