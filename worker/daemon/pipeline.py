"""The per-message pipeline, docs/design.md's six steps top-down:

1. decode  2. route  3. in use?  4. verify storage identity  5. delete  6. settle

Steps 1-5 are the decision core (``worker.daemon.decider``: facts gathered in one I/O step, then a pure
decision); this module adds step 6: every outcome maps, through one table, to a settle action.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import time
from collections.abc import Callable
from typing import Any

import pulsar

from worker.backends.zookeeper import Znode
from worker.core.backoff import Backoff
from worker.core.bounded_payload import head_text, summarize
from worker.core.broker_marks import released_when_exhausted
from worker.core.decision import Outcome, Result, settled_by_storage
from worker.core.message_properties import first_seen_ms
from worker.core.stored import Missing
from worker.daemon.decider import Decider
from worker.daemon.settlement import DeadLetterRefused, Settler, attempts_of, properties_of
from worker.formats.message import InvalidMessage, LedgerType, PendingDeleteLedgerInfo, decode
from worker.logs import get_logger
from worker.metrics import Metrics
from worker.settings import WorkerSettings

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
    def __init__(
        self,
        *,
        decider: Decider,
        settler: Settler,
        settings: WorkerSettings,
        metrics: Metrics,
        on_freed: Callable[[LedgerType, int], None] | None = None,
    ) -> None:
        self.decider = decider
        # bookkeeper.gc_trigger_bytes: every deletion's freed bytes (worker.daemon.bookie_gc.BookieGc.freed).
        self.on_freed = on_freed
        self.settler = settler
        self.settings = settings
        self.metrics = metrics
        self.backoff = Backoff(settings.backoff_initial_s, settings.backoff_max_s, settings.backoff_multiplier)

    async def sweep(
        self, msgs: list[pulsar.Message]
    ) -> tuple[list[tuple[pulsar.Message, PendingDeleteLedgerInfo | None]], dict[int, Znode]]:
        """Settle a batch's already-gone messages together, before any route is read.

        Every BookKeeper ledger the batch names is read at once, in multiReads of BookKeeper's metadata store
        (the store that says whether a ledger exists, whichever delete route is configured). A missing one
        is already gone whatever its topic's state (``worker.core.decision.settled_by_storage``, the rule
        ``decide`` applies first): acknowledged with the others, counted and logged as the per-message path
        does, under route ``none``. With phase 1 in the broker every deletion is queued, the ones the broker
        then carries out itself included: for those the worker only confirms the ledger is gone.

        Returns the messages left for :meth:`handle` (with their decoded record, or None: undecodable,
        oversize, an offloaded copy, a failed read, a refused acknowledgement all go through the full path,
        which reports them), and the znodes read for them (``worker.backends.prefetched_ledgers``). Never
        raises but for cancellation: a failed read leaves the whole batch to the full path (and the daemon sends
        the whole batch that way should the sweep itself fail)."""
        if not self.decider.storage_proven():
            return [(msg, None) for msg in msgs], {}
        left: list[tuple[pulsar.Message, PendingDeleteLedgerInfo | None]] = []
        asked: list[tuple[pulsar.Message, PendingDeleteLedgerInfo]] = []
        limit = self.settings.max_payload_bytes
        for msg in msgs:
            data = msg.data()
            info = None
            if len(data) <= limit:
                with contextlib.suppress(InvalidMessage):
                    info = decode(data)
            if info is not None and info.ledger_type is LedgerType.LEDGER:
                asked.append((msg, info))
            else:
                left.append((msg, info))
        if not asked:
            return left, {}
        started = time.monotonic()
        try:
            answers = await self.decider.metadata.read_ledgers_metadata([info.ledger_id for _, info in asked])
        except asyncio.CancelledError:
            raise
        except Exception as e:
            log.debug("batch sweep read failed; its messages are decided one by one", error=f"{type(e).__name__}: {e}")
            return [*left, *asked], {}
        reads: dict[int, Znode] = {}
        gone: list[tuple[pulsar.Message, PendingDeleteLedgerInfo]] = []
        for (msg, info), answer in zip(asked, answers, strict=True):
            if answer is None:
                gone.append((msg, info))
                continue
            if isinstance(answer, BaseException):
                self.metrics.storage_requests.labels("zookeeper", "read", "error").inc()
            else:
                reads[info.ledger_id] = answer
            left.append((msg, info))
        if not gone:
            return left, reads
        self.metrics.storage_requests.labels("zookeeper", "read", "not_found").inc(len(gone))
        try:
            failures = await self.settler.ack_many([msg for msg, _ in gone])
        except asyncio.CancelledError:
            raise
        except Exception as e:
            failures = [e] * len(gone)
        res = settled_by_storage(Missing())
        assert res is not None
        # The metric updates are made once for the batch (its messages share every label); the log lines
        # stay one per message.
        processing = self.metrics.processing.labels(route=res.route.value, outcome=res.outcome.value)
        elapsed = time.monotonic() - started
        settled = 0
        for (msg, info), failure in zip(gone, failures, strict=True):
            if failure is not None:
                left.append((msg, info))  # the full path acknowledges it again, or dead-letters it
                continue
            settled += 1
            processing.observe(elapsed)
            self._observe_end_to_end(msg)
            log.info(
                "ledger already gone",
                msg_topic=msg.topic_name(),
                message_id=str(msg.message_id()),
                attempt=attempts_of(msg) + 1,
                route=res.route.value,
                outcome=res.outcome.value,
                topic=head_text(info.topic_name),
                ledger_id=info.ledger_id,
                ledger_type=info.ledger_type.value,
            )
        if settled:
            self.metrics.received.inc(settled)
            self._count(gone[0][1], res, settled)  # every swept message is a BookKeeper LEDGER
        return left, reads

    async def handle(self, msg: pulsar.Message, decoded: PendingDeleteLedgerInfo | None = None) -> Result:
        """Decide and settle one message (``decoded``: its record, when :meth:`sweep` decoded it already).
        Whatever fails on the way (a decision that raises, a retry copy the broker refuses, anything) ends in
        the DLQ; only a DLQ that refuses even a bounded copy raises (:class:`DeadLetterRefused`, nothing
        acknowledged) and the daemon hands the message back."""
        started = time.monotonic()
        self.metrics.received.inc()
        attempt = attempts_of(msg) + 1
        # The log line's context, bound once (each bind copies it): enough to trace the message if the
        # decision itself fails, its outcome and ledger once decided.
        context: dict[str, Any] = {
            "msg_topic": msg.topic_name(),
            "message_id": str(msg.message_id()),
            "attempt": attempt,
        }
        res: Result | None = None
        try:
            data = msg.data()
            info: PendingDeleteLedgerInfo | None
            if decoded is not None:
                info, res = decoded, await self.decider.decide_info(decoded)
            else:
                info, res = await self._decide(data)  # steps 1-5
            context["route"], context["outcome"] = res.route.value, res.outcome.value
            if info is not None:
                context["topic"] = head_text(info.topic_name)
                context["ledger_id"], context["ledger_type"] = info.ledger_id, info.ledger_type.value
            await self._settle(msg, data, info, res, attempt, log.bind(**context))  # step 6
        except (asyncio.CancelledError, DeadLetterRefused):
            raise
        except Exception as e:
            res = await self._dead_letter_unsettled(msg, res, e, log.bind(**context))
        self.metrics.processing.labels(route=res.route.value, outcome=res.outcome.value).observe(
            time.monotonic() - started
        )
        return res

    async def _decide(self, data: bytes) -> tuple[PendingDeleteLedgerInfo | None, Result]:
        limit = self.settings.max_payload_bytes
        if len(data) > limit:
            # Not even decoded: no genuine pending deletion comes near the limit, and its retry or DLQ copy
            # (the payload plus properties) could not be published under the broker's maxMessageSize.
            reason = f"payload of {len(data)} bytes is over worker.max_payload_bytes ({limit})"
            return None, Result(Outcome.INVALID, reason=reason, stage="decode")
        return await self.decider.decide(data)

    async def _dead_letter_unsettled(self, msg: pulsar.Message, res: Result | None, e: Exception, bound: Any) -> Result:
        """The last resort for a message whose settle failed: the DLQ, under its outcome (``transient`` when
        there was none), with the failure as its last error. Never a nack: a failure that repeats on every
        delivery would loop forever."""
        error = f"{type(e).__name__}: {e}"
        self.metrics.failed.labels(stage="settle").inc()
        bound.error("message not settled: dead-lettering it", error=head_text(error))
        outcome = res.outcome if res is not None else Outcome.TRANSIENT
        await self.settler.dead_letter(msg, reason=outcome.value, error=f"not settled: {error}")
        return res if res is not None else Result(Outcome.TRANSIENT, reason=error, stage="settle")

    async def _settle(
        self,
        msg: pulsar.Message,
        data: bytes,
        info: PendingDeleteLedgerInfo | None,
        res: Result,
        attempt: int,
        bound: Any,
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
                    # A forged message is a security event an operator must be able to trace, but its log
                    # line is bounded: size and digest (they match the dead letter), and the record's first KiB.
                    s = summarize(data)
                    bound.warning(
                        "deletion rejected: storage identity not proven; dead-lettered",
                        reason=head_text(res.reason),
                        payload={
                            "size": s.size,
                            "sha256": s.sha256,
                            "head": head_text(info.to_json()) if info is not None else None,
                        },
                    )
                else:
                    # The reason can quote the payload (a bad topic name): bounded like the payload.
                    bound.warning("undecodable message dead-lettered", reason=head_text(res.reason))
            case Action.RETRY:
                delays: list[float] = []

                def delay_after(n: int) -> float:
                    delays.append(retry_delay(res.outcome, n, self.settings, self.backoff))
                    return delays[-1]

                where = await self.settler.retry(
                    msg,
                    reason=res.outcome.value,
                    error=res.reason,
                    delay_after=delay_after,
                    release_when_exhausted=released_when_exhausted(
                        properties_of(msg), in_use=res.outcome is Outcome.IN_USE
                    ),
                )
                if where == "released":
                    bound.info(
                        "attempts exhausted, still listed by its topic: released (the broker queues it again when"
                        " it drops it)",
                        reason=res.outcome.value,
                        error=head_text(res.reason),
                    )
                elif where == "dlq":
                    bound.warning(
                        "attempts exhausted: dead-lettered", reason=res.outcome.value, error=head_text(res.reason)
                    )
                else:
                    bound.info(
                        "retry scheduled",
                        reason=res.outcome.value,
                        error=head_text(res.reason),
                        delay_s=round(delays[-1], 3),
                    )

    def _count(self, info: PendingDeleteLedgerInfo | None, res: Result, n: int = 1) -> None:
        """Count ``n`` messages of ``info``'s ledger type that ended in ``res`` (more than one: the sweep's
        already-gone messages, which free nothing)."""
        m = self.metrics
        match res.outcome:
            case Outcome.DELETED | Outcome.ALREADY_GONE:
                assert info is not None
                m.deleted.labels(
                    ledger_type=info.ledger_type.value, route=res.route.value, result=res.outcome.value
                ).inc(n)
                if res.freed_bytes:  # DELETED only (Result.freed_bytes): already gone freed nothing here
                    m.freed_bytes.labels(ledger_type=info.ledger_type.value, route=res.route.value).inc(res.freed_bytes)
                    if self.on_freed is not None:
                        self.on_freed(info.ledger_type, res.freed_bytes)
            case Outcome.REJECTED:
                m.rejected.labels(reason=res.reason).inc(n)
            case Outcome.IN_USE:
                m.in_use.inc(n)
            case Outcome.TRANSIENT:
                m.failed.labels(stage=res.stage or "unknown").inc(n)
            case _:
                pass

    def _observe_end_to_end(self, msg: pulsar.Message) -> None:
        now_ms = int(time.time() * 1000)
        try:
            publish_ms = int(msg.publish_timestamp() or 0)
        except (TypeError, ValueError):
            publish_ms = 0
        start_ms = first_seen_ms(properties_of(msg), publish_ms=publish_ms, now_ms=now_ms)
        self.metrics.end_to_end.observe(max(0.0, (now_ms - start_ms) / 1000))
