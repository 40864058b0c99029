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

import asyncio
import dataclasses
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from worker.http import BackendError
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
    # A base name's union: each partition's owner, in partition order (a move of any one partition
    # changes the base name's state).
    partition_owners: tuple[str, ...] = field(default=())

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
            tuple(p.owner_url for p in parts),
        )


class TopicGone:
    """The topic does not exist, proven twice: the admin API said so and the metadata store has no
    managed ledger for it. No live state: storage verification alone decides (the direct route)."""

    def __init__(self, topic: TopicName, epoch: int) -> None:
        self.topic = topic
        self.epoch = epoch

    def __repr__(self) -> str:
        return f"TopicGone({self.topic}, epoch={self.epoch})"


Snapshot = LiveSet | TopicGone

_GONE = "<gone>"


class GoneUnconfirmed(BackendError):
    """The admin API says the topic does not exist, but that is not proven: the metadata store still
    has its managed ledger (a topic that cannot be loaded is not a gone topic), or no metadata store is
    configured to ask. Transient: the message is retried, nothing is deleted on half a proof."""

    def __init__(self, topic: TopicName, why: str) -> None:
        super().__init__("admin", f"{topic} not found by the admin API, but {why}")
        self.topic = topic


class MetadataStore(Protocol):
    """The metadata store's half of the "gone" proof (``worker.zookeeper.ZooKeeper``)."""

    async def managed_ledger_exists(self, ml_name: str) -> bool: ...


async def confirm_gone(topic: TopicName, store: MetadataStore | None) -> None:
    """The one rule, shared by pipeline, scanner and purge-topic: after the admin API said "not found",
    the topic is gone only if the metadata store has no managed ledger for it. Raises GoneUnconfirmed."""
    if store is None:
        raise GoneUnconfirmed(topic, "no metadata store is configured to confirm it (zookeeper.hosts)")
    if await store.managed_ledger_exists(topic.managed_ledger_name):
        raise GoneUnconfirmed(topic, "its managed ledger still exists in the metadata store")


class LiveStateReader:
    """Owner lookup (cached per topic, bounded, dropped on 307 or error) + ``internalStats`` on the owner."""

    def __init__(
        self, admin: PulsarAdmin, on_request: Callable[[str, str], None] | None = None, *, max_owners: int = 100_000
    ) -> None:
        self.admin = admin
        self.max_owners = max_owners
        self._owners: OrderedDict[str, str] = OrderedDict()
        self._on_request = on_request or (lambda endpoint, outcome: None)

    def forget_owner(self, topic: TopicName) -> None:
        self._owners.pop(str(topic), None)

    async def partitions(self, topic: TopicName) -> int:
        try:
            n = await self.admin.partitions(topic)
        except Exception:
            self._on_request("partitions", "error")
            raise
        self._on_request("partitions", "ok")
        return n

    async def owner(self, topic: TopicName) -> str:
        key = str(topic)
        if key in self._owners:
            self._owners.move_to_end(key)
            return self._owners[key]
        url = await self.admin.lookup(topic)
        self._on_request("lookup", "ok")
        self._owners[key] = url
        while len(self._owners) > self.max_owners:
            self._owners.popitem(last=False)  # losing an owner costs one lookup, nothing else
        return url

    async def fetch(self, topic: TopicName) -> tuple[dict[str, Any], str] | None:
        """(internalStats, owner url), or None when the admin API says the topic does not exist (a lookup
        or internalStats "not found" in Pulsar's words). Raises NotOwner after a second redirect so the
        caller can bump the epoch and retry later."""
        for attempt in (1, 2):
            try:
                owner = await self.owner(topic)
            except TopicNotFound:
                # No namespace, or no topic where auto-creation is off: the lookup is the admin's answer.
                self._on_request("lookup", "not_found")
                return None
            except Exception:
                self._on_request("lookup", "error")
                raise
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


@dataclass(slots=True)
class _TopicState:
    epoch: int
    # What the topic looked like at its last read (owner URL, or _GONE): a change bumps the epoch even
    # when the snapshot itself was evicted.
    last_seen: str | None = None


class SnapshotCache:
    """Per-topic snapshots: bounded LRU with TTL, epochs, the stale-id rule, the "gone" rule, and one
    fetch at a time per topic.

    Epochs come from one counter, so no value is ever reused. Per-topic state (epoch, last seen) is
    bounded too: evicting a topic's state moves the epoch every state-less topic reports
    (``_base``) to a fresh value, so a decision still holding a snapshot of an evicted topic is
    re-taken instead of trusted.
    """

    def __init__(
        self,
        reader: LiveStateReader,
        *,
        ttl_s: float,
        max_size: int,
        metadata_store: MetadataStore | None = None,
        max_topics: int | None = None,
        clock: Callable[[], float] = time.monotonic,
        on_bump: Callable[[TopicName, str], None] | None = None,
        not_found_ttl_s: float = 0.0,
    ) -> None:
        self.reader = reader
        # How long the admin API's "not found" (its half of the gone proof) is reused. The metadata
        # store's half is re-read for every message regardless, and that is what keeps a re-created
        # topic from looking gone: a ledger carrying the topic's managed-ledger name can only be created
        # after the broker wrote that managed-ledger znode (ManagedLedgerImpl writes its metadata before
        # its first ledger), and a znode found there drops this answer. 0 = ask the admin every time.
        self.not_found_ttl_s = not_found_ttl_s
        self._not_found: OrderedDict[str, float] = OrderedDict()
        self.ttl_s = ttl_s
        self.max_size = max_size
        self.metadata_store = metadata_store
        self.max_topics = max(max_size, max_topics if max_topics is not None else 10 * max_size)
        self.clock = clock
        self.on_bump = on_bump or (lambda topic, why: None)
        self._entries: OrderedDict[str, Snapshot] = OrderedDict()
        self._fetched_at: dict[str, float] = {}
        self._states: OrderedDict[str, _TopicState] = OrderedDict()
        self._counter = 0
        self._base = 0
        self._inflight: dict[str, asyncio.Task[Snapshot]] = {}

    def _next_epoch(self) -> int:
        self._counter += 1
        return self._counter

    def _state(self, key: str) -> _TopicState:
        st = self._states.get(key)
        if st is None:
            st = self._states[key] = _TopicState(self._base)
            while len(self._states) > self.max_topics:
                self._states.popitem(last=False)
                self._base = self._next_epoch()
        else:
            self._states.move_to_end(key)
        return st

    def epoch(self, topic: TopicName) -> int:
        st = self._states.get(str(topic))
        return self._base if st is None else st.epoch

    def bump(self, topic: TopicName, why: str = "") -> int:
        """Invalidate: any decision taken on the previous epoch must be re-evaluated."""
        key = str(topic)
        st = self._state(key)
        st.epoch = self._next_epoch()
        # The new epoch already invalidates everything seen before; the next read starts afresh
        # (a 307 followed by a read at the new owner is one move, not two).
        st.last_seen = None
        self._entries.pop(key, None)
        self._fetched_at.pop(key, None)
        self._not_found.pop(key, None)
        self.reader.forget_owner(topic)
        self.on_bump(topic, why)
        return st.epoch

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
            return None
        self._entries.move_to_end(key)
        return snap

    def _seen(self, topic: TopicName, state: str) -> None:
        """Record what a read found; a change from the previous read bumps the epoch (owner moved,
        topic gone, topic (re-)created)."""
        st = self._state(str(topic))
        prev = st.last_seen
        if prev is not None and prev != state:
            self.bump(topic, f"{prev} -> {state}")
            st = self._state(str(topic))
        st.last_seen = state

    async def _load(self, topic: TopicName) -> Snapshot:
        # The epoch is taken BEFORE the read (PIP-269's lesson): a bump while the read is in flight
        # (a 307 or an owner change seen by another decision) makes this snapshot stale, not current.
        before = self.epoch(topic)
        snap = await self._read(topic)
        if self.epoch(topic) != before:
            return _with_epoch(snap, before)
        # Only this read's own observation is left to compare; no await between here and the return.
        if isinstance(snap, TopicGone):
            self._seen(topic, _GONE)
        elif isinstance(snap, LiveSet):
            self._seen(topic, snap.owner_url if not snap.partitions else _owners_key(snap))
        return _with_epoch(snap, self.epoch(topic))

    def _admin_said_not_found(self, key: str) -> bool:
        at = self._not_found.get(key)
        return at is not None and self.clock() - at <= self.not_found_ttl_s

    def _remember_not_found(self, key: str) -> None:
        if self.not_found_ttl_s <= 0:
            return
        self._not_found[key] = self.clock()
        self._not_found.move_to_end(key)
        while len(self._not_found) > self.max_topics:
            self._not_found.popitem(last=False)

    async def _confirm_gone(self, topic: TopicName) -> TopicGone:
        try:
            await confirm_gone(topic, self.metadata_store)
        except GoneUnconfirmed:
            self._not_found.pop(str(topic), None)  # something is there: ask the admin API again
            raise
        return TopicGone(topic, -1)

    async def _read(self, topic: TopicName) -> Snapshot:
        key = str(topic)
        if self._admin_said_not_found(key):
            return await self._confirm_gone(topic)
        self._not_found.pop(key, None)
        partitions = 0 if topic.partition_index is not None else await self.reader.partitions(topic)
        if partitions > 0:
            parts: list[LiveSet] = []
            for i in range(partitions):
                try:
                    p = await self._load(topic.partition(i))
                except NotOwner:
                    # The base-name snapshot was built from this partition's owner: invalidate it too.
                    self.bump(topic, "307 on a partition")
                    raise
                if isinstance(p, LiveSet):
                    parts.append(p)
            if not parts:
                return TopicGone(topic, -1)
            return LiveSet.union(topic, parts, -1, self.clock())
        try:
            got = await self.reader.fetch(topic)
        except NotOwner:
            self.bump(topic, "307")
            raise
        if got is None:
            gone = await self._confirm_gone(topic)
            self._remember_not_found(key)
            return gone
        stats, owner = got
        return LiveSet.from_internal_stats(topic, stats, owner, -1, self.clock())

    async def _load_and_store(self, topic: TopicName) -> Snapshot:
        snap = await self._load(topic)
        if self.is_current(snap):
            # A stale read (epoch moved while it was in flight) is handed to its callers but never cached.
            self._store(topic, snap)
        return snap

    async def get(self, topic: TopicName, ledger_id: int | None = None, *, fresh: bool = False) -> Snapshot:
        """A snapshot that can decide about ``ledger_id`` (refetched when stale for it).

        Concurrent callers of one topic share one read (single flight) instead of each starting its
        own after a TTL expiry; ``fresh`` callers need a read that starts after their call and never join.
        """
        key = str(topic)
        if fresh:
            return await self._load_and_store(topic)
        snap = self._cached(topic)
        if isinstance(snap, LiveSet) and (ledger_id is None or snap.covers(ledger_id)):
            return snap
        # A cached TopicGone is not reused: "gone" must be re-read, it is what licenses the direct route.
        if self._admin_said_not_found(key):
            # Only the metadata store is asked, by this message itself (never a read another began).
            return await self._load_and_store(topic)
        running = self._inflight.get(key)
        if running is not None:
            snap = await asyncio.shield(running)
            if not isinstance(snap, LiveSet) or ledger_id is None or snap.covers(ledger_id):
                return snap
            # The shared read may have started before this ledger existed (stale-id rule): read again.
        task = asyncio.ensure_future(self._load_and_store(topic))
        self._inflight[key] = task
        task.add_done_callback(lambda t: self._inflight.pop(key, None) if self._inflight.get(key) is t else None)
        return await asyncio.shield(task)

    def is_current(self, snap: Snapshot) -> bool:
        return snap.epoch == self.epoch(snap.topic)


def _owners_key(snap: LiveSet) -> str:
    return ",".join(f"{p.local_name}@{o}" for p, o in zip(snap.partitions, snap.partition_owners, strict=True))


def _with_epoch(snap: Snapshot, epoch: int) -> Snapshot:
    if isinstance(snap, TopicGone):
        return TopicGone(snap.topic, epoch)
    return dataclasses.replace(snap, epoch=epoch)


def in_use(snap: LiveSet, info: PendingDeleteLedgerInfo) -> bool:
    """Whether the owner still references the ledger of ``info`` (BookKeeper copy)."""
    if snap.references(info.ledger_id):
        return True
    if info.ledger_component is LedgerComponent.MANAGED_CURSOR and info.cursor_name is not None:
        # The cursor's current ledger is in use even if another listing missed it.
        return snap.cursor_ledgers.get(info.cursor_name) == info.ledger_id
    return False
