"""Whether a copy of an offloaded ledger is still in use: one rule for the worker (``worker.daemon.decider``)
and the nightly audit's offloaded objects (``worker.nightly.audit``). The offloaded copy under uuid U is in
use while the topic lists the ledger, unless the topic records another uuid (a failed earlier attempt); the
BookKeeper copy of a listed ledger is released only once the broker marked it ``bookkeeperDeleted`` after
the offload completed: the effective deletion lag is the broker's to compute (docs/design.md, "Offloaded
ledgers").
"""

from __future__ import annotations

import enum
import uuid as uuid_mod

from worker.formats.managed_ledger_metadata import OffloadInfo


class OffloadedCopyUse(enum.StrEnum):
    IN_USE = "in_use"  # listed, under this uuid or with none recorded
    LEDGER_GONE = "ledger_gone"  # the topic no longer lists the ledger
    OTHER_ATTEMPT = "uuid_mismatch"  # listed, but the topic records another offload uuid

    @property
    def in_use(self) -> bool:
        return self is OffloadedCopyUse.IN_USE


def offloaded_copy_use(
    *, listed: bool, recorded_uuid: uuid_mod.UUID | None, copy_uuid: uuid_mod.UUID | None
) -> OffloadedCopyUse:
    """The offloaded copy under ``copy_uuid`` of a ledger its topic ``listed`` (or not), the topic recording
    ``recorded_uuid`` for it. An unknown ``copy_uuid`` cannot be told apart from the recorded one: in use."""
    if not listed:
        return OffloadedCopyUse.LEDGER_GONE
    if recorded_uuid is None or copy_uuid is None or recorded_uuid == copy_uuid:
        return OffloadedCopyUse.IN_USE
    return OffloadedCopyUse.OTHER_ATTEMPT


def bookkeeper_copy_released(offload: OffloadInfo | None) -> bool:
    """Whether the BookKeeper copy of a listed, offloaded ledger is no longer read (tiered storage is):
    its offload completed and the broker marked the copy deleted."""
    return offload is not None and offload.complete and offload.bookkeeper_deleted
