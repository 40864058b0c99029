"""Step 6, decided: how a message with a given outcome, on a given attempt, is settled. Pure; the daemon's
``Settler`` carries the choice out (its I/O only).

Rejections are dead-lettered, not acknowledged: a systematic misread (a naming bug, a format change) must
leave a trace the nightly replay reports, instead of silently dropping deletions. Exhaustion is decided
before any delay is computed: nothing about the delay may keep a message from its DLQ.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from worker.core.backoff import Backoff
from worker.core.decision import Outcome


class Action(enum.Enum):
    ACK = "ack"  # final success: acknowledge
    DEAD_LETTER = "dead_letter"  # an operator must see it: the DLQ with its reason, then acknowledge
    RETRY = "retry"  # not now: a delayed copy on the retry topic, then acknowledge
    RELEASE = "release"  # attempts exhausted, nothing lost: acknowledge only (``worker.core.broker_marks``)


# The action of each outcome a worker can meet, before attempts are counted.
SETTLE: dict[Outcome, Action] = {
    Outcome.DELETED: Action.ACK,
    Outcome.ALREADY_GONE: Action.ACK,
    Outcome.REJECTED: Action.DEAD_LETTER,
    Outcome.INVALID: Action.DEAD_LETTER,
    Outcome.IN_USE: Action.RETRY,
    Outcome.TOO_YOUNG: Action.RETRY,
    Outcome.TRANSIENT: Action.RETRY,
}


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """How long a retry waits: in use -> ``in_use_retry_s``; too young -> half the minimum age (it will be
    old enough after at most two more looks); a failure -> exponential backoff."""

    in_use_retry_s: float
    min_ledger_age_s: float
    backoff: Backoff

    def delay(self, outcome: Outcome, attempt: int) -> float:
        if outcome is Outcome.IN_USE:
            return self.in_use_retry_s
        if outcome is Outcome.TOO_YOUNG:
            return self.min_ledger_age_s / 2
        return self.backoff.delay(attempt)


@dataclass(frozen=True, slots=True)
class Choice:
    action: Action
    delay_s: float = 0.0  # RETRY only
    exhausted: bool = False  # a RETRY turned into a dead letter or a release


def choose(outcome: Outcome, *, attempt: int, max_attempts: int, released: bool, policy: RetryPolicy) -> Choice:
    """The settle action of a message on its ``attempt`` (from 1) that ended in ``outcome``; ``released``:
    what the release rule says of it, should its attempts be exhausted."""
    action = SETTLE[outcome]
    if action is not Action.RETRY:
        return Choice(action)
    if attempt >= max_attempts:
        return Choice(Action.RELEASE if released else Action.DEAD_LETTER, exhausted=True)
    return Choice(Action.RETRY, delay_s=policy.delay(outcome, attempt))
