"""Delayed-delivery bucket ledgers (``DELAYED_INDEX_BUCKET``): their owner read from the metadata Pulsar
writes on them, the identity proof, the in-use rule (``worker.core.bucket_in_use``) and the decision."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from tests.unit.fakes import NOW_S, FakeBookie, FakeSnapshots, FakeStore, scan
from tests.unit.fakes import live as scanner_live
from tests.unit.fakes import md as scanner_md
from worker.core.bucket_in_use import (
    BucketHold,
    CursorRecord,
    bucket_hold,
    bucket_ledgers,
    cursor_znode_name,
)
from worker.core.decision import Facts, Outcome, Route, Rules, decide
from worker.core.ledger_owner import Owner, Unmapped, owner_of
from worker.core.live_set import LiveSet, TopicGone
from worker.core.stored import Missing, StoredLedger
from worker.core.verification import Verdict, verify_bookkeeper
from worker.formats.ledger_metadata import LedgerMetadata
from worker.formats.message import InvalidMessage, LedgerComponent, LedgerType, PendingDeleteLedgerInfo
from worker.formats.topic_name import TopicName
from worker.operations.scanner import Scanner
from worker.operations.scanner import Verdict as ScanVerdict

NOW = 1_800_000_000_000
RULES = Rules(min_ledger_age_ms=600_000)
TOPIC = "persistent://t/ns/x-partition-1"
T = TopicName.parse(TOPIC)
KEY = "#pulsar.internal.delayed.bucket_10_14"
# LedgerMetadataUtils.buildMetadataForDelayedIndexBucket(bucketKey, topicName, cursorName) on Pulsar 4.0.8.
BUCKET_CM = {
    "application": "pulsar",
    "component": "delayed-index-bucket",
    "pulsar/delayedIndexBucketKey": KEY,
    "pulsar/delayedIndexTopic": TOPIC,
    "pulsar/delayedIndexCursor": "my sub",
}


def info(lid: int = 31, *, topic: str = TOPIC, cursor: str = "my sub") -> PendingDeleteLedgerInfo:
    return PendingDeleteLedgerInfo(topic, LedgerComponent.DELAYED_INDEX_BUCKET, LedgerType.LEDGER, lid, cursor)


def stored(cm: dict[str, str] = BUCKET_CM, lid: int = 31, state: str = "CLOSED") -> StoredLedger:
    return StoredLedger(LedgerMetadata(lid, dict(cm), NOW - 3_600_000, 100, state), token=1)


def live(cursor_names: frozenset[str] = frozenset(), ml: frozenset[int] = frozenset({40})) -> LiveSet:
    return LiveSet(T, ml, {}, frozenset(), None, frozenset(), "http://a", 0, 0.0, cursor_names=cursor_names)


def test_a_bucket_message_needs_its_subscription() -> None:
    with pytest.raises(InvalidMessage, match="DELAYED_INDEX_BUCKET needs cursorName"):
        PendingDeleteLedgerInfo(TOPIC, LedgerComponent.DELAYED_INDEX_BUCKET, LedgerType.LEDGER, 31)


def test_owner_of_a_bucket_ledger() -> None:
    assert owner_of(BUCKET_CM) == Owner(LedgerComponent.DELAYED_INDEX_BUCKET, T, cursor="my sub")


@pytest.mark.parametrize(
    ("drop", "reason"),
    [("pulsar/delayedIndexTopic", "topic_mismatch"), ("pulsar/delayedIndexCursor", "cursor_mismatch")],
)
def test_a_bucket_ledger_without_its_owner_is_unmapped(drop: str, reason: str) -> None:
    cm = {k: v for k, v in BUCKET_CM.items() if k != drop}
    with pytest.raises(Unmapped) as e:
        owner_of(cm)
    assert e.value.component is LedgerComponent.DELAYED_INDEX_BUCKET
    assert e.value.reason == reason


def test_a_bucket_ledger_naming_an_unparseable_topic_is_unmapped() -> None:
    with pytest.raises(Unmapped):
        owner_of({**BUCKET_CM, "pulsar/delayedIndexTopic": "not a topic"})


@pytest.mark.parametrize(
    ("message", "cm", "verdict", "reason"),
    [
        (info(), BUCKET_CM, Verdict.MATCH, ""),
        (info(topic="persistent://t/ns/x-partition-2"), BUCKET_CM, Verdict.REJECTED, "topic_mismatch"),
        (info(cursor="other"), BUCKET_CM, Verdict.REJECTED, "cursor_mismatch"),
        # The message's component must be what the ledger is: a cursor ledger is no bucket, and back.
        (
            info(),
            {"application": "pulsar", "component": "managed-ledger", "pulsar/managed-ledger": T.managed_ledger_name},
            Verdict.REJECTED,
            "component_mismatch",
        ),
        (
            PendingDeleteLedgerInfo(TOPIC, LedgerComponent.MANAGED_CURSOR, LedgerType.LEDGER, 31, "my sub"),
            BUCKET_CM,
            Verdict.REJECTED,
            "component_mismatch",
        ),
        (info(), {"application": "other"}, Verdict.REJECTED, "not_pulsar"),
    ],
)
def test_bucket_identity(message: PendingDeleteLedgerInfo, cm: dict[str, str], verdict: Verdict, reason: str) -> None:
    v = verify_bookkeeper(message, stored(cm).metadata, now_ms=NOW, min_age_ms=600_000)
    assert (v.verdict, v.reason) == (verdict, reason)


def test_bucket_ledgers_are_the_values_of_the_bucket_properties() -> None:
    props = {KEY: "31", "#pulsar.internal.delayed.bucket_15_19": "32", "mine": "33", f"{KEY}x": "junk"}
    assert bucket_ledgers(props) == frozenset({31, 32})


def test_cursor_znode_name_is_javas_url_encoding() -> None:
    assert cursor_znode_name("my sub~*é") == "my+sub%7E*%C3%A9"


@pytest.mark.parametrize(
    ("props", "subscription_live", "hold"),
    [
        ({KEY: "31"}, True, BucketHold.LISTED),
        ({KEY: "31"}, False, BucketHold.LISTED),
        # Not in the cursor's properties, but its subscription is live: the owner may hold it in memory
        # (a bucket whose property write failed, a non-durable subscription): never proven unused.
        ({KEY: "32"}, True, BucketHold.SUBSCRIPTION_LIVE),
        (None, True, BucketHold.SUBSCRIPTION_LIVE),
        ({KEY: "32"}, False, None),
        (None, False, None),
    ],
)
def test_bucket_hold(props: dict[str, str] | None, subscription_live: bool, hold: BucketHold | None) -> None:
    assert bucket_hold(31, CursorRecord(props), subscription_live=subscription_live) is hold


def test_an_unread_cursor_holds_the_bucket() -> None:
    assert bucket_hold(31, None, subscription_live=False) is BucketHold.CURSOR_UNREAD
    assert not BucketHold.CURSOR_UNREAD.proven
    assert BucketHold.LISTED.proven


@pytest.mark.parametrize(
    ("facts", "outcome", "route"),
    [
        (Facts(live(), stored(), bucket_cursor=CursorRecord({KEY: "31"})), Outcome.IN_USE, Route.OWNER),
        (Facts(live(frozenset({"my+sub"})), stored(), bucket_cursor=CursorRecord({})), Outcome.IN_USE, Route.OWNER),
        (Facts(live(), stored(), bucket_cursor=CursorRecord({KEY: "32"})), Outcome.DELETED, Route.OWNER),
        (Facts(live(), stored(), bucket_cursor=CursorRecord(None)), Outcome.DELETED, Route.OWNER),
        # The cursor was not read: never a delete.
        (Facts(live(), stored()), Outcome.IN_USE, Route.OWNER),
        # Any id the topic's owner lists is in use, whatever the message calls it.
        (Facts(live(ml=frozenset({31})), stored(), bucket_cursor=CursorRecord(None)), Outcome.IN_USE, Route.OWNER),
        (Facts(TopicGone(T, 0), stored()), Outcome.DELETED, Route.DIRECT),
        (Facts(live(), Missing(), bucket_cursor=CursorRecord({KEY: "31"})), Outcome.ALREADY_GONE, Route.OWNER),
        (Facts(live(), stored(state="OPEN"), bucket_cursor=CursorRecord(None)), Outcome.IN_USE, Route.OWNER),
    ],
)
def test_bucket_decision(facts: Facts, outcome: Outcome, route: Route) -> None:
    r = decide(info(), facts, now_ms=NOW, rules=RULES)
    assert (r.outcome, r.route) == (outcome, route)


def test_the_subscription_of_a_partitioned_base_names_union_is_prefixed() -> None:
    p = LiveSet(T, frozenset(), {}, frozenset(), None, frozenset(), "a", 0, 0.0, cursor_names=frozenset({"s"}))
    u = LiveSet.union(T.partitioned_base, [p], 0, 0.0)
    assert u.cursor_names == frozenset({f"{T.local_name}/s"})


def test_internal_stats_name_every_cursor_even_without_a_ledger() -> None:
    stats = {"ledgers": [], "cursors": {"a": {"cursorLedger": -1}, "b": {"cursorLedger": 5}}}
    assert LiveSet.from_internal_stats(T, stats, "o", 0, 0.0).cursor_names == frozenset({"a", "b"})


# ---- the scanner (and through it the nightly audit): the same rule -----------------------------------------


class BucketStore(FakeStore):
    def __init__(self, cursors: dict[tuple[str, str], dict[str, str]], managed_ledgers: set[str]) -> None:
        super().__init__(managed_ledgers)
        self.cursors = cursors

    async def cursor_properties(self, topic: TopicName, cursor: str) -> dict[str, str] | None:
        return self.cursors.get((str(topic), cursor))


def bucket_md(lid: int, topic: str, subscription: str, **kw: Any) -> LedgerMetadata:
    cm = {**BUCKET_CM, "pulsar/delayedIndexTopic": topic, "pulsar/delayedIndexCursor": subscription}
    return scanner_md(lid, cm, **kw)


async def test_the_scanner_judges_bucket_ledgers_by_the_workers_rule() -> None:
    a, gone = "persistent://t/ns/a", "persistent://t/ns/gone"
    ledgers = [
        bucket_md(1, a, "my sub"),  # named by its cursor
        bucket_md(2, a, "my sub"),  # not named, but its subscription is live: may be held in memory only
        bucket_md(3, a, "old"),  # its subscription is gone: a leaked bucket
        bucket_md(4, gone, "s"),  # its topic is gone
        bucket_md(5, a, "old", state="OPEN"),  # being written (a snapshot in progress)
    ]
    snap = dataclasses.replace(scanner_live(a), cursor_names=frozenset({"my+sub"}))
    store = BucketStore({(a, "my+sub"): {KEY: "1"}}, {TopicName.parse(a).managed_ledger_name})
    got, _, report = await scan(ledgers, {a: snap}, store)
    assert {k: d.verdict for k, d in got.items()} == {
        1: ScanVerdict.IN_USE,
        2: ScanVerdict.SKIPPED,
        3: ScanVerdict.ORPHAN,
        4: ScanVerdict.ORPHAN,
        5: ScanVerdict.SKIPPED,
    }
    assert got[3].why == "not named by cursor 'old', which its topic no longer has"
    assert got[4].why == "topic gone"
    # Queued as the worker verifies it: the subscription as the ledger's metadata records it.
    info3 = got[3].to_info()
    assert (info3.ledger_component, info3.cursor_name) == (LedgerComponent.DELAYED_INDEX_BUCKET, "old")
    assert [d.ledger_id for d in report.orphans] == [3, 4]


async def test_without_a_metadata_store_a_bucket_of_a_live_topic_is_skipped() -> None:
    a = "persistent://t/ns/a"
    scanner = Scanner(
        FakeBookie([bucket_md(3, a, "old")]),
        FakeSnapshots({a: scanner_live(a)}, None),  # type: ignore[arg-type]
        None,
        min_age_s=0,
        clock=lambda: NOW_S,
    )
    got = {d.ledger_id: d for d in (await scanner.scan()).decisions}
    assert got[3].verdict is ScanVerdict.SKIPPED and "no metadata store" in got[3].why
