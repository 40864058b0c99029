"""An open ledger may still be written while its topic exists (``worker.core.open_ledger``), as the worker checks it."""

from __future__ import annotations

import pytest

from tests.unit.fakes import NOW, live, md, message_for, pulsar_metadata
from worker.core.decision import Facts, Outcome, Rules, decide
from worker.core.ledger_owner import LedgerComponent, owner_of
from worker.core.live_set import TopicGone
from worker.core.open_ledger import may_be_written
from worker.core.stored import StoredLedger
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
    snap = live(str(topic)) if exists else TopicGone(topic, 0)
    res = decide(message_for(owner, 1), Facts(snap, StoredLedger(ledger)), now_ms=NOW, rules=Rules(0))
    assert (res.outcome is Outcome.IN_USE and res.reason.startswith("ledger_")) is written, res
