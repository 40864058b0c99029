"""The live set parsed from ``internalStats`` and the in-use rule (``worker.core.live_set``).

The ``internalStats`` shapes are Pulsar 4.0.8's, as read on the local stack: after a compaction the
``__compaction`` cursor carries ``properties: {"CompactedTopicLedger": <id>}`` next to
``compactedLedger.ledgerId``; after clearing that cursor's backlog and an unload, the cursor is there with
``properties: {}`` and ``compactedLedger.ledgerId`` is -1 (tests/integration/test_compacted_ledger.py).
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.unit.fakes import BUCKET_T, internal_stats
from worker.core.live_set import STORED, Hold, LiveSet, UnreadableLiveState, in_use, ledger_hold
from worker.formats.managed_ledger_metadata import LedgerInfo, ManagedCursorInfo, ManagedLedgerInfo, OffloadInfo
from worker.formats.message import LedgerComponent, LedgerType, PendingDeleteLedgerInfo
from worker.formats.topic_name import TopicName

T = TopicName.parse("persistent://t/ns/x")
A = "http://broker-a:8080"
NO_CURSOR = object()


def stats(
    ledgers: list[int] = (),  # type: ignore[assignment]
    *,
    compacted: int = -1,
    persisted: Any = NO_CURSOR,
) -> dict[str, Any]:
    """``persisted``: NO_CURSOR (no ``__compaction`` cursor), None (a cursor without the property), an id."""
    cursors: dict[str, Any] = {"sub": {"cursorLedger": 50, "properties": {}}}
    if persisted is not NO_CURSOR:
        props = {} if persisted is None else {"CompactedTopicLedger": persisted}
        cursors["__compaction"] = {"cursorLedger": -1, "state": "NoLedger", "properties": props}
    return {
        "ledgers": [{"ledgerId": i, "entries": 5, "size": 100, "offloaded": False} for i in ledgers],
        "cursors": cursors,
        "schemaLedgers": [],
        "compactedLedger": {"ledgerId": compacted, "entries": -1, "size": -1, "offloaded": False},
    }


def parse(st: dict[str, Any], topic: TopicName = T) -> LiveSet:
    return LiveSet.from_internal_stats(topic, st, A, 0, 0.0)


def compacted_info(ledger_id: int) -> PendingDeleteLedgerInfo:
    return PendingDeleteLedgerInfo(str(T), LedgerComponent.COMPACTED_LEDGER, LedgerType.LEDGER, ledger_id)


def test_the_compacted_ledger_is_read_from_the_compaction_cursor_when_internal_stats_gives_minus_one() -> None:
    s = parse(stats([40, 41], compacted=-1, persisted=30))
    assert s.compacted_ledger == 30
    assert s.references(30) and 30 in s.all_ids
    assert in_use(s, compacted_info(30))
    assert ledger_hold(s, LedgerComponent.COMPACTED_LEDGER, 30) is Hold.REFERENCED
    # An older compacted ledger is a leftover of an earlier compaction: unreferenced.
    assert ledger_hold(s, LedgerComponent.COMPACTED_LEDGER, 20) is None
    assert not in_use(s, compacted_info(20))


def test_a_compaction_cursor_naming_no_compacted_ledger_is_no_proof() -> None:
    s = parse(stats([40, 41], compacted=-1, persisted=None))
    assert s.compacted_ledger is None
    for lid in (5, 35, 45):
        hold = ledger_hold(s, LedgerComponent.COMPACTED_LEDGER, lid)
        assert hold is Hold.COMPACTION_UNNAMED and not hold.proven
        assert in_use(s, compacted_info(lid))  # the worker keeps it
    # Only compacted ledgers: the topic's other ledgers are judged as before.
    assert ledger_hold(s, LedgerComponent.MANAGED_LEDGER, 35) is None


def test_a_compacted_ledger_newer_than_the_one_named_may_be_uncommitted() -> None:
    s = parse(stats([40, 41], compacted=30, persisted=30))
    hold = ledger_hold(s, LedgerComponent.COMPACTED_LEDGER, 42)
    assert hold is Hold.COMPACTION_UNCOMMITTED and not hold.proven
    assert ledger_hold(s, LedgerComponent.COMPACTED_LEDGER, 29) is None


def test_loaded_and_persisted_compacted_ledgers_both_count() -> None:
    # The broker switching compacted ledgers: the cursor names the new one, the old is still loaded.
    s = parse(stats([40], compacted=30, persisted=35))
    assert s.compacted_ledger == 35
    assert s.compacted_ledgers == {30, 35}
    assert s.references(30) and s.references(35)
    assert ledger_hold(s, LedgerComponent.COMPACTED_LEDGER, 33) is None  # older than the newest named


def test_without_a_compaction_cursor_an_unnamed_compacted_ledger_is_unreferenced() -> None:
    s = parse(stats([40], compacted=-1))
    assert s.compacted_ledger is None and s.compaction_floor is None
    assert ledger_hold(s, LedgerComponent.COMPACTED_LEDGER, 45) is None
    # The loaded context alone (no cursor in these stats) still counts.
    assert parse(stats([40], compacted=30)).references(30)


@pytest.mark.parametrize("props", [None, {}, {"CompactedTopicLedger": -1}, {"CompactedTopicLedger": None}, {"x": 3}])
def test_odd_compaction_cursor_properties_name_nothing(props: Any) -> None:
    st = stats([40])
    st["cursors"]["__compaction"] = {"cursorLedger": -1, "properties": props}
    s = parse(st)
    assert s.compacted_ledger is None and s.compaction_floor == -1


def test_union_keeps_every_partitions_compacted_ledgers_and_the_lowest_floor() -> None:
    p0, p1 = T.partition(0), T.partition(1)
    parts = [parse(stats([40], compacted=30, persisted=30), p0), parse(stats([41], persisted=None), p1)]
    u = LiveSet.union(T, parts, 0, 0.0)
    assert u.compacted_ledgers == {30}
    assert u.schema_ledgers == frozenset()  # compacted ledgers are not schema ledgers
    assert u.references(30)
    assert ledger_hold(u, LedgerComponent.COMPACTED_LEDGER, 10) is Hold.COMPACTION_UNNAMED
    no_compaction = LiveSet.union(T, [parse(stats([40], compacted=30), p0)], 0, 0.0)
    assert no_compaction.compaction_floor is None and no_compaction.references(30)


def test_any_referenced_id_is_in_use_whatever_the_component() -> None:
    s = parse(stats([40, 41], persisted=30))
    for component in LedgerComponent:
        assert ledger_hold(s, component, 41) is Hold.REFERENCED
        assert ledger_hold(s, component, 50) is Hold.REFERENCED  # the cursor "sub"'s ledger


@pytest.mark.parametrize("bad", ["not-a-number", True, 1.5, [], {}])
@pytest.mark.parametrize("where", ["ledgers", "cursors", "schemaLedgers", "compactedLedger", "compaction property"])
def test_an_unreadable_ledger_id_makes_the_live_state_unknown_not_smaller(bad: object, where: str) -> None:
    """Dropping an entry internalStats names in an odd form would make a listed ledger look unreferenced."""
    stats: dict[str, Any] = {"ledgers": [{"ledgerId": 5}], "cursors": {}, "schemaLedgers": []}
    match where:
        case "ledgers":
            stats["ledgers"].append({"ledgerId": bad})
        case "cursors":
            stats["cursors"] = {"sub": {"cursorLedger": bad}}
        case "schemaLedgers":
            stats["schemaLedgers"] = [{"ledgerId": bad}]
        case "compactedLedger":
            stats["compactedLedger"] = {"ledgerId": bad}
        case "compaction property":
            stats["cursors"] = {"__compaction": {"cursorLedger": 7, "properties": {"CompactedTopicLedger": bad}}}
    with pytest.raises(UnreadableLiveState):
        LiveSet.from_internal_stats(TopicName.parse("persistent://t/n/x"), stats, "http://o", 0, 0.0)


# ---- the live set of a topic no broker has loaded, from its records in the metadata store -----------------------


def stored(
    ledgers: list[LedgerInfo],
    cursors: dict[str, ManagedCursorInfo] | None = None,
    schema: frozenset[int] = frozenset(),
) -> LiveSet:
    return LiveSet.from_stored(T, ManagedLedgerInfo(tuple(ledgers)), cursors or {}, schema, 0, 0.0)


def test_from_stored_names_what_internal_stats_would() -> None:
    offloaded = LedgerInfo(41, offload=OffloadInfo(uid_msb=1, uid_lsb=2, complete=True))
    attempt = LedgerInfo(42, offload=OffloadInfo(uid_msb=3, uid_lsb=4, complete=False))
    s = stored(
        [LedgerInfo(40), offloaded, attempt, LedgerInfo(43)],
        {"sub": ManagedCursorInfo(50), "closed": ManagedCursorInfo(-1), "__compaction": ManagedCursorInfo(-1)},
        frozenset({7, 8}),
    )
    assert s.stored and s.owner_url == STORED
    assert s.ml_ledgers == {40, 41, 42, 43} and s.offloaded_ledgers == {41}
    assert s.cursor_ledgers == {"sub": 50}
    assert s.schema_ledgers == {7, 8}
    # Every cursor counts as open: a broker that loaded the topic may hold a bucket of any of them.
    assert s.cursor_names == {"sub", "closed", "__compaction"}
    assert s.all_ids == {40, 41, 42, 43, 50, 7, 8} and s.max_id == 50


def test_from_stored_reads_the_compacted_ledger_from_the_compaction_cursors_position() -> None:
    cursor = ManagedCursorInfo(-1, 39, 4, position_properties={"CompactedTopicLedger": 30})
    s = stored([LedgerInfo(40)], {"__compaction": cursor})
    assert s.compacted_ledger == 30 and s.compaction_floor == 30
    assert ledger_hold(s, LedgerComponent.COMPACTED_LEDGER, 30) is Hold.REFERENCED
    assert ledger_hold(s, LedgerComponent.COMPACTED_LEDGER, 20) is None  # an earlier compaction's
    # Newer: a compaction whose acknowledgement is only in the cursor ledger's entries, or still coming.
    assert ledger_hold(s, LedgerComponent.COMPACTED_LEDGER, 31) is Hold.COMPACTION_UNCOMMITTED


@pytest.mark.parametrize("props", [{}, {"CompactedTopicLedger": -1}, {"other": 30}])
def test_from_stored_a_compaction_cursor_naming_nothing_holds_every_compacted_ledger(props: dict[str, int]) -> None:
    s = stored([LedgerInfo(40)], {"__compaction": ManagedCursorInfo(60, position_properties=props)})
    assert s.compacted_ledger is None and s.compaction_floor == -1
    assert ledger_hold(s, LedgerComponent.COMPACTED_LEDGER, 5) is Hold.COMPACTION_UNNAMED


def test_from_stored_without_a_compaction_cursor_holds_no_compacted_ledger() -> None:
    s = stored([LedgerInfo(40)], {"sub": ManagedCursorInfo(-1)})
    assert s.compaction_floor is None
    assert ledger_hold(s, LedgerComponent.COMPACTED_LEDGER, 45) is None
    assert ledger_hold(s, LedgerComponent.MANAGED_LEDGER, 39) is None
    assert ledger_hold(s, LedgerComponent.MANAGED_CURSOR, 40) is Hold.REFERENCED  # whatever role it is given


# ---- a loaded topic's internalStats: its ledgers, cursors, schema and compacted ledger ----------------------------


def test_from_internal_stats() -> None:
    s = LiveSet.from_internal_stats(
        T,
        internal_stats(
            [10, 11, 12], cursors={"sub": 13, "idle": -1}, schema=[3], compacted=9, offloaded=frozenset({10})
        ),
        A,
        epoch=4,
        now=1.0,
    )
    assert s.ml_ledgers == {10, 11, 12}
    assert s.cursor_ledgers == {"sub": 13}  # a cursor without a ledger (-1) holds nothing
    assert s.schema_ledgers == {3}
    assert s.compacted_ledger == 9
    assert s.offloaded_ledgers == {10}
    assert s.all_ids == {3, 9, 10, 11, 12, 13}
    assert s.max_id == 13
    assert (s.owner_url, s.epoch, s.fetched_at) == (A, 4, 1.0)


def test_from_internal_stats_without_optional_parts() -> None:
    s = LiveSet.from_internal_stats(T, {"ledgers": [{"ledgerId": 5}]}, A, 0, 0.0)
    assert s.all_ids == {5}
    assert s.compacted_ledger is None
    assert s.cursor_ledgers == {}
    empty = LiveSet.from_internal_stats(T, {}, A, 0, 0.0)
    assert empty.all_ids == frozenset()
    assert empty.max_id == -1


def test_compacted_ledger_none_or_negative() -> None:
    assert LiveSet.from_internal_stats(T, {"compactedLedger": {"ledgerId": None}}, A, 0, 0).compacted_ledger is None
    assert LiveSet.from_internal_stats(T, {"compactedLedger": {"ledgerId": -1}}, A, 0, 0).compacted_ledger is None
    assert LiveSet.from_internal_stats(T, {"compactedLedger": {"ledgerId": 0}}, A, 0, 0).compacted_ledger == 0


@pytest.mark.parametrize(
    ("ledger_id", "references", "covers"),
    [(3, True, True), (9, True, True), (13, True, True), (4, False, True), (14, False, False), (1000, False, False)],
)
def test_references_and_covers(ledger_id: int, references: bool, covers: bool) -> None:
    s = LiveSet.from_internal_stats(T, internal_stats([10, 11], cursors={"sub": 13}, schema=[3], compacted=9), A, 0, 0)
    assert s.references(ledger_id) is references
    assert s.covers(ledger_id) is covers


# ---- every cursor is named (a delayed-delivery bucket ledger is held by its subscription) ----------------------


def test_the_subscription_of_a_partitioned_base_names_union_is_prefixed() -> None:
    p = LiveSet(BUCKET_T, frozenset(), {}, frozenset(), None, frozenset(), "a", 0, 0.0, cursor_names=frozenset({"s"}))
    u = LiveSet.union(BUCKET_T.partitioned_base, [p], 0, 0.0)
    assert u.cursor_names == frozenset({f"{BUCKET_T.local_name}/s"})


def test_internal_stats_name_every_cursor_even_without_a_ledger() -> None:
    stats = {"ledgers": [], "cursors": {"a": {"cursorLedger": -1}, "b": {"cursorLedger": 5}}}
    assert LiveSet.from_internal_stats(BUCKET_T, stats, "o", 0, 0.0).cursor_names == frozenset({"a", "b"})
