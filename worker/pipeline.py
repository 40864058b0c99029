"""The per-message pipeline, DESIGN.md's six steps top-down:

1. decode  2. route  3. in use?  4. verify storage identity  5. delete  6. settle

``decide`` runs steps 1-5 and returns a :class:`Result`; ``handle`` adds step 6. Side effects live in
the injected clients; the rules (``worker.in_use``, ``worker.verification``) are pure.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import time
import uuid
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any

import pulsar

from worker.backoff import Backoff
from worker.bookkeeper import LedgerStore
from worker.http import BackendError
from worker.in_use import LiveSet, SnapshotCache, TopicGone, in_use
from worker.logs import get_logger
from worker.message import (
    FIRST_SEEN_MS,
    InvalidMessage,
    LedgerComponent,
    LedgerType,
    PendingDeleteLedgerInfo,
    decode,
)
from worker.metrics import Metrics
from worker.pulsar_admin import NotOwner, PulsarAdmin, TopicNotFound
from worker.rate_limit import TokenBucket
from worker.settings import WorkerSettings
from worker.settlement import Settler, attempts_so_far
from worker.tiered_storage import Gone, Present, TieredStorage
from worker.verification import Verdict, Verification, verify_bookkeeper

log = get_logger()

# A decision whose snapshot epoch moved is re-taken; this many times before it counts as transient.
MAX_REEVALUATIONS = 3


class Outcome(enum.StrEnum):
    DELETED = "deleted"  # this worker removed it
    ALREADY_GONE = "already_gone"  # storage had nothing: success, idempotently
    REJECTED = "rejected"  # identity not proven: acked, never deleted
    IN_USE = "in_use"  # the owner still references it: retry later
    TOO_YOUNG = "too_young"  # may be a ledger being created: retry later
    TRANSIENT = "transient"  # a backend failed: retry with backoff
    INVALID = "invalid"  # undecodable: dead letter at once


class Route(enum.StrEnum):
    OWNER = "owner"
    DIRECT = "direct"
    NONE = "none"


@dataclass(frozen=True, slots=True)
class Result:
    outcome: Outcome
    route: Route = Route.NONE
    reason: str = ""
    stage: str = ""


class Pipeline:
    def __init__(
        self,
        *,
        admin: PulsarAdmin,
        snapshots: SnapshotCache,
        ledgers: LedgerStore,
        tiered: TieredStorage,
        limiter: TokenBucket,
        settings: WorkerSettings,
        metrics: Metrics,
        settler: Settler,
        wall_clock_ms: Callable[[], int] = lambda: int(time.time() * 1000),
    ) -> None:
        self.admin = admin
        self.snapshots = snapshots
        self.ledgers = ledgers
        self.tiered = tiered
        self.limiter = limiter
        self.settings = settings
        self.metrics = metrics
        self.settler = settler
        self.now_ms = wall_clock_ms
        self.backoff = Backoff(settings.backoff_initial_s, settings.backoff_max_s, settings.backoff_multiplier)
        # Per-ledger locks with their holder+waiter counts, dropped when the last user leaves.
        self._locks: dict[tuple[str, int], tuple[asyncio.Lock, int]] = {}

    @contextlib.asynccontextmanager
    async def _ledger_lock(self, key: tuple[str, int]) -> AsyncIterator[None]:
        lock, users = self._locks.get(key) or (asyncio.Lock(), 0)
        self._locks[key] = (lock, users + 1)
        try:
            async with lock:
                yield
        finally:
            lock, users = self._locks[key]
            if users <= 1:
                del self._locks[key]
            else:
                self._locks[key] = (lock, users - 1)

    # ---- steps 1-5 ---------------------------------------------------------------------------------
    async def decide(self, data: bytes) -> tuple[PendingDeleteLedgerInfo | None, Result]:
        # 1. Decode: garbage is a dead letter, never an exception in the receive loop.
        try:
            info = decode(data)
        except InvalidMessage as e:
            return None, Result(Outcome.INVALID, reason=str(e), stage="decode")
        try:
            # Duplicates of one ledger are decided one after the other, so exactly one deletes it and
            # the others find it already gone.
            async with self._ledger_lock(info.dedupe_key):
                return info, await self._decide(info)
        except (BackendError, NotOwner, TopicNotFound) as e:
            return info, Result(Outcome.TRANSIENT, reason=f"{type(e).__name__}: {e}", stage=_stage_of(e))

    async def _decide(self, info: PendingDeleteLedgerInfo) -> Result:
        for _ in range(MAX_REEVALUATIONS):
            # 2. Route: the owner's live state, or learn that the topic is gone.
            snap = await self.snapshots.get(info.topic, info.ledger_id)
            route = Route.OWNER if isinstance(snap, LiveSet) else Route.DIRECT

            # 3. In use? Only the owner route has live state to consult...
            if isinstance(snap, LiveSet) and await self._in_use(info, snap):
                return Result(Outcome.IN_USE, route, "referenced by its topic")
            # ...except for schemas, which outlive their topic: a topic re-created under the same name
            # takes the registry's schema back, so a registry that still holds one keeps its ledgers.
            if (
                isinstance(snap, TopicGone)
                and info.ledger_component is LedgerComponent.SCHEMA_STORAGE
                and await self.admin.schema_info(info.topic) is not None
            ):
                return Result(Outcome.IN_USE, route, "the schema registry still holds the topic's schema")

            # 4. Verify storage identity (both routes). ``target`` is what step 5 deletes: exactly what
            # was verified (a metadata version, the offloaded objects that proved their identity).
            target: Any
            if info.ledger_type is LedgerType.LEDGER:
                got = await self.ledgers.read(info.ledger_id)
                if got is None:
                    return Result(Outcome.ALREADY_GONE, route)
                md, target = got
                v = verify_bookkeeper(
                    info, md, now_ms=self.now_ms(), min_age_ms=int(self.settings.min_ledger_age_s * 1000)
                )
            else:
                state = await self.tiered.inspect(info)
                if isinstance(state, Gone):
                    return Result(Outcome.ALREADY_GONE, route)
                v = state if isinstance(state, Verification) else Verification.ok()
                target = state
            if v.verdict is Verdict.REJECTED:
                return Result(Outcome.REJECTED, route, v.reason)
            if v.verdict is Verdict.TOO_YOUNG:
                return Result(Outcome.TOO_YOUNG, route, v.reason)

            # A decision taken on an older epoch (307, owner change, topic re-created while we looked)
            # is re-taken from step 2 before anything is deleted.
            if not self.snapshots.is_current(snap):
                continue

            # 5. Delete. Not found is success; ambiguous answers are resolved by reading again.
            await self.limiter.acquire()
            if info.ledger_type is LedgerType.LEDGER:
                removed = await self.ledgers.delete(info.ledger_id, target)
            else:
                assert isinstance(target, Present)
                await self.tiered.delete(target)
                removed = True
            return Result(Outcome.DELETED if removed else Outcome.ALREADY_GONE, route)
        return Result(Outcome.TRANSIENT, Route.OWNER, "live state kept changing (epoch)", stage="route")

    async def _in_use(self, info: PendingDeleteLedgerInfo, snap: LiveSet) -> bool:
        if info.ledger_type is LedgerType.LEDGER:
            return in_use(snap, info)
        # An offloaded copy is in use while its ledger is listed, unless the topic records another
        # offload uuid for it: then this copy is a failed earlier offload attempt, garbage.
        if info.ledger_id not in snap.ml_ledgers:
            return False
        recorded = await self._recorded_offload_uuid(info, snap)
        ctx = info.offload_context
        return recorded is None or ctx is None or recorded == ctx.uuid

    async def _recorded_offload_uuid(self, info: PendingDeleteLedgerInfo, snap: LiveSet) -> uuid.UUID | None:
        raw = (await self.admin.offload_uuids(info.topic, base=snap.owner_url.split(",")[0])).get(info.ledger_id)
        try:
            return uuid.UUID(raw) if raw else None
        except ValueError:
            return None

    # ---- step 6 ------------------------------------------------------------------------------------
    async def handle(self, msg: pulsar.Message) -> Result:
        started = time.monotonic()
        self.metrics.received.inc()
        attempt = attempts_so_far(msg.properties()) + 1
        info, res = await self.decide(msg.data())
        bound = log.bind(
            msg_topic=msg.topic_name(),
            message_id=str(msg.message_id()),
            attempt=attempt,
            route=res.route.value,
            outcome=res.outcome.value,
        )
        if info is not None:
            bound = bound.bind(topic=info.topic_name, ledger_id=info.ledger_id, ledger_type=info.ledger_type.value)
        await self._settle(msg, info, res, attempt, bound)
        self.metrics.processing.labels(route=res.route.value, outcome=res.outcome.value).observe(
            time.monotonic() - started
        )
        return res

    async def _settle(
        self, msg: pulsar.Message, info: PendingDeleteLedgerInfo | None, res: Result, attempt: int, bound: Any
    ) -> None:
        settler = self.settler
        s = self.settings
        match res.outcome:
            case Outcome.DELETED | Outcome.ALREADY_GONE:
                assert info is not None
                await settler.ack(msg)
                self.metrics.deleted.labels(
                    ledger_type=info.ledger_type.value, route=res.route.value, result=res.outcome.value
                ).inc()
                self._observe_end_to_end(msg)
                bound.info("ledger deleted" if res.outcome is Outcome.DELETED else "ledger already gone")
            case Outcome.REJECTED:
                assert info is not None
                await settler.ack(msg)
                self.metrics.rejected.labels(reason=res.reason).inc()
                self._observe_end_to_end(msg)
                # The full payload: a forged message is a security event an operator must be able to trace.
                bound.warning(
                    "deletion rejected: storage identity not proven", reason=res.reason, payload=info.to_avro()
                )
            case Outcome.INVALID:
                await settler.dead_letter(msg, reason="invalid", error=res.reason)
                bound.warning("undecodable message dead-lettered", reason=res.reason)
            case Outcome.IN_USE | Outcome.TOO_YOUNG | Outcome.TRANSIENT:
                if res.outcome is Outcome.IN_USE:
                    self.metrics.in_use.inc()
                    delay = s.in_use_retry_s
                elif res.outcome is Outcome.TOO_YOUNG:
                    delay = s.min_ledger_age_s / 2 if s.min_ledger_age_s else s.backoff_initial_s
                else:
                    self.metrics.failed.labels(stage=res.stage or "unknown").inc()
                    delay = self.backoff.delay(attempt)
                where = await settler.retry(msg, reason=res.outcome.value, error=res.reason, delay_s=delay)
                if where == "dlq":
                    bound.warning("attempts exhausted: dead-lettered", reason=res.outcome.value, error=res.reason)
                else:
                    bound.info("retry scheduled", reason=res.outcome.value, error=res.reason, delay_s=round(delay, 3))

    def _observe_end_to_end(self, msg: pulsar.Message) -> None:
        first = msg.properties().get(FIRST_SEEN_MS)
        try:
            start_ms = int(first) if first else int(msg.publish_timestamp())
        except ValueError:
            return
        self.metrics.end_to_end.observe(max(0.0, (self.now_ms() - start_ms) / 1000))


def _stage_of(e: Exception) -> str:
    if isinstance(e, BackendError):
        return {"admin": "route", "bookie": "bookkeeper", "s3": "tiered_storage", "zookeeper": "zookeeper"}.get(
            e.backend, e.backend
        )
    return "route"
