"""The snapshot cache (``worker.broker.snapshot_cache``): the in-use rule, TTL, LRU, stale-id rule, epochs.

The reader it sits on is replaced here by a scripted fake with the same surface (``admin.partitions``, ``fetch``,
``forget_owner``), so every rule is checked without I/O. The reader itself: tests/unit/test_live_state_reader.py.
"""

from __future__ import annotations

import asyncio
import random
from typing import Any

import pytest

from tests.unit.fakes import internal_stats as stats
from worker.broker.admin import NotOwner
from worker.broker.snapshot_cache import LiveSet, SnapshotCache
from worker.core.gone_proof import GoneUnconfirmed
from worker.core.live_set import TopicGone, in_use
from worker.formats.message import LedgerComponent, LedgerType, PendingDeleteLedgerInfo
from worker.formats.topic_name import TopicName

T = TopicName.parse("persistent://t/ns/x")
U = TopicName.parse("persistent://t/ns/u")
V = TopicName.parse("persistent://t/ns/v")
A = "http://broker-a:8080"
B = "http://broker-b:8080"


# ---- the in-use rule on a snapshot -----------------------------------------------------------------------------


def _info(component: LedgerComponent, ledger_id: int, cursor: str | None = None) -> PendingDeleteLedgerInfo:
    return PendingDeleteLedgerInfo(
        str(T),
        component,
        LedgerType.LEDGER,
        ledger_id,
        cursor_name=cursor,
        schema_id="t/ns/x" if component is LedgerComponent.SCHEMA_STORAGE else None,
    )


@pytest.mark.parametrize(
    ("component", "ledger_id", "expected"),
    [
        (LedgerComponent.MANAGED_LEDGER, 11, True),
        (LedgerComponent.MANAGED_LEDGER, 8, False),
        (LedgerComponent.MANAGED_CURSOR, 13, True),
        (LedgerComponent.MANAGED_CURSOR, 12, True),  # any referenced id is in use, whoever references it
        (LedgerComponent.MANAGED_CURSOR, 8, False),
        (LedgerComponent.SCHEMA_STORAGE, 3, True),
        (LedgerComponent.SCHEMA_STORAGE, 4, False),
        (LedgerComponent.COMPACTED_LEDGER, 9, True),
        (LedgerComponent.COMPACTED_LEDGER, 7, False),
    ],
)
def test_in_use(component: LedgerComponent, ledger_id: int, expected: bool) -> None:
    s = LiveSet.from_internal_stats(T, stats([11, 12], cursors={"sub": 13}, schema=[3], compacted=9), A, 0, 0)
    cursor = "sub" if component is LedgerComponent.MANAGED_CURSOR else None
    assert in_use(s, _info(component, ledger_id, cursor)) is expected


# ---- a scripted reader --------------------------------------------------------------------------------------------

Answer = tuple[dict[str, Any], str] | None | Exception


class FakeAdmin:
    def __init__(self) -> None:
        self.partition_counts: dict[str, int] = {}
        self.calls: list[str] = []

    async def partitions(self, topic: TopicName) -> int:
        self.calls.append(str(topic))
        return self.partition_counts.get(str(topic), 0)


class FakeReader:
    """Answers ``fetch`` from a per-topic script: (stats, owner), None for "does not exist", or an
    exception to raise."""

    def __init__(self) -> None:
        self.admin = FakeAdmin()
        self.answers: dict[str, Answer] = {}
        self.fetches: list[str] = []
        self.forgotten: list[str] = []

    def set(self, topic: TopicName, answer: Answer) -> None:
        self.answers[str(topic)] = answer

    async def partitions(self, topic: TopicName) -> int:
        return await self.admin.partitions(topic)

    def count(self, topic: TopicName) -> int:
        return self.fetches.count(str(topic))

    def forget_owner(self, topic: TopicName) -> None:
        self.forgotten.append(str(topic))

    async def fetch(self, topic: TopicName) -> LiveSet | None:
        self.fetches.append(str(topic))
        a = self.answers.get(str(topic))
        if isinstance(a, Exception):
            raise a
        return None if a is None else LiveSet.from_internal_stats(topic, a[0], a[1], -1, 0.0)


class Clock:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


class FakeMetadataStore:
    """The metadata store's half of "gone": the managed ledgers it still has."""

    def __init__(self, managed_ledgers: set[str] | None = None) -> None:
        self.managed_ledgers = managed_ledgers or set()
        self.asked: list[str] = []

    async def managed_ledger_exists(self, ml_name: str, *, since: float | None = None) -> bool:
        self.asked.append(ml_name)
        return ml_name in self.managed_ledgers


def make(
    ttl: float = 60, size: int = 16, store: FakeMetadataStore | None = None, **kw: Any
) -> tuple[SnapshotCache, FakeReader, Clock]:
    reader = FakeReader()
    clock = Clock()
    cache = SnapshotCache(
        reader,  # type: ignore[arg-type]
        ttl_s=ttl,
        max_size=size,
        clock=clock,
        metadata_store=store if store is not None else FakeMetadataStore(),
        **kw,
    )
    return cache, reader, clock


# ---- TTL, LRU, stale-id rule ----------------------------------------------------------------------------------------


async def test_snapshot_is_cached_within_ttl_and_refetched_after() -> None:
    cache, reader, clock = make(ttl=60)
    reader.set(T, (stats([1, 2]), A))
    s1 = await cache.get(T)
    assert isinstance(s1, LiveSet) and s1.ml_ledgers == {1, 2}
    clock.t += 60
    assert await cache.get(T) is s1
    assert reader.count(T) == 1
    reader.set(T, (stats([2, 3]), A))
    clock.t += 0.001
    s2 = await cache.get(T)
    assert reader.count(T) == 2
    assert isinstance(s2, LiveSet) and s2.ml_ledgers == {2, 3}
    assert s2.fetched_at == clock.t


async def test_ttl_zero_refetches_after_any_time() -> None:
    cache, reader, clock = make(ttl=0)
    reader.set(T, (stats([1]), A))
    await cache.get(T)
    clock.t += 0.5
    await cache.get(T)
    assert reader.count(T) == 2


async def test_fresh_always_refetches() -> None:
    cache, reader, _ = make()
    reader.set(T, (stats([1]), A))
    await cache.get(T)
    await cache.get(T, fresh=True)
    await cache.get(T, 1, fresh=True)
    assert reader.count(T) == 3


async def test_lru_bound_evicts_the_least_recently_used() -> None:
    cache, reader, _ = make(size=2)
    for t in (T, U, V):
        reader.set(t, (stats([1]), A))
    await cache.get(T)
    await cache.get(U)
    await cache.get(T)  # T is now more recent than U
    await cache.get(V)  # evicts U
    assert (reader.count(T), reader.count(U), reader.count(V)) == (1, 1, 1)
    await cache.get(T)
    await cache.get(V)
    assert (reader.count(T), reader.count(V)) == (1, 1)  # still cached
    await cache.get(U)  # was evicted: fetched again, and now evicts T (least recent)
    assert reader.count(U) == 2
    await cache.get(T)
    assert reader.count(T) == 2


async def test_lru_bound_of_one() -> None:
    cache, reader, _ = make(size=1)
    reader.set(T, (stats([1]), A))
    reader.set(U, (stats([1]), A))
    for _ in range(3):
        await cache.get(T)
        await cache.get(U)
    assert (reader.count(T), reader.count(U)) == (3, 3)


async def test_stale_id_rule_refetches_for_a_newer_ledger() -> None:
    cache, reader, _ = make()
    reader.set(T, (stats([10, 11], cursors={"s": 12}), A))
    s1 = await cache.get(T, 12)
    assert reader.count(T) == 1
    assert await cache.get(T, 5) is s1  # older ids are decided by the cached snapshot
    assert await cache.get(T, 12) is s1
    assert reader.count(T) == 1
    reader.set(T, (stats([11, 13], cursors={"s": 14}), A))
    s2 = await cache.get(T, 13)  # 13 > max id 12: the snapshot cannot clear it
    assert reader.count(T) == 2
    assert isinstance(s2, LiveSet) and s2.references(13)
    assert await cache.get(T, 14) is s2


@pytest.mark.parametrize("vouched", [False, True], ids=["ledger-too-young-at-the-read", "ledger-old-at-the-read"])
async def test_a_snapshot_read_once_the_ledger_was_old_enough_decides_about_a_newer_id(vouched: bool) -> None:
    """The stale-id rule's other way out: the caller says whether the ledger was already older than the
    minimum age when the snapshot's read started (then its topic would list it if it kept it). The read's
    start is passed on the wall clock, which ledger creation times use."""
    cache, reader, _ = make(wall_clock_ms=lambda: 5_000)
    reader.set(T, (stats([10, 11]), A))
    s1 = await cache.get(T, 11)
    asked: list[int] = []

    async def vouches(read_started_ms: int) -> bool:
        asked.append(read_started_ms)
        return vouched

    s2 = await cache.get(T, 13, vouches=vouches)
    assert asked == [5_000]
    assert (s2 is s1) is vouched
    assert reader.count(T) == (1 if vouched else 2)


async def test_stale_id_with_no_id_uses_the_cache() -> None:
    cache, reader, _ = make()
    reader.set(T, (stats([]), A))
    await cache.get(T)
    await cache.get(T)
    assert reader.count(T) == 1
    await cache.get(T, 0)  # an empty snapshot covers nothing
    assert reader.count(T) == 2


async def test_topic_gone_is_never_served_from_the_cache() -> None:
    cache, reader, _ = make()
    reader.set(T, None)
    g1 = await cache.get(T)
    g2 = await cache.get(T)
    assert isinstance(g1, TopicGone) and isinstance(g2, TopicGone)
    assert reader.count(T) == 2
    assert g1.epoch == g2.epoch == 0  # gone without having existed: nothing to invalidate


# ---- epochs ---------------------------------------------------------------------------------------------------------


async def test_not_owner_bumps_the_epoch_and_drops_the_snapshot() -> None:
    cache, reader, _ = make()
    reader.set(T, (stats([1, 2]), A))
    s1 = await cache.get(T)
    assert cache.epoch(T) == 0 and cache.is_current(s1)
    reader.set(T, NotOwner(B))
    with pytest.raises(NotOwner):
        await cache.get(T, 3)
    assert cache.epoch(T) == 1
    assert not cache.is_current(s1)
    assert str(T) in reader.forgotten  # the cached owner is dropped too
    reader.set(T, (stats([1, 2, 3]), B))
    s2 = await cache.get(T)  # not served from the old entry
    assert reader.count(T) == 3
    assert s2.epoch == 1 and cache.is_current(s2)


async def test_owner_change_bumps_the_epoch() -> None:
    cache, reader, _ = make()
    reader.set(T, (stats([1, 2]), A))
    s1 = await cache.get(T)
    reader.set(T, (stats([1, 2, 3]), B))
    s2 = await cache.get(T, 3)  # stale-id refetch lands on a new owner
    assert isinstance(s2, LiveSet) and s2.owner_url == B
    assert cache.epoch(T) == 1
    assert s2.epoch == 1 and cache.is_current(s2)
    assert not cache.is_current(s1)


async def test_same_owner_keeps_the_epoch() -> None:
    cache, reader, _ = make()
    reader.set(T, (stats([1, 2]), A))
    s1 = await cache.get(T)
    reader.set(T, (stats([1, 2, 3]), A))
    s2 = await cache.get(T, 3)
    assert s2 is not s1
    assert cache.epoch(T) == 0
    assert cache.is_current(s1) and cache.is_current(s2)


async def test_owner_change_after_ttl_expiry_bumps_the_epoch() -> None:
    # A decision may still hold the expired snapshot: expiry must not forget who owned the topic.
    cache, reader, clock = make(ttl=10)
    reader.set(T, (stats([1, 2]), A))
    s1 = await cache.get(T)
    clock.t += 11
    reader.set(T, (stats([1, 2]), B))
    s2 = await cache.get(T)
    assert cache.epoch(T) == 1
    assert not cache.is_current(s1)
    assert cache.is_current(s2)


async def test_owner_change_after_lru_eviction_bumps_the_epoch() -> None:
    cache, reader, _ = make(size=1)
    reader.set(T, (stats([1, 2]), A))
    reader.set(U, (stats([1]), A))
    s1 = await cache.get(T)
    await cache.get(U)  # evicts T
    reader.set(T, (stats([1, 2]), B))
    await cache.get(T)
    assert not cache.is_current(s1)


async def test_gone_after_existed_bumps_the_epoch() -> None:
    cache, reader, _ = make()
    reader.set(T, (stats([1, 2]), A))
    s1 = await cache.get(T)
    reader.set(T, None)
    g = await cache.get(T, 5)
    assert isinstance(g, TopicGone)
    assert cache.epoch(T) == 1 and g.epoch == 1
    assert not cache.is_current(s1)
    assert cache.is_current(g)
    # Still gone: no further bump.
    g2 = await cache.get(T)
    assert g2.epoch == 1 and cache.epoch(T) == 1
    # Re-created: the new incarnation is decided on a new epoch (docs/design.md: re-creation bumps it), so a
    # direct-route decision taken while the topic was gone is re-evaluated, and never mixed with s1.
    reader.set(T, (stats([20]), A))
    s3 = await cache.get(T)
    assert s3.epoch == 2 and cache.is_current(s3) and not cache.is_current(s1) and not cache.is_current(g)


async def test_gone_after_ttl_expiry_bumps_the_epoch() -> None:
    cache, reader, clock = make(ttl=10)
    reader.set(T, (stats([1, 2]), A))
    s1 = await cache.get(T)
    clock.t += 11
    reader.set(T, None)
    g = await cache.get(T)
    assert isinstance(g, TopicGone)
    assert not cache.is_current(s1)


async def test_explicit_bump_invalidates() -> None:
    cache, reader, _ = make()
    reader.set(T, (stats([1]), A))
    s1 = await cache.get(T)
    assert cache.bump(T, "test") == 1
    assert cache.bump(T) == 2
    assert not cache.is_current(s1)
    assert reader.forgotten.count(str(T)) == 2
    s2 = await cache.get(T)
    assert reader.count(T) == 2 and s2.epoch == 2


async def test_epochs_are_per_topic() -> None:
    cache, reader, _ = make()
    reader.set(T, (stats([1]), A))
    reader.set(U, (stats([1]), A))
    st = await cache.get(T)
    su = await cache.get(U)
    cache.bump(T)
    assert not cache.is_current(st)
    assert cache.is_current(su)
    assert reader.count(U) == 1 and await cache.get(U) is su


async def test_epoch_survives_lru_eviction() -> None:
    cache, reader, _ = make(size=1)
    reader.set(T, (stats([1]), A))
    reader.set(U, (stats([1]), A))
    s1 = await cache.get(T)
    cache.bump(T)
    await cache.get(U)  # T leaves the cache
    assert cache.epoch(T) == 1
    assert not cache.is_current(s1)


async def test_other_errors_propagate_without_caching() -> None:
    cache, reader, _ = make()
    reader.set(T, RuntimeError("boom"))
    with pytest.raises(RuntimeError):
        await cache.get(T)
    reader.set(T, (stats([1]), A))
    s = await cache.get(T)
    assert isinstance(s, LiveSet) and s.epoch == 0


async def test_is_current_for_topic_gone() -> None:
    cache, reader, _ = make()
    reader.set(T, None)
    g = await cache.get(T)
    assert cache.is_current(g)
    cache.bump(T)
    assert not cache.is_current(g)


# ---- partitioned topics named by their base name ------------------------------------------------------------------

P = [T.partition(i) for i in range(3)]


async def test_partitioned_base_name_unions_the_partitions() -> None:
    cache, reader, _ = make()
    reader.admin.partition_counts[str(T)] = 3
    reader.set(P[0], (stats([10, 11], cursors={"sub": 12}, schema=[2], compacted=13), A))
    reader.set(P[1], (stats([20], cursors={"sub": 21}, offloaded=frozenset({20})), B))
    reader.set(P[2], None)  # a partition missing: the others still count
    s = await cache.get(T)
    assert isinstance(s, LiveSet)
    assert s.topic == T
    assert s.ml_ledgers == {10, 11, 20}
    assert s.cursor_ledgers == {"x-partition-0/sub": 12, "x-partition-1/sub": 21}
    assert s.offloaded_ledgers == {20}
    assert s.all_ids == {2, 10, 11, 12, 13, 20, 21}  # the compacted ledger of a partition is live too
    assert s.max_id == 21
    assert s.partitions == (P[0], P[1])
    assert set(s.owner_url.split(",")) == {A, B}
    # The base name is read first (it has no managed ledger: "not found", as Pulsar answers), and only then
    # is `partitions` asked: a topic that is not partitioned costs one admin call per read, not two.
    assert [t for t in reader.fetches] == [str(T)] + [str(p) for p in P]
    # And the union is cached under the base name.
    assert await cache.get(T, 21) is s
    assert reader.admin.calls == [str(T)]


async def test_a_partition_name_is_not_asked_for_partitions() -> None:
    cache, reader, _ = make()
    reader.set(P[1], (stats([5]), A))
    s = await cache.get(P[1])
    assert isinstance(s, LiveSet) and s.topic == P[1]
    assert reader.admin.calls == []


async def test_a_topic_that_is_not_partitioned_is_not_asked_for_partitions() -> None:
    cache, reader, _ = make()
    reader.set(T, (stats([5]), A))
    s = await cache.get(T)
    assert isinstance(s, LiveSet) and s.ml_ledgers == {5}
    assert reader.admin.calls == []  # its managed ledger answered: no `partitions` call


async def test_a_gone_topic_is_asked_for_partitions_before_it_counts_as_gone() -> None:
    cache, reader, _ = make()
    reader.set(T, None)
    g = await cache.get(T)
    assert isinstance(g, TopicGone)
    assert reader.admin.calls == [str(T)]


async def test_partitioned_base_with_every_partition_gone() -> None:
    cache, reader, _ = make()
    reader.admin.partition_counts[str(T)] = 2
    reader.set(P[0], (stats([1]), A))
    reader.set(P[1], (stats([2]), A))
    s1 = await cache.get(T)
    reader.set(P[0], None)
    reader.set(P[1], None)
    g = await cache.get(T, 50)
    assert isinstance(g, TopicGone) and g.topic == T
    assert not cache.is_current(s1)


async def test_not_owner_on_a_partition_invalidates_the_base_snapshot() -> None:
    cache, reader, _ = make()
    reader.admin.partition_counts[str(T)] = 2
    reader.set(P[0], (stats([1]), A))
    reader.set(P[1], (stats([2]), A))
    s1 = await cache.get(T)
    reader.set(P[1], NotOwner(B))
    with pytest.raises(NotOwner):
        await cache.get(T, 50)
    assert not cache.is_current(s1)
    reader.set(P[1], (stats([2]), B))
    await cache.get(T)
    assert reader.count(P[0]) == 3  # not served from the invalidated entry


async def test_owner_change_of_a_partition_bumps_the_base_epoch() -> None:
    cache, reader, _ = make()
    reader.admin.partition_counts[str(T)] = 2
    reader.set(P[0], (stats([1]), A))
    reader.set(P[1], (stats([2]), B))
    s1 = await cache.get(T)
    reader.set(P[0], (stats([1]), B))
    reader.set(P[1], (stats([2, 3]), A))
    await cache.get(T, 3)
    assert not cache.is_current(s1)


# ---- "gone" needs both proofs (defect: a 404 alone was trusted, or a lookup 404 was never believed) -------------


async def test_gone_needs_the_metadata_store_to_agree() -> None:
    store = FakeMetadataStore({T.managed_ledger_name})
    cache, reader, _ = make(store=store)
    reader.set(T, None)
    with pytest.raises(GoneUnconfirmed, match="managed ledger still exists"):
        await cache.get(T)
    assert store.asked == [T.managed_ledger_name]
    store.managed_ledgers.clear()
    assert isinstance(await cache.get(T), TopicGone)


async def test_gone_without_a_metadata_store_is_never_believed() -> None:
    reader = FakeReader()
    cache = SnapshotCache(reader, ttl_s=60, max_size=4, metadata_store=None)  # type: ignore[arg-type]
    reader.set(T, None)
    with pytest.raises(GoneUnconfirmed, match="no metadata store"):
        await cache.get(T)


# ---- epoch discipline: taken before the read, single flight, bounded state -------------------------------------


class GatedReader(FakeReader):
    """A reader whose fetches wait for the test to release them: what happens while a read is in flight."""

    def __init__(self) -> None:
        super().__init__()
        self.gate = asyncio.Event()

    async def started(self, n: int = 1) -> None:
        for _ in range(1000):
            if len(self.fetches) >= n:
                return
            await asyncio.sleep(0)
        raise AssertionError("the fetch never started")

    async def fetch(self, topic: TopicName) -> LiveSet | None:
        self.fetches.append(str(topic))
        a = self.answers.get(str(topic))  # the broker's state when the read started
        await self.gate.wait()
        if isinstance(a, Exception):
            raise a
        return None if a is None else LiveSet.from_internal_stats(topic, a[0], a[1], -1, 0.0)


def gated() -> tuple[SnapshotCache, GatedReader]:
    reader = GatedReader()
    cache = SnapshotCache(reader, ttl_s=60, max_size=4, metadata_store=FakeMetadataStore())  # type: ignore[arg-type]
    return cache, reader


async def test_a_bump_during_the_read_makes_its_snapshot_stale_and_uncached() -> None:
    cache, reader = gated()
    reader.set(T, (stats([1, 2]), A))
    pending = asyncio.ensure_future(cache.get(T, 2))
    await reader.started()
    cache.bump(T, "307 seen by another decision while this read was in flight")
    reader.gate.set()
    snap = await pending
    assert not cache.is_current(snap)  # PIP-269: the read in flight must not absorb the bump
    again = await cache.get(T, 2)
    assert reader.count(T) == 2  # the stale read was not cached
    assert cache.is_current(again)


@pytest.mark.parametrize("ids", [(1, 2, 3), (7, 8, 9)], ids=["listed-ids", "newer-ids-of-one-batch"])
async def test_concurrent_reads_of_one_topic_share_one_fetch(ids: tuple[int, ...]) -> None:
    """Newer ids too, in the daemon: its messages of one batch were all received before the batch's instant,
    and a read that started after it is as fresh as each message's own re-read would be."""
    cache, reader = gated()
    reader.set(T, (stats([1, 2, 3]), A))
    since = asyncio.get_running_loop().time()
    calls = [asyncio.ensure_future(cache.get(T, i, since=since)) for i in ids * 5]
    await reader.started()
    for _ in range(5):
        await asyncio.sleep(0)
    reader.gate.set()
    snaps = await asyncio.gather(*calls)
    assert reader.count(T) == 1
    assert all(s is snaps[0] for s in snaps)
    assert await cache.get(T, 10, since=since) is snaps[0]  # the cached read started after this batch too
    assert reader.count(T) == 1


@pytest.mark.parametrize("in_a_batch", [False, True], ids=["outside-the-daemon", "batch-received-meanwhile"])
async def test_a_joined_read_that_does_not_cover_the_ledger_is_read_again(in_a_batch: bool) -> None:
    cache, reader = gated()
    reader.set(T, (stats([1, 2]), A))
    first = asyncio.ensure_future(cache.get(T, 2))
    await reader.started()
    await asyncio.sleep(0.01)
    # The daemon's next batch arrives while that read is in flight: the read started before it, so it
    # cannot answer for a newer id of that batch either.
    since = asyncio.get_running_loop().time() if in_a_batch else None
    newer = asyncio.ensure_future(cache.get(T, 9, since=since))  # created after the shared read started
    for _ in range(5):
        await asyncio.sleep(0)
    reader.set(T, (stats([1, 2, 9]), A))
    reader.gate.set()
    await first
    assert (await newer).covers(9)
    assert reader.count(T) == 2
    again = await cache.get(T, 10, since=since)
    if in_a_batch:
        # The read made for 9 started after the batch was received: it answers for 10 too.
        assert again is await newer and reader.count(T) == 2
    else:
        assert reader.count(T) == 3  # every newer id re-reads its topic


async def test_per_topic_state_is_bounded_and_eviction_never_revives_an_old_epoch() -> None:
    cache, reader, _ = make(size=2, max_topics=4)
    topics = [TopicName.parse(f"persistent://t/ns/x{i}") for i in range(50)]
    for t in topics:
        reader.set(t, (stats([1]), A))
    first = await cache.get(topics[0])
    cache.bump(topics[0], "owner moved")
    old = await cache.get(topics[0])
    assert cache.is_current(old)
    for t in topics[1:]:
        await cache.get(t)
    assert cache.topic_count() <= 4 and cache.snapshot_count() <= 2
    # topics[0]'s state was evicted: snapshots taken before are never current again.
    assert not cache.is_current(old) and not cache.is_current(first)


# ---- the admin's "not found" reused, the metadata store asked per message ------------------------------------------


async def test_admin_not_found_is_reused_but_the_metadata_store_is_asked_every_time() -> None:
    store = FakeMetadataStore()
    cache, reader, clock = make(ttl=60, store=store, not_found_ttl_s=5)
    reader.set(T, None)
    for _ in range(3):
        assert isinstance(await cache.get(T, 7), TopicGone)
    assert reader.count(T) == 1  # one admin read
    assert len(store.asked) == 3  # one metadata-store proof per message
    clock.t += 6
    assert isinstance(await cache.get(T, 7), TopicGone)
    assert reader.count(T) == 2  # expired: the admin is asked again


async def test_a_recreated_topic_never_looks_gone_while_the_admin_answer_is_reused() -> None:
    store = FakeMetadataStore()
    cache, reader, _ = make(ttl=60, store=store, not_found_ttl_s=5)
    reader.set(T, None)
    assert isinstance(await cache.get(T, 7), TopicGone)
    # Re-created: the broker wrote its managed-ledger znode; the admin answer is still "fresh".
    store.managed_ledgers.add(T.managed_ledger_name)
    reader.set(T, (stats([20]), A))
    with pytest.raises(GoneUnconfirmed):
        await cache.get(T, 7)
    # The reused answer was dropped with that: the next message asks the admin, and sees the topic.
    snap = await cache.get(T, 7)
    assert isinstance(snap, LiveSet) and reader.count(T) == 2


async def test_without_a_not_found_ttl_the_admin_is_asked_every_time() -> None:
    cache, reader, _ = make()
    reader.set(T, None)
    await cache.get(T)
    await cache.get(T)
    assert reader.count(T) == 2


# ---- one entry per topic: a snapshot never outlives its epoch (defect: served with an evicted epoch) ------------


async def test_a_topic_whose_state_is_evicted_loses_its_snapshot_too() -> None:
    cache, reader, _ = make(size=2, max_topics=2)
    for t in (T, U, V):
        reader.set(t, (stats([1]), A))
    await cache.get(T)
    await cache.get(U)
    await cache.get(T)  # a cache hit: T's snapshot is the most recently used one
    await cache.get(V)  # one topic too many: the least recently used entry goes, snapshot and epoch
    snap = await cache.get(T)
    # Served, it must be current: a stale epoch makes every delete re-evaluated, then transient.
    assert cache.is_current(snap)
    assert cache.topic_count() <= 2 and cache.snapshot_count() <= 2


async def test_every_cached_snapshot_is_current_under_eviction_churn() -> None:
    cache, reader, _ = make(size=3, max_topics=4)
    topics = [TopicName.parse(f"persistent://t/ns/c{i}") for i in range(6)]
    for t in topics:
        reader.set(t, (stats([1]), A))
    rnd = random.Random(0)
    for i in range(300):
        t = topics[rnd.randrange(len(topics))]
        snap = await cache.get(t)
        assert cache.is_current(snap), (i, t)


# ---- "not found" the metadata store contradicts bumps the epoch (defect: decisions in flight kept theirs) --------


async def test_an_unconfirmed_gone_bumps_the_epoch_once() -> None:
    store = FakeMetadataStore()
    cache, reader, _ = make(store=store)
    reader.set(T, (stats([1, 2]), A))
    s1 = await cache.get(T)
    # The admin API loses the topic, the metadata store still has its managed ledger.
    store.managed_ledgers.add(T.managed_ledger_name)
    reader.set(T, None)
    with pytest.raises(GoneUnconfirmed):
        await cache.get(T, 5)
    assert not cache.is_current(s1)  # a decision in flight on s1 is re-taken
    epoch = cache.epoch(T)
    with pytest.raises(GoneUnconfirmed):
        await cache.get(T, 5)
    assert cache.epoch(T) == epoch  # still unconfirmed: nothing new seen, no churn
    reader.set(T, (stats([1, 2, 3]), A))
    s2 = await cache.get(T, 3)  # back: a new observation, a new epoch
    assert cache.epoch(T) > epoch and cache.is_current(s2)


async def test_a_gone_segment_is_never_asked_for_partitions_and_needs_the_stores_half_of_gone() -> None:
    # A Pulsar 5.0 scalable topic's segment has no admin REST path: its base is never a partitioned topic.
    seg = TopicName.parse("segment://t/ns/x/0000-7fff-0")
    cache, reader, _ = make()
    assert isinstance(await cache.get(seg, 5), TopicGone)
    assert reader.admin.calls == []
    cache, reader, _ = make(store=FakeMetadataStore({seg.managed_ledger_name}))
    with pytest.raises(GoneUnconfirmed):
        await cache.get(seg, 5)
