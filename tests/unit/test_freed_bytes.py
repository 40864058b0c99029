"""The bytes a deletion frees, without I/O: read from the facts gathered before the delete, carried by the
decision's result (``Result.freed_bytes``, the one source the counter and the reports read), summed and
shown for a person."""

from __future__ import annotations

import uuid

import pytest

from worker.core.decision import Facts, Outcome, Rules, decide
from worker.core.freed_bytes import freed_bytes, human_bytes, sum_known
from worker.core.live_set import TopicGone
from worker.core.stored import Missing, Refused, StoredLedger, StoredObjects
from worker.formats.ledger_metadata import LedgerMetadata
from worker.formats.message import LedgerComponent, LedgerType, OffloadContext, PendingDeleteLedgerInfo
from worker.formats.topic_name import TopicName

NOW = 1_800_000_000_000
RULES = Rules(min_ledger_age_ms=600_000)
TOPIC = "persistent://t/ns/x"
ML = TopicName.parse(TOPIC).managed_ledger_name
CM = {"application": "pulsar", "component": "managed-ledger", "pulsar/managed-ledger": ML}
CTX = OffloadContext.from_uuid(uuid.UUID("2e5c4ca4-e0a2-448e-b586-2c30268e1b3b"), "aws-s3", {"bucket": "b"})
GONE = TopicGone(TopicName.parse(TOPIC), 0)


def ledger(length: int, state: str = "CLOSED") -> StoredLedger:
    return StoredLedger(LedgerMetadata(7, dict(CM), NOW - 3_600_000, length, state), token=1)


def test_a_closed_ledger_frees_its_metadata_length() -> None:
    assert freed_bytes(ledger(123_456)) == 123_456


@pytest.mark.parametrize("state", ["OPEN", "IN_RECOVERY", ""])
def test_a_ledger_never_closed_has_no_recorded_length(state: str) -> None:
    # BookKeeper writes the length into the metadata when the ledger is closed: 0 there means "unknown".
    assert freed_bytes(ledger(0, state)) is None


def test_offloaded_objects_free_their_sizes_or_unknown() -> None:
    assert freed_bytes(StoredObjects("s3", None, ({},), size_bytes=4096)) == 4096
    assert freed_bytes(StoredObjects("filesystem", None, None)) is None


def test_nothing_stored_frees_nothing() -> None:
    assert freed_bytes(Missing()) == 0
    assert freed_bytes(Refused("unknown_offload_target")) == 0


def test_only_a_deletion_carries_freed_bytes() -> None:
    info = PendingDeleteLedgerInfo(TOPIC, LedgerComponent.MANAGED_LEDGER, LedgerType.LEDGER, 7)
    res = decide(info, Facts(GONE, ledger(5000)), now_ms=NOW, rules=RULES)
    assert res.outcome is Outcome.DELETED and res.freed_bytes == 5000
    gone = decide(info, Facts(GONE, Missing()), now_ms=NOW, rules=RULES)
    # Already gone: this worker freed nothing (whoever deleted it did).
    assert gone.outcome is Outcome.ALREADY_GONE and gone.freed_bytes is None
    fresh = StoredLedger(LedgerMetadata(7, dict(CM), NOW, 5000, "CLOSED"))
    young = decide(info, Facts(GONE, fresh), now_ms=NOW, rules=RULES)
    assert young.outcome is Outcome.TOO_YOUNG and young.freed_bytes is None
    off = PendingDeleteLedgerInfo(
        TOPIC, LedgerComponent.MANAGED_LEDGER, LedgerType.OFFLOAD_LEDGER, 7, offload_context=CTX
    )
    objs = StoredObjects("s3", None, ({"ManagedLedgerName": ML},), size_bytes=777)
    assert decide(off, Facts(GONE, objs), now_ms=NOW, rules=RULES).freed_bytes == 777


def test_sum_known_counts_what_is_known_and_how_much_is_not() -> None:
    assert sum_known([10, None, 5, None]) == (15, 2)
    assert sum_known([]) == (0, 0)


@pytest.mark.parametrize(
    ("n", "text"),
    [
        (0, "0 B"),
        (999, "999 B"),
        (1024, "1.0 KiB"),
        (1536, "1.5 KiB"),
        (1_288_490_189, "1.2 GiB"),
        (5 * 1024**4, "5.0 TiB"),
        (None, "unknown"),
    ],
)
def test_human_bytes(n: int | None, text: str) -> None:
    assert human_bytes(n) == text
