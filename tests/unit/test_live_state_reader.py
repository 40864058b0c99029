"""Where a topic's live state is read (``worker.broker.live_state_reader``), on scripted fakes of the admin
API, the brokers' lists and the metadata store: the routing rules only. The real ones are exercised on the
stack (tests/integration/test_read_only_scan.py, test_worker_decisions.py)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from tests.unit.fakes import internal_stats
from worker.broker.admin import NotOwner, TopicNotFound
from worker.broker.live_state_reader import LiveStateReader, NotLoadedUnreadable, SegmentUnsettled
from worker.broker.loaded_topics import Serving
from worker.core.gone_proof import GoneUnconfirmed
from worker.core.live_set import STORED, ledger_hold
from worker.core.metadata_stores import StoredTopic
from worker.errors import BackendError
from worker.formats.managed_ledger_metadata import LedgerInfo, ManagedCursorInfo, ManagedLedgerInfo
from worker.formats.message import LedgerComponent
from worker.formats.topic_name import TopicName

T = TopicName.parse("persistent://t/ns/x")
A = "http://broker-a:8080"
B = "http://broker-b:8080"


class Admin:
    """internalStats and the namespace's topic list, scripted; every call recorded."""

    def __init__(self, stats: Any = None, listing: Any = ()) -> None:
        self.stats = stats
        self.listing = listing
        self.calls: list[str] = []

    async def internal_stats(self, topic: TopicName, *, base: str | None = None) -> dict[str, Any]:
        self.calls.append(f"internal_stats {base}")
        if isinstance(self.stats, Exception):
            raise self.stats
        return dict(self.stats)

    async def list_topics(self, namespace: str, *, include_system: bool = False) -> list[str]:
        self.calls.append(f"list {namespace}")
        if isinstance(self.listing, Exception):
            raise self.listing
        return list(self.listing)

    async def lookup(self, topic: TopicName) -> str:
        self.calls.append("lookup")
        return A

    async def scalable_segments(self, segment: TopicName) -> frozenset[str]:
        self.calls.append(f"layout {segment}")
        if isinstance(self.listing, Exception):
            raise self.listing
        return frozenset(self.listing)


class Loaded:
    def __init__(self, serving: Serving | None) -> None:
        self.where = serving
        self.forgotten: list[TopicName] = []

    async def serving(self, topic: TopicName) -> Serving | None:
        return self.where

    def forget(self, topic: TopicName) -> None:
        self.forgotten.append(topic)
        self.where = None


class Metadata:
    def __init__(self, stored: StoredTopic | None) -> None:
        self.stored = stored
        self.reads = 0

    async def stored_topic(self, topic: TopicName) -> StoredTopic | None:
        self.reads += 1
        return self.stored


def stored(ids: list[int], cursor: int = -1) -> StoredTopic:
    ml = ManagedLedgerInfo(tuple(LedgerInfo(i) for i in ids))
    return StoredTopic(T, 3, ml, {"sub": ManagedCursorInfo(cursor)}, frozenset())


def reader(admin: Admin, loaded: Loaded | None, metadata: Metadata | None, **kw: Any) -> LiveStateReader:
    return LiveStateReader(admin, metadata=metadata, loaded=loaded, **kw)  # type: ignore[arg-type]


STATS = {"ledgers": [{"ledgerId": 5}, {"ledgerId": 6}], "cursors": {}}


async def test_a_loaded_topic_is_asked_of_the_broker_that_lists_it() -> None:
    admin, meta = Admin(STATS), Metadata(stored([1]))
    got = await reader(admin, Loaded(Serving(A, "t/ns", "0x0_0x1")), meta).fetch(T)
    assert got is not None and got.owner_url == A and got.ml_ledgers == {5, 6}
    assert admin.calls == [f"internal_stats {A}"] and meta.reads == 0


async def test_a_topic_no_broker_lists_is_read_from_the_metadata_store_and_nothing_is_asked() -> None:
    admin, meta = Admin(STATS), Metadata(stored([1, 2], cursor=9))
    got = await reader(admin, Loaded(None), meta).fetch(T)
    assert got is not None and got.owner_url == STORED and got.ml_ledgers == {1, 2} and got.cursor_ledgers == {"sub": 9}
    assert admin.calls == []  # no internalStats, no lookup: nothing is loaded, no bundle assigned


async def test_a_listed_topic_deleted_since_falls_back_to_its_records() -> None:
    admin, loaded, meta = Admin(TopicNotFound("Topic not found")), Loaded(Serving(A, "t/ns", "b")), Metadata(None)
    assert await reader(admin, loaded, meta).fetch(T) is None
    assert loaded.forgotten == [T] and meta.reads == 1 and admin.calls[-1] == "list t/ns"


async def test_a_redirect_from_the_listing_broker_forgets_it_and_is_raised() -> None:
    admin, loaded = Admin(NotOwner("http://broker-b:8080")), Loaded(Serving(A, "t/ns", "b"))
    with pytest.raises(NotOwner):
        await reader(admin, loaded, Metadata(stored([1]))).fetch(T)
    assert loaded.forgotten == [T]


async def test_no_managed_ledger_and_not_listed_is_the_admin_apis_not_found() -> None:
    admin = Admin(listing=["persistent://t/ns/other"])
    assert await reader(admin, Loaded(None), Metadata(None)).fetch(T) is None
    admin = Admin(listing=TopicNotFound("Namespace does not exist"))
    assert await reader(admin, Loaded(None), Metadata(None)).fetch(T) is None


async def test_no_managed_ledger_but_listed_is_not_proven_gone() -> None:
    with pytest.raises(GoneUnconfirmed, match="the admin API lists it"):
        await reader(Admin(listing=[str(T)]), Loaded(None), Metadata(None)).fetch(T)


async def test_a_listing_that_fails_is_a_failure_never_an_absence() -> None:
    admin = Admin(listing=BackendError("admin", "401 Unauthorized", 401))
    with pytest.raises(BackendError, match="Unauthorized"):
        await reader(admin, Loaded(None), Metadata(None)).fetch(T)


async def test_the_listing_is_kept_for_its_ttl() -> None:
    clock = [0.0]
    admin = Admin(listing=[])
    r = reader(admin, Loaded(None), Metadata(None), listing_ttl_s=60, clock=lambda: clock[0])
    for _ in range(3):
        assert await r.fetch(T) is None
    assert admin.calls.count("list t/ns") == 1
    clock[0] = 61
    await r.fetch(T)
    assert admin.calls.count("list t/ns") == 2


async def test_without_a_metadata_store_a_topic_no_broker_lists_is_never_loaded() -> None:
    admin = Admin(STATS)
    with pytest.raises(NotLoadedUnreadable, match="without loading it"):
        await reader(admin, Loaded(None), None).fetch(T)
    assert admin.calls == []
    # Only a caller that may load it (purge-topic, which deletes the topic) asks the owner.
    got = await reader(admin, Loaded(None), None, may_load=True).fetch(T)
    assert got is not None and admin.calls == ["lookup", f"internal_stats {A}"]


# ---- Pulsar 5.0 scalable topics' segments: no internalStats exists, the metadata store is always read ----------

SEG = TopicName.parse("segment://t/ns/x/0000-7fff-0")


def stored_segment(ids: list[int], cursors: dict[str, int], schema: frozenset[int] = frozenset()) -> StoredTopic:
    ml = ManagedLedgerInfo(tuple(LedgerInfo(i) for i in ids))
    return StoredTopic(SEG, 1, ml, {n: ManagedCursorInfo(c) for n, c in cursors.items()}, schema)


async def test_a_segments_live_set_is_read_from_the_metadata_store_even_when_a_broker_lists_it() -> None:
    admin, meta = Admin(STATS), Metadata(stored_segment([20, 21], {"sub": 22}, frozenset({4})))
    got = await reader(admin, Loaded(Serving(A, "t/ns", "b")), meta).fetch(SEG)
    assert got is not None and got.all_ids == {20, 21, 22, 4} and got.owner_url == STORED
    assert admin.calls == []  # no internalStats, lookup or layout


async def test_a_segment_that_compacts_holds_its_compacted_ledgers() -> None:
    # The compacted ledger is named in the __compaction cursor's ledger; its znode names none here: the floor
    # then holds every compacted ledger.
    got = await reader(Admin(), Loaded(None), Metadata(stored_segment([10], {"__compaction": 11}))).fetch(SEG)
    assert got is not None
    assert ledger_hold(got, LedgerComponent.COMPACTED_LEDGER, 5) is not None
    assert ledger_hold(got, LedgerComponent.MANAGED_LEDGER, 5) is None


async def test_a_segment_is_gone_when_its_scalable_topic_does_not_list_it_and_it_has_no_managed_ledger() -> None:
    admin = Admin(listing=["0000-7fff-1"])
    assert await reader(admin, Loaded(None), Metadata(None)).fetch(SEG) is None
    assert admin.calls == [f"layout {SEG}"]
    admin = Admin(listing=TopicNotFound("Scalable topic not found"))
    assert await reader(admin, Loaded(None), Metadata(None)).fetch(SEG) is None


async def test_a_listed_segment_without_a_managed_ledger_is_neither_live_nor_gone() -> None:
    with pytest.raises(SegmentUnsettled):
        await reader(Admin(listing=["0000-7fff-0"]), Loaded(None), Metadata(None)).fetch(SEG)


async def test_a_segment_the_store_still_has_is_live_whatever_its_scalable_topic_says() -> None:
    # Retention prunes a sealed segment from its scalable topic before its managed ledger is deleted: a broker
    # dying in between leaves the managed ledger, whose ledgers are still its own, not orphans.
    admin = Admin(listing=[])
    got = await reader(admin, Loaded(None), Metadata(stored_segment([20], {}))).fetch(SEG)
    assert got is not None and got.references(20) and admin.calls == []


async def test_a_segment_needs_a_metadata_store() -> None:
    with pytest.raises(BackendError, match=r"zookeeper\.metadata_store_url"):
        await reader(Admin(), Loaded(None), None, may_load=True).fetch(SEG)


# ---- LiveStateReader's lookup path (purge-topic without a metadata store), on a fake admin ----------------


class ScriptedAdmin:
    def __init__(self, lookups: list[str], stats_answers: list[Any]) -> None:
        self.lookups = list(lookups)
        self.stats_answers = list(stats_answers)
        self.lookup_calls = 0
        self.stats_bases: list[str] = []

    async def lookup(self, topic: TopicName) -> str:
        self.lookup_calls += 1
        return self.lookups.pop(0)

    async def internal_stats(self, topic: TopicName, base: str) -> dict[str, Any]:
        self.stats_bases.append(base)
        a = self.stats_answers.pop(0)
        if isinstance(a, Exception):
            raise a
        return a  # type: ignore[no-any-return]


def reader_on(admin: ScriptedAdmin) -> tuple[LiveStateReader, list[tuple[str, str]]]:
    seen: list[tuple[str, str]] = []
    on: Callable[[str, str], None] = lambda e, o: seen.append((e, o))  # noqa: E731
    # The lookup + internalStats path: what a reader may do only when it may load the topic.
    return LiveStateReader(admin, on, may_load=True), seen  # type: ignore[arg-type]


async def test_reader_caches_the_owner() -> None:
    admin = ScriptedAdmin([A], [internal_stats([1]), internal_stats([1, 2])])
    r, _ = reader_on(admin)
    assert (await r.fetch(T)).owner_url == A  # type: ignore[union-attr]
    assert (await r.fetch(T)).owner_url == A  # type: ignore[union-attr]
    assert admin.lookup_calls == 1
    assert admin.stats_bases == [A, A]


async def test_reader_follows_one_redirect_with_a_new_lookup() -> None:
    admin = ScriptedAdmin([A, B], [NotOwner(B), internal_stats([1])])
    r, seen = reader_on(admin)
    got = await r.fetch(T)
    assert got is not None and got.owner_url == B
    assert admin.stats_bases == [A, B]
    assert ("internal_stats", "redirect") in seen


async def test_reader_raises_after_a_second_redirect() -> None:
    admin = ScriptedAdmin([A, B, A], [NotOwner(B), NotOwner(A), internal_stats([1])])
    r, _ = reader_on(admin)
    with pytest.raises(NotOwner):
        await r.fetch(T)
    await r.fetch(T)  # the owner was forgotten: looked up again
    assert admin.lookup_calls == 3


async def test_reader_topic_not_found_is_none() -> None:
    admin = ScriptedAdmin([A], [TopicNotFound()])
    r, seen = reader_on(admin)
    assert await r.fetch(T) is None
    assert seen[-1] == ("internal_stats", "not_found")


async def test_reader_forgets_the_owner_on_error() -> None:
    admin = ScriptedAdmin([A, B], [RuntimeError("down"), internal_stats([1])])
    r, _ = reader_on(admin)
    with pytest.raises(RuntimeError):
        await r.fetch(T)
    got = await r.fetch(T)
    assert got is not None and got.owner_url == B


async def test_reader_lookup_not_found_is_none() -> None:
    """A lookup that Pulsar answers "not found" (no namespace; no topic where auto-creation is off) is the
    admin API's "does not exist": the reader says so, and the snapshot cache asks the metadata store."""

    class NoLookup(ScriptedAdmin):
        async def lookup(self, topic: TopicName) -> str:
            raise TopicNotFound("Namespace not found")

    r, seen = reader_on(NoLookup([], []))
    assert await r.fetch(T) is None
    assert seen == [("lookup", "not_found")]


async def test_owner_cache_is_bounded() -> None:
    admin = ScriptedAdmin([A] * 20, [internal_stats([1])] * 20)
    r = LiveStateReader(admin, max_owners=3, may_load=True)  # type: ignore[arg-type]
    for i in range(10):
        await r.fetch(TopicName.parse(f"persistent://t/ns/o{i}"))
    assert len(r._owners) == 3
