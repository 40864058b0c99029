"""Step 3, the in-use check: a topic's live state (``worker.core.live_set``, read by
``worker.broker.live_state_reader``), cached safely. Ledger ids only grow and a removed id never comes back;
two guards (docs/design.md, "The owner's live state decides"): a ledger id above the snapshot's largest is
refetched unless the read is known to have started after the ledger existed (the caller's ``vouches``), and
an epoch that a 307, an ownership change or the topic going away bumps, checked last before a delete.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from worker.broker.admin import NotOwner, PulsarAdmin
from worker.broker.live_state_reader import LiveStateReader, SegmentUnsettled
from worker.broker.loaded_topics import LoadedTopics
from worker.core.gone_proof import GoneUnconfirmed, ManagedLedgerRecords, confirm_gone
from worker.core.live_set import Hold, LiveSet, Snapshot, TopicGone, ledger_hold
from worker.core.metadata_stores import MetadataStores
from worker.formats.topic_name import TopicName
from worker.settings import WorkerSettings

__all__ = [
    "Hold",
    "LiveSet",
    "LiveStateReader",
    "SegmentUnsettled",
    "Snapshot",
    "SnapshotCache",
    "TopicGone",
    "ledger_hold",
]

_GONE = "<gone>"
# The admin API said "not found" but the metadata store still has the managed ledger.
_UNCONFIRMED = "<not found, unconfirmed>"


@dataclass(slots=True)
class _TopicState:
    """Everything the cache knows of one topic, in one place: evicting the topic drops its snapshot
    with its epoch, so a snapshot is never served under an epoch its topic no longer has."""

    epoch: int
    # What the topic looked like at its last read (owner URL, _GONE or _UNCONFIRMED): a change bumps the
    # epoch even when the snapshot itself was evicted.
    last_seen: str | None = None
    snapshot: Snapshot | None = None
    fetched_at: float = 0.0
    # When the snapshot's read started (the event loop's clock, as ``worker.core.dispatch.Dispatch.at``; and the
    # wall clock in ms, as ledger creation times).
    read_started: float = 0.0
    read_started_ms: int = 0


class SnapshotCache:
    """Per-topic snapshots: bounded LRU with TTL, epochs, the stale-id rule, the "gone" rule, and one fetch at
    a time per topic. Epochs come from one counter, so no value is ever reused. Per-topic state (epoch, last
    seen, the snapshot) is one entry, bounded by ``max_topics``: evicting it drops the snapshot with the epoch
    and moves the epoch every state-less topic reports (``_base``) to a fresh value, so a decision still holding
    a snapshot of an evicted topic is re-taken instead of trusted. At most ``max_size`` entries hold a snapshot
    (least recently used loses it first; its epoch stays)."""

    def __init__(
        self,
        reader: LiveStateReader,
        *,
        ttl_s: float,
        max_size: int,
        metadata_store: ManagedLedgerRecords | None = None,
        max_topics: int | None = None,
        clock: Callable[[], float] = time.monotonic,
        on_bump: Callable[[TopicName, str], None] | None = None,
        not_found_ttl_s: float = 0.0,
        wall_clock_ms: Callable[[], int] = lambda: int(time.time() * 1000),
    ) -> None:
        self.reader = reader
        self.wall_clock_ms = wall_clock_ms
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
        self._states: OrderedDict[str, _TopicState] = OrderedDict()
        # The keys of the states holding a snapshot, least recently used first (bounded by max_size).
        self._snapshots: OrderedDict[str, None] = OrderedDict()
        self._counter = 0
        self._base = 0
        self._inflight: dict[str, tuple[float, int, asyncio.Task[Snapshot]]] = {}

    def _next_epoch(self) -> int:
        self._counter += 1
        return self._counter

    def _state(self, key: str) -> _TopicState:
        st = self._states.get(key)
        if st is None:
            st = self._states[key] = _TopicState(self._base)
            while len(self._states) > self.max_topics:
                old, _ = self._states.popitem(last=False)
                self._snapshots.pop(old, None)  # the snapshot goes with its epoch
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
        self._drop_snapshot(key)
        self._not_found.pop(key, None)
        self.reader.forget_owner(topic)
        self.on_bump(topic, why)
        return st.epoch

    def _drop_snapshot(self, key: str) -> None:
        self._snapshots.pop(key, None)
        st = self._states.get(key)
        if st is not None:
            st.snapshot = None

    def _store(self, topic: TopicName, snap: Snapshot, read_started: float, read_started_ms: int) -> Snapshot:
        key = str(topic)
        st = self._state(key)
        st.snapshot = snap
        st.fetched_at = self.clock()
        st.read_started = read_started
        st.read_started_ms = read_started_ms
        self._snapshots[key] = None
        self._snapshots.move_to_end(key)
        while len(self._snapshots) > self.max_size:
            self._drop_snapshot(next(iter(self._snapshots)))
        return snap

    def _cached(self, topic: TopicName) -> Snapshot | None:
        key = str(topic)
        st = self._states.get(key)
        if st is None or st.snapshot is None:
            return None
        if self.clock() - st.fetched_at > self.ttl_s:
            return None
        # A hit is a use of the topic's whole entry: its epoch is kept as long as its snapshot is used.
        self._states.move_to_end(key)
        self._snapshots.move_to_end(key)
        return st.snapshot

    def snapshot_count(self) -> int:
        return len(self._snapshots)

    def topic_count(self) -> int:
        return len(self._states)

    def _seen(self, topic: TopicName, state: str) -> None:
        """Record what a read found; a change from the previous read bumps the epoch (owner moved,
        topic gone, topic lost by the admin API but not gone, topic (re-)created)."""
        st = self._state(str(topic))
        prev = st.last_seen
        if prev is not None and prev != state:
            self.bump(topic, f"{prev} -> {state}")
            st = self._state(str(topic))
        st.last_seen = state

    async def _load(self, topic: TopicName, since: float | None) -> Snapshot:
        # The epoch is taken BEFORE the read (PIP-269's lesson): a bump while the read is in flight
        # (a 307 or an owner change seen by another decision) makes this snapshot stale, not current.
        before = self.epoch(topic)
        try:
            snap = await self._read(topic, since)
        except GoneUnconfirmed:
            # The admin API lost a topic the metadata store still has (unloading, moving, failing to
            # load, re-created): whatever was decided on the previous observation is re-taken.
            self._seen(topic, _UNCONFIRMED)
            raise
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

    async def _confirm_gone(self, topic: TopicName, since: float | None) -> TopicGone:
        try:
            await confirm_gone(topic, self.metadata_store, since=since)
        except GoneUnconfirmed:
            self._not_found.pop(str(topic), None)  # something is there: ask the admin API again
            raise
        return TopicGone(topic, -1)

    async def _read(self, topic: TopicName, since: float | None) -> Snapshot:
        key = str(topic)
        if self._admin_said_not_found(key):
            return await self._confirm_gone(topic, since)
        self._not_found.pop(key, None)
        # The topic's own managed ledger first: most topics are not partitioned, and a partitioned topic's
        # base name has none, so `partitions` is asked only then (docs/benchmarks.md, admin calls per 1,000
        # messages).
        try:
            got = await self.reader.fetch(topic)
        except NotOwner:
            self.bump(topic, "307")
            raise
        if got is None:
            # A segment is one hash range of its scalable topic, never a partitioned topic's base.
            leaf = topic.partition_index is not None or topic.is_segment
            partitions = 0 if leaf else await self.reader.partitions(topic)
            if partitions > 0:
                return await self._union_of_partitions(topic, partitions, since)
            gone = await self._confirm_gone(topic, since)
            self._remember_not_found(key)
            return gone
        return dataclasses.replace(got, fetched_at=self.clock())

    async def _union_of_partitions(self, topic: TopicName, partitions: int, since: float | None) -> Snapshot:
        parts: list[LiveSet] = []
        for i in range(partitions):
            try:
                p = await self._load(topic.partition(i), since)
            except NotOwner:
                # The base-name snapshot was built from this partition's owner: invalidate it too.
                self.bump(topic, "307 on a partition")
                raise
            if isinstance(p, LiveSet):
                parts.append(p)
        if not parts:
            return TopicGone(topic, -1)
        return LiveSet.union(topic, parts, -1, self.clock())

    async def _load_and_store(
        self, topic: TopicName, started: float | None = None, started_ms: int | None = None, since: float | None = None
    ) -> Snapshot:
        if started is None or started_ms is None:
            started, started_ms = asyncio.get_running_loop().time(), self.wall_clock_ms()
        snap = await self._load(topic, since)
        if self.is_current(snap):
            # A stale read (epoch moved while it was in flight) is handed to its callers but never cached.
            self._store(topic, snap, started, started_ms)
        return snap

    @staticmethod
    def _started_after_receipt(read_started: float, since: float | None) -> bool:
        """Whether a read is as fresh as the current message's own re-read would be: it started after the
        message's batch was received, so after the message's ledger existed (the message names it). A
        snapshot that does not list such a ledger then answers for it as a read of its own would. (A forged
        message may name an id not created yet; whatever ledger gets it later is too young to delete.)"""
        return since is not None and read_started >= since

    async def get(
        self,
        topic: TopicName,
        ledger_id: int | None = None,
        *,
        fresh: bool = False,
        vouches: Callable[[int], Awaitable[bool]] | None = None,
        since: float | None = None,
    ) -> Snapshot:
        """A snapshot that can decide about ``ledger_id`` (refetched when stale for it). Concurrent callers of one
        topic share one read (single flight); ``fresh`` callers need a read that starts after their call.
        ``vouches(read_started_ms)``: whether a read that started then, and does not list the ledger, may still
        decide about it (from the ledger's creation time and the minimum age). ``since``: when the asking
        message was dispatched (``worker.core.dispatch``): reads started at or after it are shared with it; None
        shares none."""
        key = str(topic)
        if fresh:
            return await self._load_and_store(topic, since=since)
        snap = self._cached(topic)
        if isinstance(snap, LiveSet):
            st = self._states[key]
            if (
                ledger_id is None
                or snap.covers(ledger_id)
                or self._started_after_receipt(st.read_started, since)
                or await _vouched(vouches, st.read_started_ms)
            ):
                return snap
        # A cached TopicGone is not reused: "gone" must be re-read, it is what licenses the direct route.
        if self._admin_said_not_found(key):
            # Only the metadata store is asked, by this message itself (never a read another began).
            return await self._load_and_store(topic, since=since)
        running = self._inflight.get(key)
        if running is not None:
            started, started_ms, shared = running
            snap = await asyncio.shield(shared)
            if (
                not isinstance(snap, LiveSet)
                or ledger_id is None
                or snap.covers(ledger_id)
                or self._started_after_receipt(started, since)
                or await _vouched(vouches, started_ms)
            ):
                return snap
            # The shared read may have started before this ledger existed (stale-id rule): read again.
        started, started_ms = asyncio.get_running_loop().time(), self.wall_clock_ms()
        task = asyncio.ensure_future(self._load_and_store(topic, started, started_ms, since))
        entry = (started, started_ms, task)
        self._inflight[key] = entry
        task.add_done_callback(lambda t: self._inflight.pop(key, None) if self._inflight.get(key) is entry else None)
        return await asyncio.shield(task)

    def is_current(self, snap: Snapshot) -> bool:
        return snap.epoch == self.epoch(snap.topic)


async def _vouched(vouches: Callable[[int], Awaitable[bool]] | None, read_started_ms: int) -> bool:
    return vouches is not None and read_started_ms > 0 and await vouches(read_started_ms)


def _owners_key(snap: LiveSet) -> str:
    return ",".join(f"{p.local_name}@{o}" for p, o in zip(snap.partitions, snap.partition_owners, strict=True))


def _with_epoch(snap: Snapshot, epoch: int) -> Snapshot:
    if isinstance(snap, TopicGone):
        return TopicGone(snap.topic, epoch)
    return dataclasses.replace(snap, epoch=epoch)


def snapshot_cache(
    admin: PulsarAdmin,
    w: WorkerSettings,
    metadata_store: MetadataStores | None,
    *,
    ttl_s: float | None = None,
    on_request: Callable[[str, str], None] | None = None,
    on_bump: Callable[[TopicName, str], None] | None = None,
    not_found_ttl_s: float = 0.0,
) -> SnapshotCache:
    """The one way to build the live-state cache from the settings (size, TTL; the owner cache bounded at
    ten times the snapshots): the daemon, the replay, ``scan`` and the audit all get it here. With a
    metadata stores, a topic no broker has loaded is read from it; without one, only topics a
    broker lists as loaded can be read (nothing is loaded to learn the others)."""
    return SnapshotCache(
        live_state_reader(admin, w, metadata_store, on_request=on_request, listing_ttl_s=not_found_ttl_s),
        ttl_s=w.snapshot_ttl_s if ttl_s is None else ttl_s,
        max_size=w.snapshot_cache_size,
        metadata_store=metadata_store.pulsar if metadata_store is not None else None,
        on_bump=on_bump,
        not_found_ttl_s=not_found_ttl_s,
    )


def live_state_reader(
    admin: PulsarAdmin,
    w: WorkerSettings,
    metadata_store: MetadataStores | None,
    *,
    on_request: Callable[[str, str], None] | None = None,
    listing_ttl_s: float = 0.0,
    may_load: bool = False,
) -> LiveStateReader:
    """The reader behind every live-state read: the brokers' lists of loaded topics (kept
    ``worker.loaded_topics_ttl_s``), Pulsar's metadata store when ``metadata_store`` is given,
    the admin API's namespace listings (kept ``listing_ttl_s``)."""
    metadata = metadata_store.pulsar if metadata_store is not None else None
    return LiveStateReader(
        admin,
        on_request,
        metadata=metadata,
        loaded=LoadedTopics(admin, metadata, ttl_s=w.loaded_topics_ttl_s, on_request=on_request),
        listing_ttl_s=listing_ttl_s,
        may_load=may_load,
        max_owners=10 * w.snapshot_cache_size,
    )
