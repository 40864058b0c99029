"""``trim-idle``'s pieces that need no broker: the state file that makes ``--apply`` resumable, the topic-policy
events of ``__change_events``, the namespace's and the broker's message TTL, the topics ``--apply`` holds back,
the audit summary's line, the command's refusals."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from worker.broker.topic_policies import NamespaceTopicPolicies, OwnPolicies, _apply
from worker.commands import trim_idle
from worker.core.retention import Retention
from worker.formats.topic_name import TopicName
from worker.nightly.audit import AuditSummary
from worker.operations.idle_trim import TrimState
from worker.settings import Settings


def test_the_state_file_lists_the_topics_done_and_survives_a_torn_line(tmp_path: Path) -> None:
    path = tmp_path / "trim.state"
    state = TrimState(path)
    assert state.done == set()
    state.record({"topic": "persistent://t/n/a", "dropped": [1, 2], "at": 1})
    state.record({"topic": "persistent://t/n/b", "dropped": [], "at": 2})
    with open(path, "a") as f:
        f.write('{"topic": "persistent://t/n/c", "dro')  # a crash in the middle of a line
    again = TrimState(path)
    assert again.done == {"persistent://t/n/a", "persistent://t/n/b"}


def event(
    topic: str,
    retention: dict[str, int] | None,
    *,
    action: str = "UPDATE",
    is_global: bool = False,
    ttl: int | None = None,
) -> dict:
    policies = (
        None
        if retention is None and ttl is None
        else {"retentionPolicies": retention, "messageTTLInSeconds": ttl, "isGlobal": is_global}
    )
    return {
        "eventType": "TOPIC_POLICY",
        "actionType": action,
        "topicPoliciesEvent": {
            "domain": "persistent",
            "tenant": "public",
            "namespace": "ns",
            "topic": topic,
            "policies": policies,
        },
    }


def test_topic_policy_events_last_one_wins_and_delete_removes() -> None:
    local: dict[str, OwnPolicies] = {}
    global_: dict[str, OwnPolicies] = {}
    _apply(event("a", {"retentionTimeInMinutes": 5, "retentionSizeInMB": -1}), local, global_)
    _apply(event("a", {"retentionTimeInMinutes": 7, "retentionSizeInMB": 3}), local, global_)
    _apply(event("b", {"retentionTimeInMinutes": -1, "retentionSizeInMB": -1}), local, global_)
    _apply(event("b", None, action="DELETE"), local, global_)
    _apply(event("c", {"retentionTimeInMinutes": 1, "retentionSizeInMB": 1}, is_global=True), local, global_)
    # Policies without a retention: the topic sets none of its own.
    _apply(event("d", {"retentionTimeInMinutes": 1, "retentionSizeInMB": 1}), local, global_)
    _apply(
        {
            **event("d", None),
            "topicPoliciesEvent": {**event("d", None)["topicPoliciesEvent"], "policies": {"isGlobal": False}},
        },
        local,
        global_,
    )
    # Another kind of event on the same topic is not a policy.
    _apply({"eventType": "TRANSACTION_BUFFER_SNAPSHOT"}, local, global_)
    assert local == {"persistent://public/ns/a": OwnPolicies(Retention(7, 3))}
    assert global_ == {"persistent://public/ns/c": OwnPolicies(Retention(1, 1))}


def test_a_topic_policy_event_carries_its_message_ttl_and_a_zero_is_a_value() -> None:
    local: dict[str, OwnPolicies] = {}
    global_: dict[str, OwnPolicies] = {}
    _apply(event("a", None, ttl=60), local, global_)
    _apply(event("z", None, ttl=0), local, global_)
    _apply(event("b", {"retentionTimeInMinutes": 1, "retentionSizeInMB": 1}, ttl=30), local, global_)
    _apply(event("b", {"retentionTimeInMinutes": 1, "retentionSizeInMB": 1}), local, global_)  # its TTL removed
    assert local == {
        "persistent://public/ns/a": OwnPolicies(None, 60),
        "persistent://public/ns/z": OwnPolicies(None, 0),
        "persistent://public/ns/b": OwnPolicies(Retention(1, 1), None),
    }
    p = NamespaceTopicPolicies(local, global_)
    assert p.message_ttl(TopicName.parse("persistent://public/ns/z")) == 0
    assert p.message_ttl(TopicName.parse("persistent://public/ns/b")) is None


def test_a_partitions_policies_are_its_partitioned_topics_local_first_field_by_field() -> None:
    p = NamespaceTopicPolicies(
        local={
            "persistent://public/ns/a": OwnPolicies(Retention(7, 3)),
            "persistent://public/ns/t": OwnPolicies(None, 0),
        },
        global_={
            "persistent://public/ns/a": OwnPolicies(Retention(1, 1), 120),
            "persistent://public/ns/g": OwnPolicies(Retention(2, 2)),
            "persistent://public/ns/t": OwnPolicies(None, 300),
        },
    )
    assert p.retention(TopicName.parse("persistent://public/ns/a-partition-3")) == Retention(7, 3)
    assert p.retention(TopicName.parse("persistent://public/ns/g")) == Retention(2, 2)
    assert p.retention(TopicName.parse("persistent://public/ns/other")) is None
    # The local policy sets no TTL: the global one's applies (PolicyHierarchyValue, field by field).
    assert p.message_ttl(TopicName.parse("persistent://public/ns/a-partition-0")) == 120
    # A local 0 wins over a global TTL.
    assert p.message_ttl(TopicName.parse("persistent://public/ns/t")) == 0
    assert p.message_ttl(TopicName.parse("persistent://public/ns/g")) is None


def test_the_audit_summary_says_what_idle_topics_hold_past_retention() -> None:
    s = AuditSummary("run1", held_past_retention=(2, 11, 2818070))
    assert "held past retention by idle topics: 2.7 MiB (2818070 bytes) in 11 ledgers of 2 topics" in s.table()
    s = AuditSummary("run1", held_past_retention_unread="BackendError: no store")
    assert "held past retention by idle topics: not computed (BackendError: no store)" in s.table()
    assert "held past retention" not in AuditSummary("run1").table()


def parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    trim_idle.register(parser.add_subparsers())
    return parser.parse_args(["trim-idle", *argv])


@pytest.mark.parametrize(
    ("argv", "why"),
    [
        (("--apply",), "--apply needs --state FILE"),
        (("-n", "not a namespace"), "--namespace"),
        (("--rate", "0"), "--rate must be > 0"),
        (("--default-retention", "5"), "--default-retention"),
        (("--default-retention=-2,5",), "--default-retention"),
        (("--allow-ttl-expiry",), "--allow-ttl-expiry goes with --apply"),
        (("--default-ttl=-1",), "--default-ttl"),
    ],
)
def test_usage_errors_exit_2(argv: tuple[str, ...], why: str, capsys: pytest.CaptureFixture[str]) -> None:
    settings = Settings(zookeeper={"metadata_store_url": "zk:127.0.0.1:1"})  # type: ignore[arg-type]
    assert trim_idle.handle(parse(*argv), settings) == 2
    assert why in capsys.readouterr().err


def test_without_the_metadata_store_it_refuses(capsys: pytest.CaptureFixture[str]) -> None:
    assert trim_idle.handle(parse(), Settings(zookeeper={"metadata_store_url": ""})) == 2  # type: ignore[arg-type]
    assert "zookeeper.metadata_store_url is not set" in capsys.readouterr().err


class _Stored:
    def __init__(self, topic: TopicName, ids: tuple[int, ...]) -> None:
        from worker.formats.managed_ledger_metadata import LedgerInfo, ManagedLedgerInfo

        self.topic = topic
        self.managed_ledger = ManagedLedgerInfo(tuple(LedgerInfo(i, entries=5, size=100) for i in ids))


class _Cluster:
    """A broker and its metadata store as apply_trims sees them: a trim drops every ledger but the last."""

    def __init__(self, ledgers: dict[str, tuple[int, ...]], failing: set[str]) -> None:
        self.ledgers = ledgers
        self.failing = failing
        self.trims: list[str] = []
        self.in_flight = self.max_in_flight = 0

    async def stored_topic(self, topic: TopicName) -> _Stored:
        return _Stored(topic, self.ledgers[str(topic)])

    async def trim(self, topic: TopicName) -> None:
        import asyncio

        from worker.errors import BackendError

        self.in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)
        await asyncio.sleep(0.01)
        self.in_flight -= 1
        if str(topic) in self.failing:
            raise BackendError("admin", "POST trim answered 500", 500)
        self.trims.append(str(topic))
        self.ledgers[str(topic)] = self.ledgers[str(topic)][-1:]


def _idle(name: str, ttl_risk: str | None = None) -> object:
    from worker.core.retention import EffectiveRetention, PastRetention

    return type(
        "Idle",
        (),
        {
            "topic": TopicName.parse(f"persistent://t/n/{name}"),
            "retention": EffectiveRetention(Retention(0, 0), "namespace"),
            "past": PastRetention((), ""),
            "ttl_risk": ttl_risk,
        },
    )()


async def test_apply_trims_skips_what_the_state_file_lists_and_records_only_successes(tmp_path: Path) -> None:
    from worker.operations.idle_trim import apply_trims

    names = ["a", "b", "c", "d"]
    cluster = _Cluster({f"persistent://t/n/{n}": (1, 2, 3) for n in names}, failing={"persistent://t/n/c"})
    state = TrimState(tmp_path / "s")
    state.record({"topic": "persistent://t/n/a"})
    trimmed, skipped, held = await apply_trims(
        cluster,  # type: ignore[arg-type]
        cluster,  # type: ignore[arg-type]
        [_idle(n) for n in names],  # type: ignore[misc]
        state,
        rate=1000,
        concurrency=2,
    )
    assert skipped == ["persistent://t/n/a"] and held == []
    assert sorted(cluster.trims) == ["persistent://t/n/b", "persistent://t/n/d"]
    assert cluster.max_in_flight <= 2
    by = {t.topic: t for t in trimmed}
    assert by["persistent://t/n/b"].dropped == (1, 2) and by["persistent://t/n/b"].bytes_after == 100
    assert by["persistent://t/n/c"].error and by["persistent://t/n/c"].dropped == ()
    assert TrimState(tmp_path / "s").done == {"persistent://t/n/a", "persistent://t/n/b", "persistent://t/n/d"}


@pytest.mark.parametrize("width", [80, 120, 200])
def test_the_table_fits_the_terminal_and_keeps_both_ends_of_a_long_name(width: int) -> None:
    from worker.commands.terminal import render_table
    from worker.core.retention import EffectiveRetention, PastRetention
    from worker.formats.managed_ledger_metadata import LedgerInfo
    from worker.operations.idle_trim import IdleTopic

    long_name = TopicName.parse(f"persistent://tenant-{'x' * 120}/ns/orders-{'y' * 150}-tail")
    topic = IdleTopic(
        long_name,
        EffectiveRetention(Retention(-1, 1), "namespace"),
        "no broker has __change_events loaded (reading it would assign its bundle)",
        13,
        3074270,
        PastRetention(tuple(LedgerInfo(i, 5, 256000) for i in range(7)), "ledger 395 is within retention"),
    )
    text = render_table(trim_idle.FOUND_COLUMNS, trim_idle.found_rows([topic]), width)
    lines = text.splitlines()
    assert all(len(line) <= width for line in lines), text
    row = lines[1]
    assert row.startswith("tenant-x") and "…" in row and "-tail" in row
    assert "7/13" in row and "1.7 MiB" in row and "2.9 MiB" in row


@pytest.mark.parametrize("allow", [False, True])
async def test_apply_trims_holds_back_a_topic_whose_ttl_would_expire_backlog_unless_allowed(
    tmp_path: Path, allow: bool
) -> None:
    from worker.operations.idle_trim import apply_trims

    cluster = _Cluster({f"persistent://t/n/{n}": (1, 2, 3) for n in "abc"}, failing=set())
    state = TrimState(tmp_path / "s")
    state.record({"topic": "persistent://t/n/c"})
    why = "a load would expire 15 unacknowledged entries (message TTL 10 s, from the namespace)"
    topics = [_idle("a"), _idle("b", why), _idle("c", why)]
    _, skipped, held = await apply_trims(
        cluster,  # type: ignore[arg-type]
        cluster,  # type: ignore[arg-type]
        topics,  # type: ignore[arg-type]
        state,
        rate=1000,
        concurrency=2,
        allow_ttl_expiry=allow,
    )
    # What the state file lists is already done, at risk or not.
    assert skipped == ["persistent://t/n/c"]
    if allow:
        assert sorted(cluster.trims) == ["persistent://t/n/a", "persistent://t/n/b"] and held == []
    else:
        # Held back: neither trimmed (so not loaded) nor recorded, so a run with the flag trims it.
        assert cluster.trims == ["persistent://t/n/a"] and held == [topics[1]]
        assert "persistent://t/n/b" not in TrimState(tmp_path / "s").done


def test_the_ttl_column_says_what_a_load_expires_and_from_which_ttl() -> None:
    from worker.core.retention import EffectiveRetention, PastRetention
    from worker.core.ttl_expiry import MessageTtl, SubscriptionExpiry, TtlExpiry
    from worker.operations.idle_trim import IdleTopic

    def idle(ttl: MessageTtl, expiry: TtlExpiry, risk: str | None, unread: str | None = None) -> IdleTopic:
        topic = TopicName.parse("persistent://t/n/x")
        past = PastRetention((), "")
        return IdleTopic(topic, EffectiveRetention(Retention(0, 0), "namespace"), unread, 3, 0, past, ttl, expiry, risk)

    ns10 = MessageTtl(10, "namespace")
    held = TtlExpiry(ns10, {"s": SubscriptionExpiry(15, 15)}, (4, 5, 6))
    assert trim_idle.ttl_cell(idle(ns10, held, "why")) == "15 (10 s, namespace)"
    partly = TtlExpiry(ns10, {"s": SubscriptionExpiry(10, 15, (7,))}, (5, 6, 7))
    assert trim_idle.ttl_cell(idle(ns10, partly, "why")) == "10-15+? (10 s, namespace)"
    none = MessageTtl(0, "topic")
    assert trim_idle.ttl_cell(idle(none, TtlExpiry(none), None)) == "0 (none, topic)"
    broker = MessageTtl(0, "broker")
    assert trim_idle.ttl_cell(idle(broker, TtlExpiry(broker), "unread", "no broker")) == "? (topic TTL unread)"
    assert (
        trim_idle.ttl_cell(idle(broker, TtlExpiry(broker), None, "no broker")) == "0 (none, broker, topic TTL unread)"
    )


class _Stat:
    def __init__(self, ctime: int, mtime: int) -> None:
        self.version, self.ctime, self.mtime = 0, ctime, mtime


class _Stores:
    """Pulsar's store (a namespace's policies znode) and BookKeeper's (ledger records) as the finder reads them."""

    def __init__(self, policies: dict[str, object], records: dict[int, tuple[bytes, _Stat]]) -> None:
        self.policies = policies
        self.records = records
        self.asked: list[list[int]] = []

    async def namespace_policies(self, namespace: str) -> bytes | None:
        import json

        return json.dumps(self.policies).encode()

    async def read_ledgers_metadata(self, ids: list[int]) -> list[object]:
        self.asked.append(ids)
        return [self.records.get(i) for i in ids]


class _Policies:
    def __init__(self, own: NamespaceTopicPolicies) -> None:
        self.own = own

    async def of(self, namespace: str) -> NamespaceTopicPolicies:
        return self.own


def _bk_record(last_entry_id: int, *, state: int = 3) -> bytes:
    from worker.formats.protobuf_wire import encode_field, encode_varint

    body = encode_field(1, 1) + encode_field(2, 1) + encode_field(3, 100) + encode_field(4, last_entry_id)
    body += encode_field(5, state)
    return b"BookieMetadataFormatVersion\t3\n" + encode_varint(len(body)) + body


NOW_MS = 1_800_000_000_000
HOUR_MS = 3_600_000


def _stored_topic(mark_delete: tuple[int, int]) -> object:
    """Ledgers 1-3 of 5 entries closed hours ago, then 4 (blank in the znode, closed in BookKeeper with 2
    entries); a subscription at ``mark_delete``."""
    from worker.core.metadata_stores import StoredTopic
    from worker.formats.managed_ledger_metadata import LedgerInfo, ManagedCursorInfo, ManagedLedgerInfo

    ledgers = (*(LedgerInfo(i, 5, 1000, NOW_MS - (5 - i) * HOUR_MS) for i in (1, 2, 3)), LedgerInfo(4))
    cursors = {"s": ManagedCursorInfo(-1, *mark_delete)}
    return StoredTopic(TopicName.parse("persistent://t/n/x"), 1, ManagedLedgerInfo(ledgers), cursors, frozenset())


def _finder(stores: _Stores, own: NamespaceTopicPolicies, broker_ttl: int = 0) -> object:
    from worker.operations.idle_trim import IdleTrimFinder

    return IdleTrimFinder(
        stores,  # type: ignore[arg-type]
        None,  # type: ignore[arg-type]
        _Policies(own),  # type: ignore[arg-type]
        broker_default=Retention(0, 0),
        broker_default_ttl=broker_ttl,
        ledgers=stores,  # type: ignore[arg-type]
        now_ms=lambda: NOW_MS,
    )


async def test_the_finder_reads_the_namespace_ttl_and_bookkeepers_last_ledger_and_says_why_it_holds_back() -> None:
    records = {1: (_bk_record(4), _Stat(NOW_MS - 5 * HOUR_MS, NOW_MS - 4 * HOUR_MS))}
    records[4] = (_bk_record(1), _Stat(NOW_MS - 2 * HOUR_MS, NOW_MS - HOUR_MS))
    stores = _Stores({"message_ttl_in_seconds": 60, "retention_policies": None}, records)
    finder = _finder(stores, NamespaceTopicPolicies(), broker_ttl=3600)
    # Acknowledged up to ledger 2's last entry: ledger 3 (5 entries) and the last one (2) are left.
    idle = await finder.judge(_stored_topic((2, 4)))  # type: ignore[attr-defined]
    assert [ld.ledger_id for ld in idle.past.ledgers] == [1, 2]
    assert str(idle.ttl) == "60 s, namespace"
    assert (idle.expiry.entries, idle.expiry.at_most, idle.expiry.ledgers) == (7, 7, (3, 4))
    assert idle.ttl_risk == "a load would expire 7 unacknowledged entries (message TTL 60 s, from the namespace)"
    # Only the first and the last ledgers' records are read.
    assert stores.asked == [[1, 4]]
    assert idle.to_dict()["ttl_expiry"]["subscriptions"] == {
        "s": {"entries": 7, "entries_at_most": 7, "uncounted_ledgers": []}
    }


async def test_a_topics_own_ttl_of_zero_spares_its_backlog_and_an_unread_one_holds_it_back() -> None:
    records = {4: (_bk_record(1), _Stat(NOW_MS - 2 * HOUR_MS, NOW_MS - HOUR_MS))}
    stores = _Stores({"message_ttl_in_seconds": 60}, records)
    own = NamespaceTopicPolicies(local={"persistent://t/n/x": OwnPolicies(None, 0)})
    idle = await _finder(stores, own).judge(_stored_topic((2, 4)))  # type: ignore[attr-defined]
    assert str(idle.ttl) == "none, topic" and idle.ttl_risk is None and not idle.expiry.at_risk
    # The topic's own policies unread, no TTL anywhere else: a TTL of its own could take its 7 entries.
    unread = NamespaceTopicPolicies(unread="no broker has __change_events loaded")
    idle = await _finder(_Stores({}, records), unread).judge(_stored_topic((2, 4)))  # type: ignore[attr-defined]
    assert str(idle.ttl) == "none, broker" and not idle.expiry.at_risk
    assert idle.ttl_risk is not None and "message TTL is unread" in idle.ttl_risk and "up to 7" in idle.ttl_risk
    # ... but nothing is held back when every entry is acknowledged (ledger 4's 2 entries included).
    idle = await _finder(_Stores({}, records), unread).judge(_stored_topic((4, 1)))  # type: ignore[attr-defined]
    assert idle.ttl_risk is None


async def test_the_last_ledger_not_closed_in_bookkeeper_is_uncounted_and_holds_back() -> None:
    records = {4: (_bk_record(-1, state=1), _Stat(NOW_MS - 2 * HOUR_MS, NOW_MS - 2 * HOUR_MS))}
    idle = await _finder(_Stores({"message_ttl_in_seconds": 60}, records), NamespaceTopicPolicies()).judge(  # type: ignore[attr-defined]
        _stored_topic((3, 4))
    )
    assert idle.expiry.uncounted == (4,) and idle.expiry.at_most == 0
    assert idle.ttl_risk == (
        "a load would expire the uncounted unacknowledged entries of ledger 4 (message TTL 60 s, from the namespace)"
    )
