"""The orphan scanner: BookKeeper ledgers that Pulsar created and nothing references any more.

An orphan is what PIP-186 prevents for new deletions and what stock Pulsar already left behind: a ledger
whose id left its topic's metadata (or whose topic was deleted) but whose delete from BookKeeper failed.
The scanner is an anti-join: every ledger BookKeeper has, minus every ledger some topic still references.

Being wrong one way costs disk; being wrong the other way loses data. So every doubt is a skip:
- only ``application=pulsar`` ledgers with a known component and a parseable owner are considered
  (``worker.core.ledger_owner``: the very parse the worker verifies a message against);
- a ledger younger than the minimum age may be one whose id is not yet in its topic's metadata
  (``worker.core.ledger_age``, the worker's rule);
- the live set comes from the broker that has the topic loaded, else from Pulsar's metadata store (never by
  loading the topic: ``worker.broker.live_state_reader``), fetched after the ledger listing, so a ledger
  older than the minimum age is either in it or no longer referenced;
- "the topic is gone" is believed only when the metadata store agrees: the managed ledger's znode is
  absent too (a managed ledger can exist without a loadable topic, e.g. a transaction log);
- a delayed-delivery bucket ledger of a live topic is in use while its cursor's properties name it, and
  is skipped while its subscription is live (``worker.core.bucket_in_use``, the worker's rule);
- a schema ledger is in use while the schema registry's locator (``/schemas/<schemaId>``) references it,
  whether its topic exists or not (``worker.core.schema_in_use``, the worker's rule): the registry
  outlives topics;
- an open ledger of a live topic may still be written, unless it is a data or cursor ledger that neither
  its topic's owner nor its stored record names, older than the minimum age: the worker recovers and deletes
  such a ledger, so it is an orphan of its kind (``worker.core.open_ledger``, the worker's rule);
- an error while reading live state skips that topic's ledgers for this run.

Memory is bounded: the listing is read one chunk at a time (a subtree of the ledgers root), candidates are
grouped by topic in bounded memory (``worker.operations.topic_groups``), each topic's live state is read
once, and only orphans and skips are kept in the report unless every decision is asked for.
"""

from __future__ import annotations

import asyncio
import enum
import time
import uuid
from collections import Counter as Tally
from collections.abc import AsyncIterator, Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from worker.broker.snapshot_cache import LiveSet, SnapshotCache
from worker.core.bucket_in_use import CursorRecord, bucket_hold, cursor_znode_name
from worker.core.gone_proof import GoneUnconfirmed, ManagedLedgerRecords
from worker.core.ledger_age import ledger_age
from worker.core.ledger_owner import Owner, Unmapped, owner_of
from worker.core.live_set import TopicGone, ledger_hold
from worker.core.open_ledger import RECOVERABLE, may_be_written, open_kind, recovery_hold, znode_name
from worker.core.schema_in_use import schema_ledger_hold
from worker.formats.ledger_metadata import LedgerMetadata
from worker.formats.message import LedgerComponent, LedgerType, PendingDeleteLedgerInfo
from worker.formats.topic_name import TopicName
from worker.operations.topic_groups import Row, TopicGroups


class Verdict(enum.StrEnum):
    ORPHAN = "orphan"
    IN_USE = "in_use"
    TOO_YOUNG = "too_young"
    NOT_PULSAR = "not_pulsar"
    SKIPPED = "skipped"


@dataclass(frozen=True, slots=True)
class Decision:
    ledger_id: int
    verdict: Verdict
    why: str
    component: str | None = None
    topic: str | None = None
    cursor: str | None = None
    schema_id: str | None = None
    age_s: float | None = None
    size: int = 0
    state: str = ""

    def to_info(self, properties: dict[str, str] | None = None) -> PendingDeleteLedgerInfo:
        if self.verdict is not Verdict.ORPHAN or self.component is None or self.topic is None:
            raise ValueError(f"ledger {self.ledger_id} is not an orphan ({self.verdict}): nothing to send")
        return PendingDeleteLedgerInfo(
            topic_name=self.topic,
            ledger_component=LedgerComponent(self.component),
            ledger_type=LedgerType.LEDGER,
            ledger_id=self.ledger_id,
            cursor_name=self.cursor,
            schema_id=self.schema_id,
            properties=properties or {},
        )

    def to_dict(self) -> dict[str, Any]:
        # By hand: dataclasses.asdict deep-copies every field, a measurable share of a large scan.
        return {
            "ledger_id": self.ledger_id,
            "verdict": self.verdict.value,
            "why": self.why,
            "component": self.component,
            "topic": self.topic,
            "cursor": self.cursor,
            "schema_id": self.schema_id,
            "age_s": self.age_s,
            "size": self.size,
            "state": self.state,
        }


@dataclass
class ScanReport:
    scan_id: str
    started_at: float
    min_age_s: float
    namespaces: tuple[str, ...]
    listed: int = 0
    filtered: int = 0
    finished_at: float | None = None
    # Every decision when ``keep_all``; otherwise the orphans and the skips only (an operator acts on both),
    # the others counted in ``tally``.
    decisions: list[Decision] = field(default_factory=list)
    keep_all: bool = True
    tally: Tally[str] = field(default_factory=Tally)

    def add(self, d: Decision) -> None:
        self.tally[d.verdict.value] += 1
        if self.keep_all or d.verdict in (Verdict.ORPHAN, Verdict.SKIPPED):
            self.decisions.append(d)

    @property
    def orphans(self) -> list[Decision]:
        return [d for d in self.decisions if d.verdict is Verdict.ORPHAN]

    def counts(self) -> dict[str, int]:
        return {v.value: self.tally.get(v.value, 0) for v in Verdict}

    def to_dict(self, *, full: bool = False) -> dict[str, Any]:
        """Orphans and skips in full (an operator acts on both); the rest as counts unless ``full``."""
        shown = (
            self.decisions if full else [d for d in self.decisions if d.verdict in (Verdict.ORPHAN, Verdict.SKIPPED)]
        )
        return {
            "scan_id": self.scan_id,
            "started_at": self.started_at,
            "finished_at": self.finished_at,
            "min_age_s": self.min_age_s,
            "namespaces": list(self.namespaces),
            "listed": self.listed,
            "filtered_out": self.filtered,
            "counts": self.counts(),
            "orphans": [d.to_dict() for d in self.orphans],
            "decisions": [d.to_dict() for d in shown if d.verdict is not Verdict.ORPHAN],
        }


# ---- the metadata store: is a managed ledger / schema really gone? ------------------------------------


class MetadataStoreView(ManagedLedgerRecords, Protocol):
    """What the scanner asks Pulsar's metadata store (``worker.core.metadata_stores.PulsarMetadataStore``)."""

    async def schema_ledgers(self, schema_id: str) -> frozenset[int] | None:
        """Ledger ids the schema registry's locator references; None when there is no locator."""
        ...

    async def cursor_properties(self, topic: TopicName, cursor: str) -> Mapping[str, str] | None:
        """A cursor's stored properties (``cursor``: its znode name); None when it has no znode."""
        ...

    async def records_ledger(self, topic: TopicName, ledger_id: int, cursor: str | None = None) -> bool:
        """Whether the topic's stored record names the ledger (its cursor's, or its managed ledger's list)."""
        ...


# ---- the scan ---------------------------------------------------------------------------------------


class LedgerListing(Protocol):
    """Where the scan gets BookKeeper's ledgers one by one: the bookie HTTP API (``BookieClient``), or ledger
    metadata already read (``worker.backends.ledger_listing.MetadataListing``: the Spark audit's partition)."""

    async def list_ledger_ids(self) -> list[int]: ...

    async def get_metadata(self, ledger_id: int) -> LedgerMetadata | None: ...


@runtime_checkable
class LedgerChunks(Protocol):
    """Where the scan gets BookKeeper's ledgers a chunk at a time, each chunk read at one time: the walk of
    the metadata store (``worker.backends.ledger_listing.LedgerWalk``)."""

    def chunks(self) -> AsyncIterator[Sequence[LedgerMetadata]]: ...


@dataclass
class _Candidate:
    md: LedgerMetadata
    owner: Owner
    age_s: float

    def row(self) -> Row:
        o, md = self.owner, self.md
        return [md.ledger_id, md.ctime_ms, md.length, md.state, o.component.value, o.cursor, o.schema_id, self.age_s]

    @classmethod
    def of_row(cls, topic: TopicName, row: Row) -> _Candidate:
        lid, ctime, length, state, component, cursor, schema_id, age_s = row
        md = LedgerMetadata(lid, {}, ctime, length, state)
        return cls(md, Owner(LedgerComponent(component), topic, cursor, schema_id), age_s)


# Ledgers whose metadata is read at once when the listing gives ids (the bookie HTTP API).
ID_CHUNK = 10_000
# Topics whose live state is read at once: their metadata-store reads go out together in multiReads, so more
# topics in flight mean fewer, fuller requests (docs/benchmarks.md, scanning at scale).
TOPIC_CONCURRENCY = 64
# How long a namespace's topic list (the admin API's half of a "gone" proof) is reused within a scan: a topic
# listed then and missing from the metadata store now is a skip, not an orphan, so a stale list costs no safety.
LISTING_TTL_S = 60.0


class Scanner:
    def __init__(
        self,
        bookie: LedgerListing | LedgerChunks,
        snapshots: SnapshotCache,
        metadata_store: MetadataStoreView | None,
        *,
        min_age_s: float,
        namespaces: Sequence[str] = (),
        concurrency: int = 16,
        clock: Callable[[], float] = time.time,
        progress: Callable[[str, int, int], None] | None = None,
        on_decision: Callable[[Decision], None] | None = None,
        keep_all: bool = True,
        groups: TopicGroups | None = None,
        topic_concurrency: int = TOPIC_CONCURRENCY,
    ) -> None:
        if concurrency < 1:
            raise ValueError("concurrency must be >= 1")
        self.bookie = bookie
        self.snapshots = snapshots
        self.store = metadata_store
        self.min_age_s = min_age_s
        self.namespaces = tuple(namespaces)
        self.concurrency = concurrency
        self.clock = clock
        self.progress = progress or (lambda phase, done, total: None)
        self.on_decision = on_decision or (lambda d: None)
        self.keep_all = keep_all
        self.groups = groups
        self.topic_concurrency = topic_concurrency

    async def scan(self) -> ScanReport:
        report = ScanReport(
            uuid.uuid4().hex[:12], self.clock(), self.min_age_s, self.namespaces, keep_all=self.keep_all
        )
        groups = self.groups or TopicGroups()
        try:
            async for chunk in self._chunks(report):
                # Ages are taken against one instant after the chunk was read, and the live sets are read
                # after the whole listing: a ledger old enough here was created before any of them.
                self._classify(report, chunk, self.clock() * 1000, groups)
            await self._judge_topics(report, groups)
        finally:
            groups.close()
        report.decisions.sort(key=lambda d: d.ledger_id)
        report.finished_at = self.clock()
        return report

    async def _chunks(self, report: ScanReport) -> AsyncIterator[Sequence[LedgerMetadata]]:
        if isinstance(self.bookie, LedgerChunks):
            async for chunk in self.bookie.chunks():
                report.listed += len(chunk)
                self.progress("metadata", report.listed, 0)
                yield chunk
            self.progress("metadata", report.listed, report.listed)
            return
        ids = await self.bookie.list_ledger_ids()
        report.listed = len(ids)
        for start in range(0, len(ids), ID_CHUNK):
            yield await self._read_metadata(ids[start : start + ID_CHUNK], start, len(ids))
        self.progress("metadata", len(ids), len(ids))

    def _classify(
        self, report: ScanReport, chunk: Sequence[LedgerMetadata], now_ms: float, groups: TopicGroups
    ) -> None:
        for md in chunk:
            try:
                owner = owner_of(md.custom_metadata)
            except Unmapped as e:
                if not self.namespaces:
                    self._decide(
                        report, Decision(md.ledger_id, Verdict.SKIPPED, str(e), size=md.length, state=md.state)
                    )
                else:
                    report.filtered += 1
                continue
            if owner is None:
                if self.namespaces:
                    report.filtered += 1
                else:
                    self._decide(
                        report,
                        Decision(
                            md.ledger_id, Verdict.NOT_PULSAR, "no application=pulsar", size=md.length, state=md.state
                        ),
                    )
                continue
            if self.namespaces and owner.topic.namespace_name not in self.namespaces:
                report.filtered += 1
                continue
            age = ledger_age(md.ctime_ms, now_ms=now_ms, min_age_ms=self.min_age_s * 1000)
            if age.age_ms is None:
                self._decide(report, self._decision(md, owner, Verdict.SKIPPED, "no creation time: age unknown", None))
                continue
            age_s = age.age_ms / 1000
            if not age.old_enough:
                self._decide(
                    report, self._decision(md, owner, Verdict.TOO_YOUNG, f"younger than {self.min_age_s:g}s", age_s)
                )
                continue
            groups.add(str(owner.topic), _Candidate(md, owner, age_s).row())

    async def _read_metadata(self, ids: Sequence[int], done_before: int, total: int) -> list[LedgerMetadata]:
        out: list[LedgerMetadata] = []
        it = iter(ids)
        done = done_before

        async def worker() -> None:
            nonlocal done
            for lid in it:  # one shared iterator: each id is read by exactly one worker
                md = await self.bookie.get_metadata(lid)  # type: ignore[union-attr]
                if md is not None:  # deleted since the listing: nothing to judge
                    out.append(md)
                done += 1
                self.progress("metadata", done, total)

        await asyncio.gather(*(worker() for _ in range(min(self.concurrency, max(1, len(ids))))))
        return out

    async def _judge_topics(self, report: ScanReport, groups: TopicGroups) -> None:
        it: Iterator[tuple[str, list[Row]]] = iter(groups)
        done = 0

        async def worker() -> None:
            nonlocal done
            for key, rows in it:  # one shared iterator: each topic is judged by exactly one worker
                topic = TopicName.parse(key)
                for d in await self._judge_topic(topic, [_Candidate.of_row(topic, r) for r in rows]):
                    self._decide(report, d)
                done += len(rows)
                self.progress("ledgers", done, groups.rows)

        await asyncio.gather(*(worker() for _ in range(self.topic_concurrency)))
        self.progress("ledgers", groups.rows, groups.rows)

    async def _judge_topic(self, topic: TopicName, cands: list[_Candidate]) -> list[Decision]:
        snap: LiveSet | TopicGone
        try:
            # "Gone" is the snapshot cache's one rule (worker.broker.snapshot_cache.confirm_gone): the admin API said
            # not found and the metadata store has no managed ledger; anything less raises.
            snap = await self.snapshots.get(topic, fresh=True)
        except GoneUnconfirmed as e:
            return [self._decision(c.md, c.owner, Verdict.SKIPPED, str(e), c.age_s) for c in cands]
        except Exception as e:  # any doubt about live state is a skip, never an orphan
            why = f"live state unavailable: {type(e).__name__}: {e}"
            return [self._decision(c.md, c.owner, Verdict.SKIPPED, why, c.age_s) for c in cands]
        out = []
        for c in cands:
            try:
                verdict, why = await self._judge(c, snap)
            except Exception as e:
                verdict, why = Verdict.SKIPPED, f"metadata store unavailable: {type(e).__name__}: {e}"
            if verdict is Verdict.ORPHAN and may_be_written(c.md.state, topic_exists=isinstance(snap, LiveSet)):
                try:
                    verdict, why = await self._judge_open(c)
                except Exception as e:
                    verdict, why = Verdict.SKIPPED, f"metadata store unavailable: {type(e).__name__}: {e}"
            out.append(self._decision(c.md, c.owner, verdict, why, c.age_s))
        return out

    async def _judge(self, c: _Candidate, snap: LiveSet | TopicGone) -> tuple[Verdict, str]:
        lid = c.md.ledger_id
        owner = c.owner
        if owner.component is LedgerComponent.SCHEMA_STORAGE:
            return await self._judge_schema(c, snap)
        if owner.component is LedgerComponent.DELAYED_INDEX_BUCKET and isinstance(snap, LiveSet):
            return await self._judge_bucket(c, snap)
        if isinstance(snap, LiveSet):
            # The worker's rule (worker.core.live_set): what it would keep is never queued; what it keeps
            # without proof of use (a compacted ledger its compacting topic does not name) is a skip.
            hold = ledger_hold(snap, owner.component, lid)
            if hold is not None:
                return (Verdict.IN_USE if hold.proven else Verdict.SKIPPED), hold.value
            what = {
                LedgerComponent.MANAGED_LEDGER: "not in its topic's ledger list",
                LedgerComponent.MANAGED_CURSOR: f"not the ledger of cursor {owner.cursor!r}",
                LedgerComponent.COMPACTED_LEDGER: "not its topic's compacted ledger",
            }[owner.component]
            return Verdict.ORPHAN, what
        return Verdict.ORPHAN, "topic gone"

    async def _judge_open(self, c: _Candidate) -> tuple[Verdict, str]:
        """An open ledger its live topic does not name: the worker's rule (``worker.core.open_ledger``). One
        the worker would recover and delete is an orphan of its kind; any other is skipped, saying what it is."""
        component, lid, state = c.owner.component, c.md.ledger_id, c.md.state
        recorded = None
        cursor = c.owner.cursor if component is LedgerComponent.MANAGED_CURSOR else None
        if component in RECOVERABLE and self.store is not None and (cursor is None or znode_name(cursor)):
            # After the live state (fetched by the caller), as the worker reads it.
            recorded = await self.store.records_ledger(c.owner.topic, lid, cursor)
        kept = recovery_hold(
            component,
            named=False,
            recorded=recorded,
            ctime_ms=c.md.ctime_ms,
            now_ms=self.clock() * 1000,
            min_age_ms=self.min_age_s * 1000,
        )
        if kept is None:
            return Verdict.ORPHAN, f"{open_kind(component)} nothing names (state {state}): recovered, then deleted"
        return (Verdict.TOO_YOUNG if kept.too_young else Verdict.SKIPPED), f"{kept.reason} (state {state})"

    async def _judge_bucket(self, c: _Candidate, snap: LiveSet) -> tuple[Verdict, str]:
        """A delayed-delivery bucket ledger of a live topic: the worker's rule (``worker.core.bucket_in_use``);
        what it keeps without proof of use (its subscription is live) is a skip."""
        lid = c.md.ledger_id
        hold = ledger_hold(snap, c.owner.component, lid)
        if hold is not None:
            return (Verdict.IN_USE if hold.proven else Verdict.SKIPPED), hold.value
        if self.store is None:
            return Verdict.SKIPPED, "no metadata store to read its cursor's properties"
        subscription = c.owner.cursor or ""
        cursor = cursor_znode_name(subscription)
        if cursor in ("", ".", ".."):
            return Verdict.SKIPPED, f"no cursor can be named {subscription!r}"
        # After the live state (fetched by the caller): see worker.daemon.decider.
        record = CursorRecord(await self.store.cursor_properties(snap.topic, cursor))
        held = bucket_hold(lid, record, subscription_live=cursor in snap.cursor_names)
        if held is not None:
            return (Verdict.IN_USE if held.proven else Verdict.SKIPPED), held.value
        return Verdict.ORPHAN, f"not named by cursor {subscription!r}, which its topic no longer has"

    async def _judge_schema(self, c: _Candidate, snap: LiveSet | TopicGone) -> tuple[Verdict, str]:
        lid = c.md.ledger_id
        assert c.owner.schema_id is not None
        live = snap.schema_ledgers if isinstance(snap, LiveSet) else frozenset()
        registry = None
        if lid not in live:
            if self.store is None:
                # The registry's locator is the proof the worker asks for too: without it, no verdict.
                return Verdict.SKIPPED, "no metadata store to read the schema registry"
            registry = await self.store.schema_ledgers(c.owner.schema_id)
        held = schema_ledger_hold(lid, registry=registry, live=live)
        if held is not None:
            return Verdict.IN_USE, held
        if isinstance(snap, LiveSet):
            return Verdict.ORPHAN, "not in its topic's schema ledger list"
        if registry is None:
            return Verdict.ORPHAN, "schemaId topic gone, no schema registry entry"
        return Verdict.ORPHAN, "schemaId topic gone, not in the schema registry entry"

    @staticmethod
    def _decision(md: LedgerMetadata, owner: Owner, verdict: Verdict, why: str, age_s: float | None) -> Decision:
        return Decision(
            ledger_id=md.ledger_id,
            verdict=verdict,
            why=why,
            component=owner.component.value,
            topic=str(owner.topic),
            cursor=owner.cursor,
            schema_id=owner.schema_id,
            age_s=None if age_s is None else round(age_s, 3),
            size=md.length,
            state=md.state,
        )

    def _decide(self, report: ScanReport, d: Decision) -> None:
        report.add(d)
        self.on_decision(d)
