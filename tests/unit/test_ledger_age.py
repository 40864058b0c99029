"""A ledger's minimum age (``worker.core.ledger_age``): one rule, the decision's, for the scanner and the worker."""

from __future__ import annotations

import pytest

from tests.unit.fakes import NOW, md, message_for, pulsar_metadata
from worker.core.decision import Facts, Outcome, Rules, decide
from worker.core.ledger_age import ledger_age
from worker.core.ledger_owner import LedgerComponent, owner_of
from worker.core.live_set import TopicGone
from worker.core.stored import StoredLedger
from worker.formats.topic_name import TopicName


def test_minimum_age() -> None:
    assert ledger_age(None, now_ms=NOW, min_age_ms=0) == ledger_age(None, now_ms=NOW, min_age_ms=10)
    assert not ledger_age(None, now_ms=NOW, min_age_ms=0).old_enough
    assert ledger_age(NOW - 600_000, now_ms=NOW, min_age_ms=600_000).old_enough  # exactly the minimum
    assert not ledger_age(NOW - 599_999, now_ms=NOW, min_age_ms=600_000).old_enough
    # Created "after now" (another machine's clock): never old enough, even with no minimum. The scanner
    # used to clamp the age to 0 first and call it old enough at ``--min-age 0s``; the worker did not.
    future = ledger_age(NOW + 5_000, now_ms=NOW, min_age_ms=0)
    assert (future.age_ms, future.old_enough) == (0.0, False)


@pytest.mark.parametrize("ctime", [None, NOW - 3_600_000, NOW - 10, NOW + 10])
def test_scanner_and_worker_share_the_age_rule(ctime: int | None) -> None:
    topic = TopicName.parse("persistent://t/ns/x")
    ledger = md(1, pulsar_metadata(topic, LedgerComponent.MANAGED_LEDGER), ctime=ctime)
    age = ledger_age(ledger.ctime_ms, now_ms=NOW, min_age_ms=0)
    owner = owner_of(ledger.custom_metadata)
    assert owner is not None
    res = decide(message_for(owner, 1), Facts(TopicGone(topic, 0), StoredLedger(ledger)), now_ms=NOW, rules=Rules(0))
    assert res.outcome is (Outcome.DELETED if age.old_enough else Outcome.TOO_YOUNG)
