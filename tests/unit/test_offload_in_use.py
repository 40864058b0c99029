"""The one rule for "a copy of an offloaded ledger is still in use" (``worker.core.offload_in_use``)."""

from __future__ import annotations

import uuid

import pytest

from worker.core.offload_in_use import OffloadedCopyUse, bookkeeper_copy_released, offloaded_copy_use
from worker.formats.managed_ledger_metadata import OffloadInfo

U = uuid.UUID("0b6c3e4e-8f43-4a53-9f3e-3c8b0f5f2a11")
V = uuid.UUID("5d1f0a8c-2b7e-4c1d-8e9a-7f6b5c4d3e21")


@pytest.mark.parametrize(
    ("listed", "recorded", "copy", "expected"),
    [
        (False, None, U, OffloadedCopyUse.LEDGER_GONE),
        (False, U, U, OffloadedCopyUse.LEDGER_GONE),
        (True, U, U, OffloadedCopyUse.IN_USE),
        (True, V, U, OffloadedCopyUse.OTHER_ATTEMPT),
        # Nothing recorded (no offload context read, or an offload running): a listed ledger's copy is kept.
        # The audit used to call this one an orphan when the metadata store had no entry for the ledger.
        (True, None, U, OffloadedCopyUse.IN_USE),
        # A message without a uuid cannot be told from the recorded attempt: kept.
        (True, V, None, OffloadedCopyUse.IN_USE),
    ],
)
def test_offloaded_copy_use(
    listed: bool, recorded: uuid.UUID | None, copy: uuid.UUID | None, expected: OffloadedCopyUse
) -> None:
    got = offloaded_copy_use(listed=listed, recorded_uuid=recorded, copy_uuid=copy)
    assert got is expected
    assert got.in_use is (expected is OffloadedCopyUse.IN_USE)


def test_the_audit_classes_are_the_rule_values() -> None:
    # The audit's report keeps its orphan classes: they are the rule's values.
    assert {c.value for c in OffloadedCopyUse if not c.in_use} == {"ledger_gone", "uuid_mismatch"}


@pytest.mark.parametrize(
    ("offload", "released"),
    [
        (None, False),
        (OffloadInfo(complete=False, bookkeeper_deleted=True, timestamp=0), False),
        (OffloadInfo(complete=True, bookkeeper_deleted=True, timestamp=None), True),
        # However long ago the offload completed: the broker's effective lag (namespace, topic, broker) and
        # its read priority decide when the BookKeeper copy stops being read, and it says so by marking it.
        (OffloadInfo(complete=True, timestamp=0), False),
        (OffloadInfo(complete=True, timestamp=None), False),
    ],
)
def test_bookkeeper_copy_released_only_once_the_broker_marked_it_deleted(
    offload: OffloadInfo | None, released: bool
) -> None:
    assert bookkeeper_copy_released(offload) is released
