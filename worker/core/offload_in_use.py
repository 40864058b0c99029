"""Whether a copy of an offloaded ledger is still in use: one rule for the worker (``worker.daemon.decider``)
and the nightly audit's offloaded objects (``worker.nightly.audit``).

A ledger Pulsar offloaded has two copies, and its topic's ``ManagedLedgerInfo`` says which one readers use:

- the offloaded copy under attempt uuid U is in use while the topic lists the ledger, unless the topic
  records another uuid for it: then U is a failed earlier attempt (the offloader retries under a fresh
  uuid), garbage. Without a recorded uuid (no offload context read, or none written yet: an offload is
  running) the listed copy is in use, whatever its uuid;
- the BookKeeper copy of a listed ledger is released once the offload completed and the broker marked
  it deleted (``bookkeeperDeleted``): only then do readers read tiered storage whatever the topic's read
  priority (``managedLedgerDataReadPriority``: bookkeeper-first reads the BookKeeper copy while it is not
  so marked), and a BookKeeper copy left behind is a leak (the broker wrote the mark, then failed to
  delete). The broker sets the mark after the topic's own effective lag (its namespace's or topic's
  ``offloadDeletionLagMs``, else ``managedLedgerOffloadDeletionLagMs``), which this worker cannot see
  whole: a lag of its own would delete copies that a namespace with a longer lag still reads.
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
