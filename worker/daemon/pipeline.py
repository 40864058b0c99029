"""The per-message pipeline, docs/design.md's six steps top-down:

1. decode  2. route  3. in use?  4. verify storage identity  5. delete  6. settle

Each message is read once into an :class:`~worker.daemon.envelope.Envelope` (step 1 with it). Steps 2-5 are the
decision core (``worker.daemon.decider``: facts gathered in one I/O step, then a pure decision); step 6 is a pure
choice (``worker.core.settle_choice``) carried out by the ``Settler``.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

from worker.core.backoff import Backoff
from worker.core.bounded_payload import head_text, summarize
from worker.core.broker_marks import released_when_exhausted
from worker.core.decision import Outcome, Result, settled_by_storage
from worker.core.metadata_stores import StoredRecord
from worker.core.settle_choice import Action, Choice, RetryPolicy, choose
from worker.core.stored import Missing
from worker.daemon.decider import Decider
from worker.daemon.envelope import Envelope
from worker.daemon.settlement import DeadLetterRefused, Settler
from worker.formats.message import LedgerType, PendingDeleteLedgerInfo
from worker.logs import get_logger
from worker.metrics import Metrics, decoded_labels
from worker.settings import WorkerSettings

log = get_logger()


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
        self.retry_policy = RetryPolicy(
            settings.in_use_retry_s,
            settings.min_ledger_age_s,
            Backoff(settings.backoff_initial_s, settings.backoff_max_s, settings.backoff_multiplier),
        )
        self.mark_key = settings.broker_mark_key

    def read(self, msgs: list[Any]) -> list[Envelope]:
        """Each received message read once (never raises)."""
        now_ms = int(time.time() * 1000)
        limit = self.settings.max_payload_bytes
        return [Envelope.read(msg, max_payload_bytes=limit, mark_key=self.mark_key, now_ms=now_ms) for msg in msgs]

    async def settle_already_gone(self, envs: list[Envelope]) -> tuple[list[Envelope], dict[int, StoredRecord]]:
        """Settle a batch's already-gone messages together, before any route is read (docs/design.md, "The
        batched hot path"): every BookKeeper ledger the batch names is read at once in multiReads, and a missing one
        is already gone whatever its topic's state (``worker.core.decision.settled_by_storage``). No batch is swept
        before the delete route's storage is proven ours (``Decider.storage_proven``).

        Returns the messages left for :meth:`handle` (the full path reports them), and the znodes read for them
        (``worker.core.dispatch``). Never raises but for cancellation: a failed read leaves the whole batch to the
        full path."""
        if not self.decider.storage_proven():
            return list(envs), {}
        left: list[Envelope] = []
        asked: list[tuple[Envelope, PendingDeleteLedgerInfo]] = []
        for env in envs:
            if env.record is not None and env.record.ledger_type is LedgerType.LEDGER:
                asked.append((env, env.record))
            else:
                left.append(env)
        if not asked:
            return left, {}
        started = time.monotonic()
        try:
            answers = await self.decider.bookkeeper.read_ledgers_metadata([info.ledger_id for _, info in asked])
        except Exception as e:
            log.debug("batch sweep read failed; its messages are decided one by one", error=f"{type(e).__name__}: {e}")
            return [*left, *(env for env, _ in asked)], {}
        reads: dict[int, StoredRecord] = {}
        gone: list[tuple[Envelope, PendingDeleteLedgerInfo]] = []
        for (env, info), answer in zip(asked, answers, strict=True):
            if answer is None:
                gone.append((env, info))
                continue
            if isinstance(answer, BaseException):
                self.metrics.storage_requests.labels("zookeeper", "read", "error").inc()
            else:
                reads[info.ledger_id] = answer
            left.append(env)
        if not gone:
            return left, reads
        self.metrics.storage_requests.labels("zookeeper", "read", "not_found").inc(len(gone))
        try:
            failures = await self.settler.ack_many([env for env, _ in gone])
        except Exception as e:
            failures = [e] * len(gone)
        res = settled_by_storage(Missing())
        assert res is not None
        # The metric updates are made once for the batch (its messages share every label); the log lines
        # stay one per message.
        processing = self.metrics.processing.labels(route=res.route.value, outcome=res.outcome.value)
        elapsed = time.monotonic() - started
        settled = 0
        # Unlike the rest, the decoded count's labels are each message's own (brokers of two Pulsar lines share
        # the queue in a rolling upgrade): summed per label pair, then added once.
        decoded: Counter[tuple[str, str]] = Counter()
        for (env, info), failure in zip(gone, failures, strict=True):
            if failure is not None:
                left.append(env)  # the full path acknowledges it again, or dead-letters it
                continue
            settled += 1
            decoded[decoded_labels(info.properties)] += 1
            processing.observe(elapsed)
            self._observe_end_to_end(env)
            log.info(
                "ledger already gone",
                msg_topic=env.topic,
                message_id=env.message_id,
                attempt=env.attempt,
                route=res.route.value,
                outcome=res.outcome.value,
                topic=head_text(info.topic_name),
                ledger_id=info.ledger_id,
                ledger_type=info.ledger_type.value,
            )
        if settled:
            self.metrics.received.inc(settled)
            for (source, writer), n in decoded.items():
                self.metrics.decoded.labels(source=source, writer=writer).inc(n)
            self._count(gone[0][1], res, settled)  # every swept message is a BookKeeper LEDGER
        return left, reads

    async def handle(self, env: Envelope) -> Result:
        """Decide and settle one message. Whatever fails on the way (a decision that raises, a retry copy the
        broker refuses, anything) ends in the DLQ; only a DLQ that refuses even a bounded copy raises
        (:class:`DeadLetterRefused`, nothing acknowledged) and the daemon hands the message back."""
        started = time.monotonic()
        self.metrics.received.inc()
        # The log line's context, bound once (each bind copies it): enough to trace the message if the
        # decision itself fails, its outcome and ledger once decided.
        context: dict[str, Any] = {"msg_topic": env.topic, "message_id": env.message_id, "attempt": env.attempt}
        info = env.record
        if info is not None:
            source, writer = decoded_labels(info.properties)
            self.metrics.decoded.labels(source=source, writer=writer).inc()
            context["topic"] = head_text(info.topic_name)
            context["ledger_id"], context["ledger_type"] = info.ledger_id, info.ledger_type.value
        res: Result | None = None
        try:
            if info is None:
                res = Result(Outcome.INVALID, reason=env.invalid or "undecodable", stage="decode")  # step 1
            else:
                res = await self.decider.decide_info(info, env.dispatch)  # steps 2-5
            context["route"], context["outcome"] = res.route.value, res.outcome.value
            await self._settle(env, res, log.bind(**context))  # step 6
        except (asyncio.CancelledError, DeadLetterRefused):
            raise
        except Exception as e:
            res = await self._dead_letter_unsettled(env, res, e, log.bind(**context))
        self.metrics.processing.labels(route=res.route.value, outcome=res.outcome.value).observe(
            time.monotonic() - started
        )
        return res

    async def _dead_letter_unsettled(self, env: Envelope, res: Result | None, e: Exception, bound: Any) -> Result:
        """The last resort for a message whose settle failed: the DLQ, under its outcome (``transient`` when
        there was none), with the failure as its last error. Never a nack: a failure that repeats on every
        delivery would loop forever."""
        error = f"{type(e).__name__}: {e}"
        self.metrics.failed.labels(stage="settle").inc()
        bound.error("message not settled: dead-lettering it", error=head_text(error))
        outcome = res.outcome if res is not None else Outcome.TRANSIENT
        await self.settler.dead_letter(env, reason=outcome.value, error=f"not settled: {error}")
        return res if res is not None else Result(Outcome.TRANSIENT, reason=error, stage="settle")

    def choice(self, env: Envelope, res: Result) -> Choice:
        """Step 6 for ``env`` ending in ``res`` (``worker.core.settle_choice``)."""
        return choose(
            res.outcome,
            attempt=env.attempt,
            max_attempts=self.settings.max_attempts,
            released=released_when_exhausted(marked=env.broker_mark, listed=res.listed is not None),
            policy=self.retry_policy,
        )

    async def _settle(self, env: Envelope, res: Result, bound: Any) -> None:
        self._count(env.record, res)
        choice = self.choice(env, res)
        reason = res.outcome.value
        match choice.action:
            case Action.ACK:
                await self.settler.ack(env)
                self._observe_end_to_end(env)
                bound.info("ledger deleted" if res.outcome is Outcome.DELETED else "ledger already gone")
            case Action.RELEASE:
                await self.settler.ack(env)
                bound.info(
                    "attempts exhausted, still listed by its topic: released (the broker queues it again when it"
                    " drops it)",
                    reason=reason,
                    listed=res.listed.value if res.listed is not None else None,
                    error=head_text(res.reason),
                )
            case Action.RETRY:
                await self.settler.retry(env, reason=reason, error=res.reason, delay_s=choice.delay_s)
                bound.info(
                    "retry scheduled", reason=reason, error=head_text(res.reason), delay_s=round(choice.delay_s, 3)
                )
            case Action.DEAD_LETTER if choice.exhausted:
                error = f"attempts exhausted ({env.attempt}): {res.reason}"
                await self.settler.dead_letter(env, reason=reason, error=error)
                bound.warning("attempts exhausted: dead-lettered", reason=reason, error=head_text(res.reason))
            case Action.DEAD_LETTER:
                await self.settler.dead_letter(env, reason=reason, error=res.reason)
                if res.outcome is Outcome.REJECTED:
                    # A forged message is a security event an operator must be able to trace, but its log
                    # line is bounded: size and digest (they match the dead letter), and the record's first KiB.
                    s = summarize(env.data)
                    head = head_text(env.record.to_json()) if env.record is not None else None
                    bound.warning(
                        "deletion rejected: storage identity not proven; dead-lettered",
                        reason=head_text(res.reason),
                        payload={"size": s.size, "sha256": s.sha256, "head": head},
                    )
                else:
                    # The reason can quote the payload (a bad topic name): bounded like the payload.
                    bound.warning("undecodable message dead-lettered", reason=head_text(res.reason))

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

    def _observe_end_to_end(self, env: Envelope) -> None:
        now_ms = int(time.time() * 1000)
        self.metrics.end_to_end.observe(max(0.0, (now_ms - env.first_seen_ms) / 1000))
