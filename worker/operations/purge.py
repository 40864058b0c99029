"""``purge-topic``: delete a whole topic the two-phase way (docs/cli.md, "Operator commands").

Stock Pulsar deletes a topic's metadata and then its ledgers; a failure in between orphans them. Here every
ledger the topic owns (managed-ledger, cursor, compacted, delayed-delivery bucket, schema ledgers and
offloaded copies with their ``OffloadContext``) is first queued as a pending deletion, and only then is the
topic deleted. Live state comes from ``worker.broker.live_state_reader`` (never loaded to learn what it owns;
without a metadata store the owner is asked, as the purge deletes it anyway). Resumable without a state
file: sends are idempotent downstream, and once the topic is gone everything was queued before the delete.
"""

from __future__ import annotations

import asyncio
import uuid as uuid_mod
from collections import Counter as Tally
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from worker.broker.admin import NotOwner, PulsarAdmin
from worker.broker.snapshot_cache import live_state_reader
from worker.core.bucket_in_use import bucket_ledgers, subscription_of
from worker.core.gone_proof import confirm_gone
from worker.core.live_set import LiveSet
from worker.core.metadata_stores import MetadataStores, UnreadableManagedLedger
from worker.core.offload_driver_metadata import driver_metadata
from worker.formats.managed_ledger_metadata import ManagedLedgerInfo
from worker.formats.message import LedgerComponent, LedgerType, OffloadContext, PendingDeleteLedgerInfo
from worker.formats.topic_name import TopicName
from worker.operations.phase1 import PendingDeleteSender, SendFailed
from worker.settings import OffloadSettings, Settings, WorkerSettings


class PurgeError(Exception):
    """The purge cannot proceed safely (nothing was deleted)."""


@dataclass
class PurgePlan:
    topic: TopicName
    partitions: int
    infos: list[PendingDeleteLedgerInfo] = field(default_factory=list)

    def add(self, info: PendingDeleteLedgerInfo) -> None:
        if all(i.dedupe_key != info.dedupe_key for i in self.infos):
            self.infos.append(info)

    def counts(self) -> dict[str, int]:
        c = Tally(_kind(i) for i in self.infos)
        return {k: c.get(k, 0) for k in ("data", "cursor", "schema", "compacted", "bucket", "offloaded")}


def _kind(info: PendingDeleteLedgerInfo) -> str:
    if info.ledger_type is LedgerType.OFFLOAD_LEDGER:
        return "offloaded"
    return {
        LedgerComponent.MANAGED_LEDGER: "data",
        LedgerComponent.MANAGED_CURSOR: "cursor",
        LedgerComponent.SCHEMA_STORAGE: "schema",
        LedgerComponent.COMPACTED_LEDGER: "compacted",
        LedgerComponent.DELAYED_INDEX_BUCKET: "bucket",
    }[info.ledger_component]


@dataclass(frozen=True, slots=True)
class PurgeResult:
    topic: str
    existed: bool
    queued: int
    counts: dict[str, int]
    failed: int
    deleted: bool

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["topic_deleted"] = d.pop("deleted")  # the last field, so the key order stays
        return d


def _offload_from_settings(offload: OffloadSettings) -> tuple[str, dict[str, str]] | None:
    """The only configured offload target, as the jcloud offloader records it in driver metadata."""
    if len(offload.s3_targets) != 1:
        return None
    t = offload.s3_targets[0]
    return t.driver, driver_metadata(t)


class Collector:
    """Everything a topic owns, read from its owner broker (and ZooKeeper when configured)."""

    def __init__(
        self,
        admin: PulsarAdmin,
        zk: MetadataStores | None,
        offload: OffloadSettings,
        *,
        worker: WorkerSettings | None = None,
        properties: dict[str, str] | None = None,
    ) -> None:
        self.admin = admin
        self.reader = live_state_reader(admin, worker or WorkerSettings(), zk, may_load=zk is None)
        self.pulsar = zk.pulsar if zk is not None else None
        self.offload = offload
        self.properties = properties or {"source": "purge-topic"}

    async def collect(self, topic: TopicName) -> PurgePlan | None:
        """The plan, or None when the topic does not exist (neither partitioned nor plain)."""
        base = topic.partitioned_base if topic.partition_index is not None else topic
        n = await self.admin.partitions(base) if topic.partition_index is None else 0
        physical = [base.partition(i) for i in range(n)] if n > 0 else [topic]
        plan = PurgePlan(topic, n)
        found_any = n > 0
        for pt in physical:
            got = await self._fetch(pt)
            if got is None:
                continue  # a partition never created owns no ledger
            found_any = True
            await self._collect_physical(plan, pt, got)
        if not found_any:
            return None
        if topic.partition_index is None:
            # Schemas are per base topic; a single partition's purge leaves the shared schema alone.
            await self._collect_schema(plan, base, physical)
        return plan

    async def _fetch(self, topic: TopicName) -> LiveSet | None:
        got = await self.reader.fetch(topic)
        if got is None:
            # Not found by the admin API: believed only with the metadata store's agreement (the same
            # rule as the worker's direct route); a managed ledger without a loadable topic is an error.
            await confirm_gone(topic, self.pulsar)
        return got

    def _info(self, topic: TopicName, component: LedgerComponent, lid: int, **kw: Any) -> PendingDeleteLedgerInfo:
        return PendingDeleteLedgerInfo(
            topic_name=str(topic),
            ledger_component=component,
            ledger_type=kw.pop("ledger_type", LedgerType.LEDGER),
            ledger_id=lid,
            properties=dict(self.properties),
            **kw,
        )

    async def _ml_info(self, topic: TopicName) -> ManagedLedgerInfo | None:
        if self.pulsar is None:
            return None
        try:
            return await self.pulsar.read_managed_ledger(topic)
        except UnreadableManagedLedger as e:
            raise PurgeError(f"managed-ledger metadata of {topic} is unreadable: {e.__cause__ or e}") from e

    async def _collect_physical(self, plan: PurgePlan, pt: TopicName, live: LiveSet) -> None:
        ml = await self._ml_info(pt)
        offloads: dict[int, OffloadContext] = {}
        bk_deleted: set[int] = set()
        if ml is not None:
            for ld in ml.ledgers:
                o = ld.offload
                if o is None or o.uuid is None:
                    continue
                if not o.driver_name:
                    raise PurgeError(f"offloaded ledger {ld.ledger_id} of {pt} has no driver metadata")
                offloads[ld.ledger_id] = OffloadContext.from_uuid(o.uuid, o.driver_name, dict(o.driver_metadata))
                if o.complete and o.bookkeeper_deleted:
                    bk_deleted.add(ld.ledger_id)
        elif not live.stored:
            offloads = await self._offloads_from_internal_info(pt, live.owner_url)

        # The worker's live set (worker.core.live_set): the compacted ledger included when only the
        # __compaction cursor names it.
        ledger_ids = sorted(live.ml_ledgers)
        if ml is not None:
            # The stored list and the owner's view agree except for a ledger being added right now.
            ledger_ids = sorted(set(ledger_ids) | set(ml.ledger_ids))
        for lid in ledger_ids:
            if lid not in bk_deleted:
                plan.add(self._info(pt, LedgerComponent.MANAGED_LEDGER, lid))
        for lid, ctx in sorted(offloads.items()):
            plan.add(
                self._info(
                    pt, LedgerComponent.MANAGED_LEDGER, lid, ledger_type=LedgerType.OFFLOAD_LEDGER, offload_context=ctx
                )
            )
        for name, lid in sorted(live.cursor_ledgers.items()):
            plan.add(self._info(pt, LedgerComponent.MANAGED_CURSOR, lid, cursor_name=name))
        for lid in sorted(live.compacted_ledgers):
            plan.add(self._info(pt, LedgerComponent.COMPACTED_LEDGER, lid))
        if self.pulsar is not None:
            # Delayed-delivery buckets: only the cursors' znodes name them (worker.core.bucket_in_use). Pulsar
            # deletes them with the topic only while the bucket tracker is on for it.
            for cursor in sorted(live.cursor_names):
                sub = subscription_of(cursor)
                for lid in sorted(bucket_ledgers(await self.pulsar.cursor_properties(pt, cursor) or {})):
                    plan.add(self._info(pt, LedgerComponent.DELAYED_INDEX_BUCKET, lid, cursor_name=sub))

    async def _offloads_from_internal_info(self, pt: TopicName, owner: str) -> dict[int, OffloadContext]:
        raw = await self.admin.offload_uuids(pt, base=owner)
        if not raw:
            return {}
        driver = _offload_from_settings(self.offload)
        if driver is None:
            raise PurgeError(
                f"{pt} has offloaded ledgers but their driver metadata is only in ZooKeeper: configure"
                " zookeeper.metadata_store_url, or exactly one offload target"
            )
        out = {}
        for lid, u in raw.items():
            try:
                out[lid] = OffloadContext.from_uuid(uuid_mod.UUID(u), driver[0], driver[1])
            except ValueError as e:
                raise PurgeError(f"bad offload uuid {u!r} for ledger {lid} of {pt}") from e
        return out

    async def _collect_schema(self, plan: PurgePlan, base: TopicName, physical: Sequence[TopicName]) -> None:
        # The registry's key and the ledgers' pulsar/schemaId: the local name URL-encoded.
        schema_id = base.schema_name
        ids: set[int] = set()
        if self.pulsar is not None:
            ids |= await self.pulsar.schema_ledgers(schema_id) or frozenset()
        for pt in physical:
            got = await self._fetch(pt)
            if got is not None:
                ids |= got.schema_ledgers
        for lid in sorted(ids):
            plan.add(self._info(base, LedgerComponent.SCHEMA_STORAGE, lid, schema_id=schema_id))


async def purge_topic(
    settings: Settings,
    topic: TopicName,
    admin: PulsarAdmin,
    *,
    delete_topic: bool = True,
    zk: MetadataStores | None = None,
    sender: PendingDeleteSender | None = None,
    say: Callable[[str], None] = print,
    concurrency: int = 16,
) -> PurgeResult:
    t = settings.topics
    own = {TopicName.parse(x).partitioned_base for x in (t.pending, t.retry, t.dlq)}
    if topic.partitioned_base in own:
        raise PurgeError(f"{topic} is one of the worker's own topics; purging it would drop queued deletions")

    collector = Collector(admin, zk, settings.offload, worker=settings.worker)
    say(f"collecting the ledgers of {topic}")
    plan = await collector.collect(topic)
    if plan is None:
        say(f"{topic} does not exist: nothing to collect (a completed purge queued everything before the delete)")
        return PurgeResult(str(topic), False, 0, {}, 0, False)
    _say_plan(say, plan)

    own_sender = sender is None
    snd = sender or PendingDeleteSender(settings, admin=admin, source="purge-topic")
    try:
        await snd.start()
        failed = await _send_all(snd, plan.infos, say, concurrency)
        if failed:
            say(f"{len(failed)} sends failed; the topic is NOT deleted. Re-run to finish (re-sending is harmless).")
            return PurgeResult(str(topic), True, len(plan.infos) - len(failed), plan.counts(), len(failed), False)
        if not delete_topic:
            say(f"queued {len(plan.infos)} pending deletions; topic left in place (--no-delete-topic)")
            return PurgeResult(str(topic), True, len(plan.infos), plan.counts(), 0, False)
        # A producer may have rolled a new ledger since the collection: queue those too, then delete.
        again = await collector.collect(topic)
        if again is not None:
            sent = {i.dedupe_key for i in plan.infos}
            extra = [i for i in again.infos if i.dedupe_key not in sent]
            if extra:
                say(f"{len(extra)} ledgers appeared meanwhile; queueing them too")
                failed = await _send_all(snd, extra, say, concurrency)
                if failed:
                    say(f"{len(failed)} sends failed; the topic is NOT deleted. Re-run to finish.")
                    return PurgeResult(str(topic), True, len(plan.infos), plan.counts(), len(failed), False)
                for i in extra:
                    plan.add(i)
    finally:
        if own_sender:
            await snd.close()

    say(f"deleting {topic} through the admin API (force)")
    if plan.partitions > 0 and topic.partition_index is None:
        await admin.delete_partitioned_topic(topic, force=True)
    else:
        try:
            existed = await admin.delete_topic(topic, force=True)
        except NotOwner:
            # Only the owner deletes a topic; PulsarAdmin never follows a redirect by itself.
            owner = await admin.lookup(topic)
            existed = await admin.at(owner).delete_topic(topic, force=True)
        if not existed:
            # Someone deleted it since the collection: its ledgers were all queued above anyway.
            say(f"{topic} was already gone when deleting it")
    if await collector.collect(topic) is not None:
        raise PurgeError(f"{topic} still exists after the delete; re-run purge-topic")
    say(f"purged {topic}: {len(plan.infos)} pending deletions queued ({_fmt_counts(plan.counts())}), topic deleted")
    return PurgeResult(str(topic), True, len(plan.infos), plan.counts(), 0, True)


def _fmt_counts(c: dict[str, int]) -> str:
    return ", ".join(f"{k} {v}" for k, v in c.items())


def _say_plan(say: Callable[[str], None], plan: PurgePlan) -> None:
    kind = f"partitioned ({plan.partitions} partitions)" if plan.partitions else "non-partitioned"
    say(f"{plan.topic}: {kind}, {len(plan.infos)} ledgers to queue ({_fmt_counts(plan.counts())})")


async def _send_all(
    sender: PendingDeleteSender, infos: Sequence[PendingDeleteLedgerInfo], say: Callable[[str], None], concurrency: int
) -> list[SendFailed]:
    sem = asyncio.Semaphore(concurrency)
    failed: list[SendFailed] = []
    done = 0

    async def one(info: PendingDeleteLedgerInfo) -> None:
        nonlocal done
        async with sem:
            try:
                await sender.send_pending_delete(info)
            except SendFailed as e:
                failed.append(e)
                say(f"  send failed: {info.ledger_type.value} {info.ledger_id}: {e.cause}")
            done += 1
            if done % 100 == 0 or done == len(infos):
                say(f"  sent {done - len(failed)}/{len(infos)}")

    await asyncio.gather(*(one(i) for i in infos))
    return failed
