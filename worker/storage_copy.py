"""What storage holds of an announced ledger, and the one protocol both storage kinds implement.

A pending deletion names one copy of a ledger: its BookKeeper ledger (``LEDGER``) or its offloaded copy
in tiered storage (``OFFLOAD_LEDGER``). Each kind is a :class:`StorageCopy`: ``inspect`` reads what
storage says about the copy (facts only: the identity rules are ``worker.verification``'s, applied by
``worker.decision``), and ``delete`` removes exactly what was inspected.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from worker.bookkeeper import LedgerMetadata, LedgerStore
from worker.message import LedgerType, PendingDeleteLedgerInfo


@dataclass(frozen=True, slots=True)
class StoredLedger:
    """The BookKeeper ledger exists; ``token`` pins what was read (a metadata version) for the delete."""

    metadata: LedgerMetadata
    token: object = None


@dataclass(frozen=True, slots=True)
class StoredObjects:
    """The offloaded copy exists. ``user_metadata`` holds each object's user metadata, which must prove
    the copy belongs to the announced topic; None where the location itself is the proof (a filesystem
    path derived from the announced topic's managed-ledger name)."""

    kind: str  # "s3" | "filesystem"
    locator: Any
    user_metadata: tuple[Mapping[str, str], ...] | None


@dataclass(frozen=True, slots=True)
class Missing:
    """Storage has nothing: already deleted (by us earlier, or by the broker itself). Only storage that is
    there says so: an offloaded copy is Missing only once its bucket answered HeadBucket, or its base path
    is still the directory it was at start (``worker.tiered_storage``); else the inspection fails."""


@dataclass(frozen=True, slots=True)
class Refused:
    """The message names storage this worker will not touch (an unconfigured bucket, endpoint, driver or a
    path outside the base): nothing was asked of any backend."""

    reason: str


Stored = StoredLedger | StoredObjects | Missing | Refused


class StorageCopy(Protocol):
    #: The pipeline stage a failure of this storage is counted under (``failed_total{stage}``).
    stage: str

    async def inspect(self, info: PendingDeleteLedgerInfo) -> Stored: ...

    async def delete(self, info: PendingDeleteLedgerInfo, stored: Stored) -> bool:
        """Delete what ``inspect`` found; True if this call removed it, False if it was already gone."""
        ...


class BookKeeperCopy:
    """``LEDGER``: the ledger in BookKeeper, through the bookie HTTP API or the metadata store."""

    def __init__(self, ledgers: LedgerStore, stage: str) -> None:
        self.ledgers = ledgers
        self.stage = stage

    async def inspect(self, info: PendingDeleteLedgerInfo) -> Stored:
        got = await self.ledgers.read(info.ledger_id)
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
    """``OFFLOAD_LEDGER``: the offloaded copy in tiered storage (``worker.tiered_storage``)."""

    stage = "tiered_storage"

    def __init__(self, tiered: TieredCopies) -> None:
        self.tiered = tiered

    async def inspect(self, info: PendingDeleteLedgerInfo) -> Stored:
        return await self.tiered.inspect(info)

    async def delete(self, info: PendingDeleteLedgerInfo, stored: Stored) -> bool:
        if not isinstance(stored, StoredObjects):
            raise TypeError(f"cannot delete an offloaded copy from {stored!r}")
        await self.tiered.delete(stored)
        return True


def copies(ledgers: LedgerStore, ledger_stage: str, tiered: TieredCopies) -> dict[LedgerType, StorageCopy]:
    return {LedgerType.LEDGER: BookKeeperCopy(ledgers, ledger_stage), LedgerType.OFFLOAD_LEDGER: OffloadedCopy(tiered)}
