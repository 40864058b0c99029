"""An open ledger may still be written while its topic exists (``worker.core.open_ledger``), as the worker checks it."""

from __future__ import annotations

import pytest

from tests.unit.fakes import NOW, md, message_for, pulsar_metadata
from worker.core.ledger_owner import LedgerComponent, owner_of
from worker.core.open_ledger import may_be_written
from worker.core.verification import Verdict as Identity
from worker.core.verification import verify_bookkeeper
from worker.formats.topic_name import TopicName


@pytest.mark.parametrize(
    ("state", "exists", "written"),
    [
        ("CLOSED", True, False),
        ("closed", True, False),
        ("OPEN", True, True),
        ("IN_RECOVERY", True, True),
        ("", True, True),
        ("OPEN", False, False),
        ("IN_RECOVERY", False, False),
    ],
)
def test_an_open_ledger_may_be_written_while_its_topic_exists(state: str, exists: bool, written: bool) -> None:
    assert may_be_written(state, topic_exists=exists) is written
    topic = TopicName.parse("persistent://t/ns/x")
    ledger = md(1, pulsar_metadata(topic, LedgerComponent.COMPACTED_LEDGER), state=state)
    owner = owner_of(ledger.custom_metadata)
    assert owner is not None
    v = verify_bookkeeper(message_for(owner, 1), ledger, now_ms=NOW, min_age_ms=0, writer_possible=exists)
    assert (v.verdict is Identity.OPEN) is written
