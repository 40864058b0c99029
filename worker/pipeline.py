"""The per-message pipeline, DESIGN.md's six steps top-down:

1. decode  2. route  3. in use?  4. verify storage identity  5. delete  6. settle

Steps 1-5 are the decision core (``worker.decision``: facts gathered in one I/O step, then a pure
decision); this module adds step 6: every outcome maps, through one table, to a settle action.
"""

from __future__ import annotations

import enum
import time
from typing import Any

import pulsar

from worker.backoff import Backoff
from worker.decision import Decider, Outcome, Result
from worker.logs import get_logger
from worker.message import FIRST_SEEN_MS, PendingDeleteLedgerInfo
from worker.metrics import Metrics
from worker.settings import WorkerSettings
from worker.settlement import Settler, attempts_of

log = get_logger()


class Action(enum.Enum):
    ACK = "ack"  # final success: acknowledge
    DEAD_LETTER = "dead_letter"  # final, but an operator must see it: the DLQ with its reason, then ack
    RETRY = "retry"  # not now: a delayed copy on the retry topic (the DLQ once attempts run out), then ack


# Step 6 in one table. Rejections are dead-lettered, not acked: a systematic misread (a naming bug, a
# format change) must leave a trace the nightly replay reports, instead of silently dropping deletions.
SETTLE: dict[Outcome, Action] = {
    Outcome.DELETED: Action.ACK,
    Outcome.ALREADY_GONE: Action.ACK,
    Outcome.REJECTED: Action.DEAD_LETTER,
    Outcome.INVALID: Action.DEAD_LETTER,
    Outcome.IN_USE: Action.RETRY,
    Outcome.TOO_YOUNG: Action.RETRY,
    Outcome.TRANSIENT: Action.RETRY,
}


def retry_delay(outcome: Outcome, attempt: int, s: WorkerSettings, backoff: Backoff) -> float:
    """How long a RETRY waits: in use -> ``in_use_retry_s``; too young -> half the minimum age (it will be
    old enough after at most two more looks); a failure -> exponential backoff."""
    if outcome is Outcome.IN_USE:
        return s.in_use_retry_s
    if outcome is Outcome.TOO_YOUNG:
        return s.min_ledger_age_s / 2
    return backoff.delay(attempt)


class Pipeline:
    def __init__(self, *, decider: Decider, settler: Settler, settings: WorkerSettings, metrics: Metrics) -> None:
        self.decider = decider
        self.settler = settler
        self.settings = settings
        self.metrics = metrics
        self.backoff = Backoff(settings.backoff_initial_s, settings.backoff_max_s, settings.backoff_multiplier)

    async def handle(self, msg: pulsar.Message) -> Result:
        started = time.monotonic()
        self.metrics.received.inc()
        attempt = attempts_of(msg) + 1
        info, res = await self.decider.decide(msg.data())  # steps 1-5
        bound = log.bind(
            msg_topic=msg.topic_name(),
            message_id=str(msg.message_id()),
            attempt=attempt,
            route=res.route.value,
            outcome=res.outcome.value,
        )
        if info is not None:
            bound = bound.bind(topic=info.topic_name, ledger_id=info.ledger_id, ledger_type=info.ledger_type.value)
        await self._settle(msg, info, res, attempt, bound)  # step 6
        self.metrics.processing.labels(route=res.route.value, outcome=res.outcome.value).observe(
            time.monotonic() - started
        )
        return res

    async def _settle(
        self, msg: pulsar.Message, info: PendingDeleteLedgerInfo | None, res: Result, attempt: int, bound: Any
    ) -> None:
        self._count(info, res)
        match SETTLE[res.outcome]:
            case Action.ACK:
                await self.settler.ack(msg)
                self._observe_end_to_end(msg)
                bound.info("ledger deleted" if res.outcome is Outcome.DELETED else "ledger already gone")
            case Action.DEAD_LETTER:
                await self.settler.dead_letter(msg, reason=res.outcome.value, error=res.reason)
                if res.outcome is Outcome.REJECTED:
                    # The full payload: a forged message is a security event an operator must be able to trace.
                    bound.warning(
                        "deletion rejected: storage identity not proven; dead-lettered",
                        reason=res.reason,
                        payload=info.to_avro() if info is not None else None,
                    )
                else:
                    bound.warning("undecodable message dead-lettered", reason=res.reason)
            case Action.RETRY:
                delay = retry_delay(res.outcome, attempt, self.settings, self.backoff)
                where = await self.settler.retry(msg, reason=res.outcome.value, error=res.reason, delay_s=delay)
                if where == "dlq":
                    bound.warning("attempts exhausted: dead-lettered", reason=res.outcome.value, error=res.reason)
                else:
                    bound.info("retry scheduled", reason=res.outcome.value, error=res.reason, delay_s=round(delay, 3))

    def _count(self, info: PendingDeleteLedgerInfo | None, res: Result) -> None:
        m = self.metrics
        match res.outcome:
            case Outcome.DELETED | Outcome.ALREADY_GONE:
                assert info is not None
                m.deleted.labels(
                    ledger_type=info.ledger_type.value, route=res.route.value, result=res.outcome.value
                ).inc()
            case Outcome.REJECTED:
                m.rejected.labels(reason=res.reason).inc()
            case Outcome.IN_USE:
                m.in_use.inc()
            case Outcome.TRANSIENT:
                m.failed.labels(stage=res.stage or "unknown").inc()
            case _:
                pass

    def _observe_end_to_end(self, msg: pulsar.Message) -> None:
        first = msg.properties().get(FIRST_SEEN_MS)
        try:
            start_ms = int(first) if first else int(msg.publish_timestamp())
        except ValueError:
            return
        self.metrics.end_to_end.observe(max(0.0, (time.time() * 1000 - start_ms) / 1000))
