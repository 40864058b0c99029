"""Step 3, the in-use check: the owner broker's live state of a topic, cached safely.

The live set of a topic is every ledger its owner still references: managed-ledger ledgers (the current
one included), each cursor's ledger, the schema ledgers and the compacted ledger. It comes from
``internalStats`` on the *owning* broker only.

Caching is safe because ledger ids only grow and a removed id never comes back, with two guards:
- stale-id rule: a ledger id above the largest id of the snapshot may have been created after the
  snapshot was taken, so the snapshot cannot clear it: refetch before deciding;
- epochs (PIP-269's lesson): a 307, an ownership change or the topic going away bumps the topic's epoch;
  a decision taken on an older epoch is re-evaluated before anything is deleted.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from worker.message import LedgerComponent, PendingDeleteLedgerInfo
from worker.pulsar_admin import NotOwner, PulsarAdmin, TopicNotFound
from worker.topic_name import TopicName


@dataclass(frozen=True, slots=True)
class LiveSet:
    """What the owner of ``topic`` references right now (as of ``fetched_at``)."""

    topic: TopicName
    ml_ledgers: frozenset[int]
    cursor_ledgers: dict[str, int]
    schema_ledgers: frozenset[int]
    compacted_ledger: int | None
    offloaded_ledgers: frozenset[int]
    owner_url: str
    epoch: int
    fetched_at: float
    partitions: tuple[TopicName, ...] = field(default=())

    @property
    def all_ids(self) -> frozenset[int]:
        ids = set(self.ml_ledgers) | set(self.cursor_ledgers.values()) | set(self.schema_ledgers)
        if self.compacted_ledger is not None:
            ids.add(self.compacted_ledger)
        return frozenset(ids)

    @property
    def max_id(self) -> int:
        return max(self.all_ids, default=-1)

    def references(self, ledger_id: int) -> bool:
        return ledger_id in self.all_ids

    def covers(self, ledger_id: int) -> bool:
        """False when the id is newer than anything the snapshot saw (the stale-id rule)."""
        return ledger_id <= self.max_id

    @classmethod
    def from_internal_stats(
        cls, topic: TopicName, stats: dict[str, Any], owner_url: str, epoch: int, now: float
    ) -> LiveSet:
        ledgers = stats.get("ledgers") or []
        ml = frozenset(int(ld["ledgerId"]) for ld in ledgers if int(ld.get("ledgerId", -1)) >= 0)
        offloaded = frozenset(int(ld["ledgerId"]) for ld in ledgers if ld.get("offloaded"))
        cursors = {
            str(name): int(c["cursorLedger"])
            for name, c in (stats.get("cursors") or {}).items()
            if int(c.get("cursorLedger", -1)) >= 0
        }
        schema = frozenset(
            int(s["ledgerId"]) for s in (stats.get("schemaLedgers") or []) if int(s.get("ledgerId", -1)) >= 0
        )
        cl = (stats.get("compactedLedger") or {}).get("ledgerId", -1)
        compacted = int(cl) if cl is not None and int(cl) >= 0 else None
        return cls(topic, ml, cursors, schema, compacted, offloaded, owner_url, epoch, now)

    @classmethod
    def union(cls, topic: TopicName, parts: list[LiveSet], epoch: int, now: float) -> LiveSet:
        """A partitioned topic named by its base name: its ledgers live in the partitions."""
        cursors: dict[str, int] = {}
        for p in parts:
            for name, lid in p.cursor_ledgers.items():
                cursors[f"{p.topic.local_name}/{name}"] = lid
        compacted = [p.compacted_ledger for p in parts if p.compacted_ledger is not None]
        return cls(
            topic,
            frozenset().union(*(p.ml_ledgers for p in parts)),
            cursors,
            frozenset().union(*(p.schema_ledgers | set(compacted) for p in parts)),
            None,
            frozenset().union(*(p.offloaded_ledgers for p in parts)),
            ",".join(sorted({p.owner_url for p in parts})),
            epoch,
            now,
            tuple(p.topic for p in parts),
        )


class TopicGone:
    """The topic does not exist (404 from its owner): no live state, storage verification decides."""

    def __init__(self, topic: TopicName, epoch: int) -> None:
        self.topic = topic
        self.epoch = epoch

    def __repr__(self) -> str:
        return f"TopicGone({self.topic}, epoch={self.epoch})"


Snapshot = LiveSet | TopicGone

_GONE = "<gone>"


class LiveStateReader:
    """Owner lookup (cached per topic, dropped on 307 or error) + ``internalStats`` on the owner."""

    def __init__(self, admin: PulsarAdmin, on_request: Callable[[str, str], None] | None = None) -> None:
        self.admin = admin
        self._owners: dict[str, str] = {}
        self._on_request = on_request or (lambda endpoint, outcome: None)

    def forget_owner(self, topic: TopicName) -> None:
        self._owners.pop(str(topic), None)

    async def owner(self, topic: TopicName) -> str:
        key = str(topic)
        if key not in self._owners:
            self._owners[key] = await self.admin.lookup(topic)
            self._on_request("lookup", "ok")
        return self._owners[key]

    async def fetch(self, topic: TopicName) -> tuple[dict[str, Any], str] | None:
        """(internalStats, owner url), or None if the topic does not exist. Raises NotOwner after a
        second redirect so the caller can bump the epoch and retry later."""
        for attempt in (1, 2):
            owner = await self.owner(topic)
            try:
                stats = await self.admin.internal_stats(topic, base=owner)
                self._on_request("internal_stats", "ok")
                return stats, owner
            except TopicNotFound:
                self._on_request("internal_stats", "not_found")
                return None
            except NotOwner:
                self._on_request("internal_stats", "redirect")
                self.forget_owner(topic)
                if attempt == 2:
                    raise
            except Exception:
                self._on_request("internal_stats", "error")
                self.forget_owner(topic)
                raise
        raise AssertionError("unreachable")


class SnapshotCache:
    """Per-topic snapshots: bounded LRU with TTL, epochs, and the stale-id rule."""

    def __init__(
        self,
        reader: LiveStateReader,
        *,
        ttl_s: float,
        max_size: int,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.reader = reader
        self.ttl_s = ttl_s
        self.max_size = max_size
        self.clock = clock
        self._entries: OrderedDict[str, Snapshot] = OrderedDict()
        self._epochs: dict[str, int] = {}
        self._fetched_at: dict[str, float] = {}
        # What each topic looked like at its last read (owner URL, or _GONE), kept beyond LRU eviction:
        # a change against it bumps the epoch even when the snapshot itself was evicted. Like the
        # epochs, one short string per topic ever seen.
        self._last_seen: dict[str, str] = {}

    def epoch(self, topic: TopicName) -> int:
        return self._epochs.get(str(topic), 0)

    def bump(self, topic: TopicName, why: str = "") -> int:
        """Invalidate: any decision taken on the previous epoch must be re-evaluated."""
        key = str(topic)
        self._epochs[key] = self._epochs.get(key, 0) + 1
        self._entries.pop(key, None)
        self._fetched_at.pop(key, None)
        # The new epoch already invalidates everything seen before; the next read starts afresh
        # (a 307 followed by a read at the new owner is one move, not two).
        self._last_seen.pop(key, None)
        self.reader.forget_owner(topic)
        return self._epochs[key]

    def _store(self, topic: TopicName, snap: Snapshot) -> Snapshot:
        key = str(topic)
        self._entries[key] = snap
        self._entries.move_to_end(key)
        self._fetched_at[key] = self.clock()
        while len(self._entries) > self.max_size:
            old, _ = self._entries.popitem(last=False)
            self._fetched_at.pop(old, None)
        return snap

    def _cached(self, topic: TopicName) -> Snapshot | None:
        key = str(topic)
        snap = self._entries.get(key)
        if snap is None:
            return None
        if self.clock() - self._fetched_at.get(key, 0.0) > self.ttl_s:
            # Expired, but kept until the refetch replaces it: the refetch compares owner and existence
            # with it, and a decision may still hold it (an owner change must bump the epoch).
            return None
        self._entries.move_to_end(key)
        return snap

    async def _load(self, topic: TopicName) -> Snapshot:
        partitions = 0 if topic.partition_index is not None else await self.reader.admin.partitions(topic)
        if partitions > 0:
            parts: list[LiveSet] = []
            for i in range(partitions):
                try:
                    p = await self._load_one(topic.partition(i))
                except NotOwner:
                    # The base-name snapshot was built from this partition's owner: invalidate it too.
                    self.bump(topic, "307 on a partition")
                    raise
                if isinstance(p, LiveSet):
                    parts.append(p)
            if not parts:
                return self._gone(topic)
            # Owners per partition: a move of any one partition changes the base name's state.
            self._seen(topic, ",".join(f"{p.topic.local_name}@{p.owner_url}" for p in parts))
            return LiveSet.union(topic, parts, self.epoch(topic), self.clock())
        return await self._load_one(topic)

    def _seen(self, topic: TopicName, state: str) -> None:
        """Record what a read found; a change from the previous read bumps the epoch (owner moved,
        topic gone, topic (re-)created)."""
        key = str(topic)
        prev = self._last_seen.get(key)
        if prev is not None and prev != state:
            self.bump(topic, f"{prev} -> {state}")
        self._last_seen[key] = state

    def _gone(self, topic: TopicName) -> TopicGone:
        self._seen(topic, _GONE)
        return TopicGone(topic, self.epoch(topic))

    async def _load_one(self, topic: TopicName) -> Snapshot:
        try:
            got = await self.reader.fetch(topic)
        except NotOwner:
            self.bump(topic, "307")
            raise
        if got is None:
            return self._gone(topic)
        stats, owner = got
        self._seen(topic, owner)
        return LiveSet.from_internal_stats(topic, stats, owner, self.epoch(topic), self.clock())

    async def get(self, topic: TopicName, ledger_id: int | None = None, *, fresh: bool = False) -> Snapshot:
        """A snapshot that can decide about ``ledger_id`` (refetched when stale for it)."""
        if not fresh:
            snap = self._cached(topic)
            if isinstance(snap, LiveSet) and (ledger_id is None or snap.covers(ledger_id)):
                return snap
            # A cached TopicGone is not reused: "gone" must be re-read, it is what licenses the
            # direct route, and reading it is one cheap 404.
        return self._store(topic, await self._load(topic))

    def is_current(self, snap: Snapshot) -> bool:
        return snap.epoch == self.epoch(snap.topic)


def in_use(snap: LiveSet, info: PendingDeleteLedgerInfo) -> bool:
    """Whether the owner still references the ledger of ``info`` (BookKeeper copy)."""
    if snap.references(info.ledger_id):
        return True
    if info.ledger_component is LedgerComponent.MANAGED_CURSOR and info.cursor_name is not None:
        # The cursor's current ledger is in use even if another listing missed it.
        return snap.cursor_ledgers.get(info.cursor_name) == info.ledger_id
    return False
