"""``trim-idle``'s pieces that need no broker: the state file that makes ``--apply`` resumable, the topic-policy
events of ``__change_events``, the audit summary's line, the command's refusals."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from worker.broker.topic_policies import NamespaceTopicPolicies, _apply
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


def event(topic: str, retention: dict[str, int] | None, *, action: str = "UPDATE", is_global: bool = False) -> dict:
    policies = None if retention is None else {"retentionPolicies": retention, "isGlobal": is_global}
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
    local: dict[str, Retention] = {}
    global_: dict[str, Retention] = {}
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
    assert local == {"persistent://public/ns/a": Retention(7, 3)}
    assert global_ == {"persistent://public/ns/c": Retention(1, 1)}


def test_a_partitions_retention_is_its_partitioned_topics_local_first() -> None:
    p = NamespaceTopicPolicies(
        local={"persistent://public/ns/a": Retention(7, 3)},
        global_={"persistent://public/ns/a": Retention(1, 1), "persistent://public/ns/g": Retention(2, 2)},
    )
    assert p.retention(TopicName.parse("persistent://public/ns/a-partition-3")) == Retention(7, 3)
    assert p.retention(TopicName.parse("persistent://public/ns/g")) == Retention(2, 2)
    assert p.retention(TopicName.parse("persistent://public/ns/other")) is None


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
    ],
)
def test_usage_errors_exit_2(argv: tuple[str, ...], why: str, capsys: pytest.CaptureFixture[str]) -> None:
    settings = Settings(zookeeper={"hosts": "127.0.0.1:1"})  # type: ignore[arg-type]
    assert trim_idle.handle(parse(*argv), settings) == 2
    assert why in capsys.readouterr().err


def test_without_the_metadata_store_it_refuses(capsys: pytest.CaptureFixture[str]) -> None:
    assert trim_idle.handle(parse(), Settings(zookeeper={"hosts": ""})) == 2  # type: ignore[arg-type]
    assert "zookeeper.hosts is not set" in capsys.readouterr().err


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


def _idle(name: str) -> object:
    from worker.core.retention import EffectiveRetention, PastRetention

    return type(
        "Idle",
        (),
        {
            "topic": TopicName.parse(f"persistent://t/n/{name}"),
            "retention": EffectiveRetention(Retention(0, 0), "namespace"),
            "past": PastRetention((), ""),
        },
    )()


async def test_apply_trims_skips_what_the_state_file_lists_and_records_only_successes(tmp_path: Path) -> None:
    from worker.operations.idle_trim import apply_trims

    names = ["a", "b", "c", "d"]
    cluster = _Cluster({f"persistent://t/n/{n}": (1, 2, 3) for n in names}, failing={"persistent://t/n/c"})
    state = TrimState(tmp_path / "s")
    state.record({"topic": "persistent://t/n/a"})
    trimmed, skipped = await apply_trims(
        cluster,  # type: ignore[arg-type]
        cluster,  # type: ignore[arg-type]
        [_idle(n) for n in names],  # type: ignore[misc]
        state,
        rate=1000,
        concurrency=2,
    )
    assert skipped == ["persistent://t/n/a"]
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
