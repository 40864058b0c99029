"""The decision core: steps 1-5 of docs/design.md's pipeline (decode, route, in use, verify, delete).

The shape is "gather, then decide":
- :class:`Decider` reads the topic's live state (with its epoch) and what storage holds, concurrently;
- :func:`~worker.core.decision.decide` is a pure function ``(message, facts) -> Result``: all the rules, in
  their one order, unit-tested exhaustively; any other fact a rule asks for is read by the one gatherer
  (``worker.broker.gatherer``), after the live state;
- only a "delete" verdict does more I/O: the storage rate limit, then the epoch check (last, right before
  the delete: PIP-269's lesson), then the delete of exactly what was inspected.

The daemon (``worker.daemon.pipeline``) adds step 6, settle; the nightly DLQ replay calls the same core.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator

from worker.backends.bookie_http import BookieClient, BookieLedgerStore, CountedLedgerStore, LedgerStore
from worker.backends.http import new_session
from worker.backends.ledger_recovery import LedgerRecovery
from worker.backends.storage_copy import StorageCopy, copies
from worker.backends.stores import Stores
from worker.backends.tiered_storage import TieredStorage
from worker.broker.admin import NotOwner, PulsarAdmin, TopicNotFound, open_admin
from worker.broker.gatherer import Gatherer
from worker.broker.preflight import (
    check_bookies,
    check_bookkeeper_store,
    check_pulsar_store,
    pending_anchors,
    prove_bookkeeper_store,
)
from worker.broker.snapshot_cache import SnapshotCache, snapshot_cache
from worker.core.decision import Facts, Outcome, Result, Route, Rules
from worker.core.dispatch import Dispatch, since
from worker.core.ledger_age import ledger_age
from worker.core.live_set import Snapshot
from worker.core.metadata_stores import BookKeeperMetadataStore, PulsarMetadataStore
from worker.core.stored import Missing, Refused, Stored, StoredLedger
from worker.daemon.ledger_turns import LedgerTurns
from worker.daemon.rate_limit import TokenBucket
from worker.errors import BackendError
from worker.formats.message import InvalidMessage, LedgerType, PendingDeleteLedgerInfo, decode
from worker.formats.topic_name import TopicName
from worker.metrics import Metrics
from worker.settings import Settings, WorkerSettings

# A decision whose snapshot epoch moved is re-taken; this many times before it counts as transient.
MAX_REEVALUATIONS = 3
# How long the admin API's "not found" for a topic is reused (the metadata store is still asked for every
# message: ``SnapshotCache``); it spares a drained gone topic two admin calls per message.
NOT_FOUND_TTL_S = 5.0


# ---- gathering the facts, and carrying out a delete ------------------------------------------------


class _Failed(Exception):
    def __init__(self, stage: str, cause: BaseException) -> None:
        super().__init__(f"{type(cause).__name__}: {cause}")
        self.stage = stage


_BACKEND_STAGES = {"admin": "route", "bookie": "bookkeeper", "s3": "tiered_storage", "filesystem": "tiered_storage"}


@contextlib.contextmanager
def _stage(name: str) -> Iterator[None]:
    """Any failure inside becomes a TRANSIENT outcome counted under ``name`` (or its backend's stage)."""
    try:
        yield
    except (asyncio.CancelledError, _Failed):
        raise
    except BackendError as e:
        raise _Failed(_BACKEND_STAGES.get(e.backend, e.backend), e) from e
    except (NotOwner, TopicNotFound) as e:
        raise _Failed("route", e) from e
    except Exception as e:
        # Anything unforeseen (an odd admin answer, a parser bug) is a failed attempt like any other:
        # retried, counted, and dead-lettered when it persists. Never a message parked forever.
        raise _Failed(name, e) from e


def _proven() -> bool:
    return True


class Decider:
    def __init__(
        self,
        *,
        admin: PulsarAdmin,
        snapshots: SnapshotCache,
        copies: dict[LedgerType, StorageCopy],
        pulsar: PulsarMetadataStore,
        bookkeeper: BookKeeperMetadataStore,
        limiter: TokenBucket,
        settings: WorkerSettings,
        metrics: Metrics,
        dry_run: bool = False,
        wall_clock_ms: Callable[[], int] = lambda: int(time.time() * 1000),
        storage_proven: Callable[[], bool] = _proven,
        recovery: LedgerRecovery | None = None,
    ) -> None:
        self.admin = admin
        # Whether the delete route's storage is proven ours: on the bookie route, once one bookie endpoint
        # was proven a bookie of the anchored store's cluster. Until then no batch is swept: each message
        # goes the full way, where the bookie client proves an endpoint before its first call.
        self.storage_proven = storage_proven
        self.snapshots = snapshots
        self.copies = copies
        self.pulsar = pulsar
        self.gatherer = Gatherer(pulsar)
        self.bookkeeper = bookkeeper
        self.limiter = limiter
        self.rules = Rules.of(settings)
        self.metrics = metrics
        self.dry_run = dry_run
        self.now_ms = wall_clock_ms
        # Recovers (fences and closes) an open ledger nothing names before it is deleted; None: such a
        # ledger is kept, as any open one (``bookkeeper.recover_open_ledgers: false``).
        self.recovery = recovery
        self._turns = LedgerTurns()

    async def decide(self, data: bytes) -> tuple[PendingDeleteLedgerInfo | None, Result]:
        # 1. Decode: garbage is a dead letter, never an exception in the receive loop.
        try:
            info = decode(data)
        except InvalidMessage as e:
            return None, Result(Outcome.INVALID, reason=str(e), stage="decode")
        return info, await self.decide_info(info)

    async def decide_info(self, info: PendingDeleteLedgerInfo, dispatch: Dispatch | None = None) -> Result:
        """Steps 2-5 for a decoded message. Never raises (but for cancellation): failures are TRANSIENT.
        ``dispatch``: the daemon's, when it dispatched the message (``worker.core.dispatch``)."""
        try:
            # Duplicates of one ledger are decided one after the other, so exactly one deletes it and
            # the others find it already gone.
            await self._turns.take(info.dedupe_key)
            try:
                return await self._decide(info, dispatch)
            finally:
                self._turns.done(info.dedupe_key)
        except _Failed as e:
            return Result(Outcome.TRANSIENT, reason=str(e), stage=e.stage)

    async def _decide(self, info: PendingDeleteLedgerInfo, dispatch: Dispatch | None) -> Result:
        copy = self.copies[info.ledger_type]
        recovered = False
        for _ in range(MAX_REEVALUATIONS):
            live, stored = await self._read(info, copy, dispatch)
            # Every other fact is read when a rule asks for it (``worker.broker.gatherer``), after the live state,
            # from Pulsar's metadata store: a failure there (``Unread``) is that store's.
            with _stage("zookeeper"):
                res = await self.gatherer.decide(
                    info, Facts.asking(stored, live), now_ms=self.now_ms(), rules=self.rules
                )
            if res.outcome is Outcome.RECOVER:
                if self.dry_run:
                    return Result(Outcome.WOULD_DELETE, res.route, f"{res.reason}: would recover, then delete")
                if self.recovery is None:
                    return Result(Outcome.IN_USE, res.route, f"ledger_open: {res.reason} (recovery is off)")
                if recovered:
                    # Closed by the recovery, yet read open again: someone reopened it? Never guessed at.
                    return Result(Outcome.TRANSIENT, res.route, "still open after its recovery", stage="recovery")
                await self.limiter.acquire()
                # As before a delete: the live state read must still be the topic's, with nothing awaited
                # between this check and the recovery's first write.
                if not self.snapshots.is_current(live):
                    self.metrics.reevaluations.inc()
                    continue
                with _stage("recovery"):
                    done = await self.recovery.recover(info.ledger_id)
                recovered = True
                if done.closed_here:
                    self.metrics.recovered.labels(component=info.ledger_component.value).inc()
                continue  # decided again on what the recovery left: a closed ledger (or none)
            if res.outcome is not Outcome.DELETED:
                return res
            if self.dry_run:
                return Result(Outcome.WOULD_DELETE, res.route, res.reason)
            await self.limiter.acquire()
            # The epoch is checked last, with nothing awaited between it and the delete: a 307, an owner
            # change or a re-creation seen since the facts were read re-takes the decision from step 2.
            if not self.snapshots.is_current(live):
                self.metrics.reevaluations.inc()
                continue
            with _stage(copy.stage):
                removed = await copy.delete(info, stored)
            # The bytes are the decision's (read before the delete); a copy someone else removed first freed
            # nothing here.
            return res if removed else Result(Outcome.ALREADY_GONE, res.route)
        return Result(Outcome.TRANSIENT, Route.OWNER, "live state kept changing (epoch)", stage="route")

    async def _inspect(self, info: PendingDeleteLedgerInfo, copy: StorageCopy, dispatch: Dispatch | None) -> Stored:
        with _stage(copy.stage):
            return await copy.inspect(info, dispatch)

    async def _read(
        self, info: PendingDeleteLedgerInfo, copy: StorageCopy, dispatch: Dispatch | None
    ) -> tuple[Snapshot, Stored]:
        # 4. What storage holds (identity is judged by ``decide``), read while step 2 reads the route: the
        # two reads are independent, and neither vouches for the other's freshness (the epoch check and the
        # versioned delete do that, right before the delete), so the message waits for one round trip, not two.
        inspecting = asyncio.ensure_future(self._inspect(info, copy, dispatch))
        try:
            # 2. Route: the owner's live state, or the proven absence of the topic.
            with _stage("route"):
                live = await self.snapshots.get(
                    info.topic, info.ledger_id, vouches=self._vouches(inspecting), since=since(dispatch)
                )
            stored = await inspecting
        except BaseException:
            _abandon(inspecting)
            raise
        return live, stored

    def _vouches(self, inspecting: asyncio.Future[Stored]) -> Callable[[int], Awaitable[bool]]:
        """The stale-id rule's other way out (``SnapshotCache.get``): a snapshot whose read started once the
        ledger was older than the minimum age would list it if its topic kept it (the premise of the
        too-young rule), so it may decide about a ledger id newer than any it lists. A ledger storage does
        not hold, or will not be asked about, is decided without the live state (gone, or refused)."""

        async def vouches(read_started_ms: int) -> bool:
            try:
                stored = await asyncio.shield(inspecting)
            except Exception:
                return False  # the inspection's failure is reported by the inspection itself
            if isinstance(stored, Missing | Refused):
                return True
            if not isinstance(stored, StoredLedger):
                return False
            created = stored.metadata.ctime_ms
            return ledger_age(created, now_ms=read_started_ms, min_age_ms=self.rules.min_ledger_age_ms).old_enough

        return vouches


def _abandon(task: asyncio.Future[Stored]) -> None:
    """Cancel a read nobody will use; a failure it already had is consumed (the route's failure is the
    one reported, as when the reads ran one after the other)."""
    if task.done():
        if not task.cancelled():
            task.exception()
    else:
        task.cancel()


@contextlib.asynccontextmanager
async def open_decider(
    settings: Settings,
    metrics: Metrics | None = None,
    *,
    dry_run: bool = False,
    prove_pulsar_store: bool | TopicName = False,
) -> AsyncIterator[Decider]:
    """Everything a :class:`Decider` talks to, opened from the settings and closed on exit: one admin
    session, one bookie session, the offload targets' S3 clients, the metadata stores' clients.

    Refused (:class:`~worker.broker.preflight.StartupRefused`, naming the key) when BookKeeper's store has no
    usable ledgers root or a reachable bookie endpoint is not one of its bookies, and, with
    ``prove_pulsar_store`` (the topology must exist by then; the daemon proves it after making it),
    when Pulsar's store does not hold the pending topic's managed ledger (or that of the topic given: the
    replay reads the DLQ, which must exist) or BookKeeper's store does not hold the current ledger Pulsar's
    lists for it."""
    s = settings
    m = metrics or Metrics()
    if not s.zookeeper.metadata_store_url:
        raise ValueError("zookeeper.metadata_store_url: the worker needs the metadata store (it proves topics gone)")
    async with contextlib.AsyncExitStack() as stack:
        admin = await stack.enter_async_context(open_admin(s.pulsar))
        zk = Stores.from_settings(s.zookeeper)
        await zk.start()
        stack.push_async_callback(zk.close)
        # Fail at start, not on the first message, when a store is not where the config says.
        await check_bookkeeper_store(zk.bookkeeper)
        if prove_pulsar_store is not False:
            pending = TopicName.parse(s.topics.pending)
            anchor = prove_pulsar_store if isinstance(prove_pulsar_store, TopicName) else None
            await check_pulsar_store(zk.pulsar, anchor or pending)
            # BookKeeper's store anchored to Pulsar's (the daemon does it itself once it consumes the pending
            # topic, which then surely has a current ledger).
            await prove_bookkeeper_store(
                zk.pulsar, zk.bookkeeper, pending_anchors(pending, *([anchor] if anchor else [])), any_topic=True
            )
        ledgers: LedgerStore
        storage_proven: Callable[[], bool] = _proven  # the ZooKeeper route: the anchored store itself
        if s.bookkeeper.delete_via == "zookeeper":
            ledgers, ledger_stage = zk.bookkeeper, "zookeeper"
        else:
            bk_session = await stack.enter_async_context(new_session(s.bookkeeper.request_timeout_s))
            bookie = BookieClient(
                s.bookkeeper.endpoints,
                bk_session,
                zk.bookkeeper.ledger_metadata_exists,
                down_s=s.bookkeeper.bookie_down_s,
                on_request=lambda url, op, outcome: m.bookie_http_requests.labels(url, op, outcome).inc(),
                registered_bookies=zk.bookkeeper.registered_bookies,
            )
            await check_bookies(bookie, zk.bookkeeper)
            ledgers, ledger_stage = BookieLedgerStore(bookie), "bookkeeper"
            storage_proven = bookie.any_verified
        backend = "zookeeper" if ledger_stage == "zookeeper" else "bookie"
        ledgers = CountedLedgerStore(ledgers, lambda op, outcome: m.storage_requests.labels(backend, op, outcome).inc())
        tiered = await stack.enter_async_context(TieredStorage(s.offload, m))
        snapshots = snapshot_cache(
            admin,
            s.worker,
            zk,
            on_request=lambda ep, outcome: m.admin_requests.labels(endpoint=ep, outcome=outcome).inc(),
            on_bump=lambda topic, why: m.epoch_bumps.inc(),
            not_found_ttl_s=min(s.worker.snapshot_ttl_s, NOT_FOUND_TTL_S),
        )
        yield Decider(
            admin=admin,
            snapshots=snapshots,
            copies=copies(ledgers, ledger_stage, tiered),
            pulsar=zk.pulsar,
            bookkeeper=zk.bookkeeper,
            limiter=TokenBucket(s.worker.deletes_per_second, s.worker.delete_burst),
            settings=s.worker,
            metrics=m,
            dry_run=dry_run,
            storage_proven=storage_proven,
            recovery=LedgerRecovery(zk.bookkeeper, timeout_s=s.bookkeeper.request_timeout_s)
            if s.bookkeeper.recover_open_ledgers
            else None,
        )
