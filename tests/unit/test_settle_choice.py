"""``worker.core.settle_choice``: step 6 decided, purely."""

from __future__ import annotations

import pytest

from worker.core.backoff import Backoff
from worker.core.decision import FINAL, Outcome
from worker.core.settle_choice import SETTLE, Action, Choice, RetryPolicy, choose

POLICY = RetryPolicy(in_use_retry_s=600, min_ledger_age_s=20, backoff=Backoff(60, 3600, 2, jitter=0))


def test_every_outcome_the_daemon_can_meet_has_a_settle_action() -> None:
    # The daemon never runs dry, and the decider carries out RECOVER itself.
    assert set(SETTLE) == set(Outcome) - {Outcome.WOULD_DELETE, Outcome.RECOVER}
    assert {o for o, a in SETTLE.items() if a is not Action.RETRY} == FINAL
    # Rejections leave a trace in the DLQ instead of a bare ack.
    assert SETTLE[Outcome.REJECTED] is Action.DEAD_LETTER


def test_retry_delays() -> None:
    assert POLICY.delay(Outcome.IN_USE, 1) == 600
    assert POLICY.delay(Outcome.TOO_YOUNG, 1) == 10
    assert POLICY.delay(Outcome.TRANSIENT, 1) == 60
    assert POLICY.delay(Outcome.TRANSIENT, 3) == 240


@pytest.mark.parametrize(
    ("outcome", "attempt", "released", "expected"),
    [
        (Outcome.DELETED, 99, True, Choice(Action.ACK)),
        (Outcome.REJECTED, 1, True, Choice(Action.DEAD_LETTER)),
        (Outcome.IN_USE, 2, True, Choice(Action.RETRY, delay_s=600)),
        (Outcome.TRANSIENT, 5, False, Choice(Action.RETRY, delay_s=960)),
        (Outcome.IN_USE, 10, True, Choice(Action.RELEASE, exhausted=True)),
        (Outcome.IN_USE, 10, False, Choice(Action.DEAD_LETTER, exhausted=True)),
        (Outcome.TRANSIENT, 2**31 - 1, False, Choice(Action.DEAD_LETTER, exhausted=True)),
    ],
)
def test_choose(outcome: Outcome, attempt: int, released: bool, expected: Choice) -> None:
    assert choose(outcome, attempt=attempt, max_attempts=10, released=released, policy=POLICY) == expected


def test_exhaustion_is_decided_before_the_delay_is_asked_for() -> None:
    # Defect: the backoff delay was computed before the attempts check, and 60 * 2.0 ** 4999 raises
    # OverflowError: the message looped forever.
    class NoDelay(RetryPolicy):
        def delay(self, outcome: Outcome, attempt: int) -> float:
            raise AssertionError(f"delay asked for an exhausted message (attempt {attempt})")

    policy = NoDelay(600, 20, Backoff(60, 3600, 2))
    assert choose(Outcome.TRANSIENT, attempt=100_001, max_attempts=10, released=False, policy=policy).exhausted
