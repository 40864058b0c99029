"""What storage holds of an announced ledger, and the one protocol both storage kinds implement.

A pending deletion names one copy of a ledger: its BookKeeper ledger (``LEDGER``) or its offloaded copy
in tiered storage (``OFFLOAD_LEDGER``). Each kind is a :class:`StorageCopy`: ``inspect`` reads what
storage says about the copy (facts only: the identity rules are ``worker.core.verification``'s, applied by
``worker.daemon.decider``), and ``delete`` removes exactly what was inspected.
"""

from __future__ import annotations

from typing import Protocol

from worker.backends.bookie_http import LedgerStore
from worker.core.dispatch import Dispatch
from worker.core.stored import Missing, Stored, StoredLedger, StoredObjects
from worker.formats.message import LedgerType, PendingDeleteLedgerInfo


class StorageCopy(Protocol):
    #: The pipeline stage a failure of this storage is counted under (``failed_total{stage}``).
    stage: str

    async def inspect(self, info: PendingDeleteLedgerInfo, dispatch: Dispatch | None = None) -> Stored:
        """``dispatch``: the daemon's (``worker.core.dispatch``), whose batch may have read the copy already."""
        ...

    async def delete(self, info: PendingDeleteLedgerInfo, stored: Stored) -> bool:
        """Delete what ``inspect`` found; True if this call removed it, False if it was already gone."""
        ...


class BookKeeperCopy:
    """``LEDGER``: the ledger in BookKeeper, through the bookie HTTP API or the metadata store."""

    def __init__(self, ledgers: LedgerStore, stage: str) -> None:
        self.ledgers = ledgers
        self.stage = stage

    async def inspect(self, info: PendingDeleteLedgerInfo, dispatch: Dispatch | None = None) -> Stored:
        got = await self.ledgers.read(info.ledger_id, None if dispatch is None else dispatch.take(info.ledger_id))
        if got is None:
            return Missing()
        md, token = got
        return StoredLedger(md, token)

    async def delete(self, info: PendingDeleteLedgerInfo, stored: Stored) -> bool:
        if not isinstance(stored, StoredLedger):
            raise TypeError(f"cannot delete a BookKeeper ledger from {stored!r}")
        return await self.ledgers.delete(info.ledger_id, stored.token)


class TieredCopies(Protocol):
    async def inspect(self, info: PendingDeleteLedgerInfo) -> Stored: ...

    async def delete(self, stored: StoredObjects) -> None: ...


class OffloadedCopy:
    """``OFFLOAD_LEDGER``: the offloaded copy in tiered storage (``worker.backends.tiered_storage``)."""

    stage = "tiered_storage"

    def __init__(self, tiered: TieredCopies) -> None:
        self.tiered = tiered

    async def inspect(self, info: PendingDeleteLedgerInfo, dispatch: Dispatch | None = None) -> Stored:
        return await self.tiered.inspect(info)

    async def delete(self, info: PendingDeleteLedgerInfo, stored: Stored) -> bool:
        if not isinstance(stored, StoredObjects):
            raise TypeError(f"cannot delete an offloaded copy from {stored!r}")
        await self.tiered.delete(stored)
        return True


def copies(ledgers: LedgerStore, ledger_stage: str, tiered: TieredCopies) -> dict[LedgerType, StorageCopy]:
    return {LedgerType.LEDGER: BookKeeperCopy(ledgers, ledger_stage), LedgerType.OFFLOAD_LEDGER: OffloadedCopy(tiered)}
