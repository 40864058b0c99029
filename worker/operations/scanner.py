"""The orphan scanner: BookKeeper ledgers that Pulsar created and nothing references any more.

An orphan is what PIP-186 prevents for new deletions and what stock Pulsar already left behind: a ledger
whose id left its topic's metadata (or whose topic was deleted) but whose delete from BookKeeper failed.
The scanner is an anti-join: every ledger BookKeeper has, minus every ledger some topic still references.

Being wrong one way costs disk; being wrong the other way loses data. So every doubt is a skip:
- only ``application=pulsar`` ledgers with a known component and a parseable owner are considered
  (``worker.core.ledger_owner``: the very parse the worker verifies a message against);
- each is judged by the worker's own decision (``worker.core.decision.decide``) on the message ``scan`` would
  queue for it, and :func:`reported` maps the result to the scan's words: what the worker would delete (or
  recover, then delete) is an orphan; what it keeps on a doubt (``Result.unproven``), or whose facts could
  not be read (by the worker's gatherer, ``worker.broker.gatherer``), is skipped;
- live sets come from the broker that has the topic loaded, else from Pulsar's metadata store (never by
  loading the topic: ``worker.broker.live_state_reader``), fetched after the ledger listing; ages are taken
  at an instant before that (after the ledger's chunk was read), so a ledger old enough is either in its
  topic's live set or no longer referenced;
- "the topic is gone" is believed only when the metadata store agrees: the managed ledger's znode is
  absent too (a managed ledger can exist without a loadable topic, e.g. a transaction log);
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
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from worker.broker.gatherer import Gatherer, Unread
from worker.broker.snapshot_cache import SnapshotCache
from worker.core.decision import ASK, Ask, Facts, Needed, Outcome, Result, Rules, decide
from worker.core.gone_proof import GoneUnconfirmed
from worker.core.ledger_age import ledger_age
from worker.core.ledger_owner import Owner, Unmapped, owner_of
from worker.core.live_set import Snapshot
from worker.core.metadata_stores import PulsarMetadataStore
from worker.core.stored import StoredLedger
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
        owner = Owner(LedgerComponent(self.component), TopicName.parse(self.topic), self.cursor, self.schema_id)
        return message_for(owner, self.ledger_id, properties)

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


def message_for(owner: Owner, ledger_id: int, properties: dict[str, str] | None = None) -> PendingDeleteLedgerInfo:
    """The message ``scan`` queues for a ledger of ``owner``: the one the scanner decides on, as the worker will."""
    return PendingDeleteLedgerInfo(
        topic_name=str(owner.topic),
        ledger_component=owner.component,
        ledger_type=LedgerType.LEDGER,
        ledger_id=ledger_id,
        cursor_name=owner.cursor,
        schema_id=owner.schema_id,
        properties=properties or {},
    )


def reported(res: Result) -> tuple[Verdict, str]:
    """What the scan reports for the worker's decision on a ledger: the one mapping of :class:`Outcome` to
    the scan's words. Only what the worker would delete is an orphan; what it keeps without proof is a skip."""
    match res.outcome:
        case Outcome.DELETED:
            return Verdict.ORPHAN, res.reason
        case Outcome.RECOVER:
            return Verdict.ORPHAN, f"{res.reason}: recovered, then deleted"
        case Outcome.IN_USE if not res.unproven:
            return Verdict.IN_USE, res.reason
        case Outcome.TOO_YOUNG if not res.unproven:
            return Verdict.TOO_YOUNG, res.reason
    return Verdict.SKIPPED, res.reason or res.outcome.value


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
    now_ms: int  # when its age is taken: right after its chunk was read, before any live state
    age_s: float | None

    def row(self) -> Row:
        md = self.md
        # The custom metadata travels with the row: the decision proves the ledger's identity again.
        return [md.ledger_id, md.custom_metadata, md.ctime_ms, md.length, md.state, self.now_ms, self.age_s]

    @classmethod
    def of_row(cls, row: Row) -> _Candidate:
        lid, custom, ctime, length, state, now_ms, age_s = row
        owner = owner_of(custom)
        assert owner is not None  # it was grouped by this very owner
        return cls(LedgerMetadata(lid, custom, ctime, length, state), owner, now_ms, age_s)

    def asking(self, live: Snapshot | Ask = ASK) -> Facts:
        return Facts.asking(StoredLedger(self.md), live)


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
        metadata_store: PulsarMetadataStore | None,
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
        self.rules = Rules(int(min_age_s * 1000))
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
                verdict, why = Verdict.NOT_PULSAR, "no application=pulsar"
            except Unmapped as e:  # a Pulsar ledger whose owner cannot be read safely: never a candidate
                owner, verdict, why = None, Verdict.SKIPPED, str(e)
            if owner is None:
                if self.namespaces:
                    report.filtered += 1
                else:
                    self._decide(report, Decision(md.ledger_id, verdict, why, size=md.length, state=md.state))
                continue
            if self.namespaces and owner.topic.namespace_name not in self.namespaces:
                report.filtered += 1
                continue
            age_ms = ledger_age(md.ctime_ms, now_ms=now_ms, min_age_ms=0).age_ms
            c = _Candidate(md, owner, int(now_ms), None if age_ms is None else age_ms / 1000)
            try:
                # Decided now when no live state is needed (its identity is not proven).
                res = decide(message_for(owner, md.ledger_id), c.asking(), now_ms=c.now_ms, rules=self.rules)
            except Needed:
                groups.add(str(owner.topic), c.row())
                continue
            self._decide(report, self._decision(c, *reported(res)))

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
                for d in await self._judge_topic(TopicName.parse(key), [_Candidate.of_row(r) for r in rows]):
                    self._decide(report, d)
                done += len(rows)
                self.progress("ledgers", done, groups.rows)

        await asyncio.gather(*(worker() for _ in range(self.topic_concurrency)))
        self.progress("ledgers", groups.rows, groups.rows)

    async def _judge_topic(self, topic: TopicName, cands: list[_Candidate]) -> list[Decision]:
        snap: Snapshot
        try:
            # "Gone" is the snapshot cache's one rule (worker.broker.snapshot_cache.confirm_gone): the admin API said
            # not found and the metadata store has no managed ledger; anything less raises.
            snap = await self.snapshots.get(topic, fresh=True)
        except GoneUnconfirmed as e:
            return [self._decision(c, Verdict.SKIPPED, str(e)) for c in cands]
        except Exception as e:  # any doubt about live state is a skip, never an orphan
            why = f"live state unavailable: {type(e).__name__}: {e}"
            return [self._decision(c, Verdict.SKIPPED, why) for c in cands]
        out, gatherer = [], Gatherer(self.store, one_topic=True)
        for c in cands:
            info = message_for(c.owner, c.md.ledger_id)
            try:
                # Aged at its chunk's instant, before this live state was read: a ledger old enough then and
                # not in it is no longer referenced (the premise of the too-young rule).
                res = await gatherer.decide(info, c.asking(snap), now_ms=c.now_ms, rules=self.rules)
            except Unread as e:  # a fact the rules asked for could not be read: no verdict
                out.append(self._decision(c, Verdict.SKIPPED, str(e)))
                continue
            out.append(self._decision(c, *reported(res)))
        return out

    @staticmethod
    def _decision(c: _Candidate, verdict: Verdict, why: str) -> Decision:
        md, owner = c.md, c.owner
        return Decision(
            ledger_id=md.ledger_id,
            verdict=verdict,
            why=why,
            component=owner.component.value,
            topic=str(owner.topic),
            cursor=owner.cursor,
            schema_id=owner.schema_id,
            age_s=None if c.age_s is None else round(c.age_s, 3),
            size=md.length,
            state=md.state,
        )

    def _decide(self, report: ScanReport, d: Decision) -> None:
        report.add(d)
        self.on_decision(d)
