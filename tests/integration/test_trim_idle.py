"""``trim-idle`` on the real stack: idle topics past their retention are found without loading any topic, and
``--apply`` has the broker trim them.

A namespace of topics all written with infinite retention (so the brokers trim nothing while writing), all but
one then unloaded one by one and the namespace's retention set to 1 MB by size (no waiting for time retention):
two idle topics of about 3 and 2 MB and the two partitions of a partitioned topic (past it), one idle topic of
300 KB (within it), one idle topic with a subscription that acknowledged nothing (its cursor needs every ledger:
the broker would trim none, and the dry run counts none), one idle topic with its own infinite retention (a
topic-level policy over the namespace's), and one topic left loaded (its broker trims it itself). The dry run
must name exactly the four past it, with exactly the ledgers the broker's size rule drops, and the nightly audit
the same total, while nothing of the idle topics changes (ledgers, managed-ledger and cursor znodes, bundle
owners) and no broker lists any of them as loaded afterwards. ``--apply`` then trims them: the ledgers reported
leave the topics' metadata, the broker extension queues each one dropped for deletion, and a state file naming a
topic as done makes a run skip it.
"""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Any

import pulsar
import pytest
from kazoo.client import KazooClient

from testkit.footprint import Footprint, footprint, stats_period_s
from testkit.harness import WorkerHarness
from testkit.topics import produce
from tests.conftest import Stack
from tests.integration.conftest import WorkerFactory
from tests.integration.helpers import cli, fresh_namespace, quiet_logger, worker_config
from worker.backends.ledger_listing import ledger_subtrees, read_subtrees
from worker.broker.admin import PulsarAdmin
from worker.core.ledger_owner import Unmapped, owner_of
from worker.formats.ledger_metadata import parse_serialized_metadata
from worker.formats.managed_ledger_metadata import ManagedLedgerInfo, parse_managed_ledger_info
from worker.formats.message import decode
from worker.formats.protobuf_wire import MetadataFormatError
from worker.formats.topic_name import TopicName

pytestmark = [pytest.mark.integration, pytest.mark.timeout(900)]

MB = 1024 * 1024
# The topics past retention once the namespace's retention is 1 MB, and every idle (unloaded) one.
PAST = ("idle-a", "idle-b", "part-0", "part-1")
IDLE = (*PAST, "within", "backlog", "override")
BIG = b"x" * (50 * 1024)  # 5 entries a ledger on this stack: about 250 KB a ledger
SMALL = b"x" * (20 * 1024)
# The broker extension's queue (its default), where a broker with the extension puts what it trims.
EXTENSION_QUEUE = "persistent://pulsar/system/__ledger_deletion"


def stored(zk_hosts: str, topic: TopicName) -> ManagedLedgerInfo:
    zk = KazooClient(hosts=zk_hosts, timeout=30)
    zk.start(30)
    try:
        return parse_managed_ledger_info(zk.get(f"/managed-ledgers/{topic.managed_ledger_name}")[0])
    finally:
        zk.stop()
        zk.close()


def size_rule(ml: ManagedLedgerInfo, quota_mb: int) -> list[int]:
    """What the broker's size retention drops from a topic with no cursor, every ledger but the last one
    closed: the oldest ones while what stays is still at least the quota (ManagedLedgerImpl's
    ``totalSize - sizeToDelete >= retentionSize``)."""
    total = sum(ld.size or 0 for ld in ml.ledgers)
    out, dropped = [], 0
    for ld in sorted(ml.ledgers, key=lambda ld: ld.ledger_id)[:-1]:
        dropped += ld.size or 0
        if total - dropped < quota_mb * MB:
            break
        out.append(ld.ledger_id)
    return out


def queued_ledgers(service_url: str, topic: str) -> set[int]:
    """The ledgers of ``topic`` on the broker extension's queue (read with Readers: nothing acknowledged)."""
    client = pulsar.Client(service_url, operation_timeout_seconds=30, logger=quiet_logger())
    out: set[int] = set()
    try:
        for p in range(4):
            reader = client.create_reader(f"{EXTENSION_QUEUE}-partition-{p}", pulsar.MessageId.earliest)
            while reader.has_message_available():
                info = decode(reader.read_next(timeout_millis=5000).data())
                if info.topic_name == topic:
                    out.add(info.ledger_id)
            reader.close()
    finally:
        client.close()
    return out


def backlogged(service_url: str, topic: str, subscription: str, n: int) -> None:
    """A subscription made before any message, then ``n`` messages it never acknowledges."""
    client = pulsar.Client(service_url, operation_timeout_seconds=30, logger=quiet_logger())
    try:
        client.subscribe(topic, subscription).close()
    finally:
        client.close()
    produce(service_url, topic, n, payload=BIG)


def ledgers_of(zk_hosts: str, topics: set[str]) -> frozenset[int]:
    """Every BookKeeper ledger whose metadata names one of ``topics`` (data, cursor and schema ledgers)."""
    out = set()
    uri = f"zk://{zk_hosts}/ledgers"
    for lid, data, ctime in read_subtrees(uri, ledger_subtrees(uri)):
        try:
            owner = owner_of(parse_serialized_metadata(lid, data, ctime).custom_metadata)
        except (MetadataFormatError, Unmapped):
            continue
        if owner is not None and str(owner.topic) in topics:
            out.add(lid)
    return frozenset(out)


def idle_only(fp: Footprint, zk_hosts: str, idle: set[str]) -> Footprint:
    """The footprint of the idle topics alone: the loaded topic's broker may trim it at any time, and the
    namespace's ``__change_events`` is compacted on its own schedule."""
    keep = {f"/managed-ledgers/{TopicName.parse(t).managed_ledger_name}" for t in idle}
    znodes = {p: v for p, v in fp.znodes.items() if any(p == k or p.startswith(k + "/") for k in keep)}
    return Footprint(fp.ledgers & ledgers_of(zk_hosts, idle), znodes, fp.bundle_owners, fp.loaded & idle)


async def dry_run(h: WorkerHarness, ns: str, tmp_path: Path) -> tuple[dict[str, Any], str]:
    """``trim-idle -n ns`` without ``--apply``: its JSON report and what it printed."""
    report = tmp_path / "dry.json"
    r = await asyncio.to_thread(cli, h.config_path, "trim-idle", "-n", ns, "--report", str(report))
    assert r.returncode == 0, r.stderr[-3000:]
    print(r.stdout)
    return dict(json.loads(report.read_text())), r.stdout


async def test_trim_idle_finds_exactly_the_idle_topics_past_retention_and_trims_them(
    stack: Stack, unique: str, admin: PulsarAdmin, tmp_path: Path, make_worker: WorkerFactory
) -> None:
    ns = await fresh_namespace(admin, f"ldw-trim-{unique}")
    t = {
        name: TopicName.parse(f"persistent://{ns}/{name}-{unique}")
        for name in ("idle-a", "idle-b", "within", "backlog", "override", "loaded")
    }
    produce(stack.service_url, str(t["idle-a"]), 60, payload=BIG)
    produce(stack.service_url, str(t["idle-b"]), 45, payload=BIG)
    # A partitioned topic's partitions are managed ledgers (and topics to trim) of their own.
    parts = TopicName.parse(f"persistent://{ns}/parts-{unique}")
    await admin.create_partitioned_topic(parts, 2)
    for i in range(2):
        t[f"part-{i}"] = parts.partition(i)
        produce(stack.service_url, str(t[f"part-{i}"]), 35, payload=BIG)
    produce(stack.service_url, str(t["within"]), 15, payload=SMALL)
    backlogged(stack.service_url, str(t["backlog"]), f"sub-{unique}", 40)
    produce(stack.service_url, str(t["override"]), 40, payload=BIG)
    await admin._call(
        "POST",
        f"/admin/{t['override'].admin_path}/retention",
        follow_redirect=True,
        body={"retentionTimeInMinutes": -1, "retentionSizeInMB": -1},
    )
    produce(stack.service_url, str(t["loaded"]), 40, payload=BIG)
    for name in IDLE:
        await admin.unload(t[name])
    await admin.set_retention(ns, -1, 1)
    unloaded_at = time.monotonic()
    period = await stats_period_s(admin)
    # The brokers' lists of loaded topics must have been refreshed since the unloads.
    await asyncio.sleep(max(0.0, period + 5 - (time.monotonic() - unloaded_at)))

    h = worker_config(make_worker, f"trim-{unique}")
    expected = {name: size_rule(stored(stack.zookeeper_hosts, t[name]), 1) for name in PAST}
    assert len(expected["idle-a"]) >= 3 and all(expected.values()), expected
    before = await footprint(admin, stack.zookeeper_hosts, ns)
    assert str(t["loaded"]) in before.loaded, before.loaded
    assert not {str(t[n]) for n in IDLE} & before.loaded
    started = time.monotonic()

    dry, printed = await dry_run(h, ns, tmp_path)
    found = {d["topic"]: d for d in dry["topics"]}
    assert set(found) == {str(t[n]) for n in PAST}, found.keys()
    for name in PAST:
        d = found[str(t[name])]
        assert [ld["ledger_id"] for ld in d["past_retention"]] == expected[name], (name, d)
        assert d["retention_from"] == "namespace" and d["retention"]["retentionSizeInMB"] == 1
        assert d["topic_policy_unread"] is None, d
        assert d["past_retention_bytes"] == sum(ld["bytes"] for ld in d["past_retention"]) > 0
    assert dry["past_retention_bytes"] == sum(d["past_retention_bytes"] for d in found.values())
    within = {d["topic"]: d for d in dry["within_retention"]}
    assert set(within) == {str(t[n]) for n in ("within", "backlog", "override")}, within
    assert "within retention" in within[str(t["within"])]["kept_because"]
    assert f"cursor sub-{unique} has not acknowledged" in within[str(t["backlog"])]["kept_because"]
    assert within[str(t["override"])]["retention_from"] == "topic"
    assert dry["loaded"] == [str(t["loaded"])]
    assert "dry run: nothing trimmed" in printed

    # The nightly audit reports the same total (it runs the same dry run on its driver), loading nothing either.
    r = await asyncio.to_thread(
        cli,
        h.config_path,
        *("audit", "--no-buckets", "-n", ns, "--min-age", "1s", "--report-dir", str(tmp_path / "audit")),
        timeout=600,
    )
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    held = f"({dry['past_retention_bytes']} bytes) in {dry['past_retention_ledgers']} ledgers of {len(PAST)} topics"
    assert "held past retention by idle topics: " in r.stdout and held in r.stdout, r.stdout[-2000:]

    # Nothing was loaded: the namespace is as it was, and once the brokers have refreshed their lists since the
    # dry run and the audit, they list none of the idle topics.
    after = await footprint(admin, stack.zookeeper_hosts, ns)
    idle = {str(t[n]) for n in IDLE}
    idle_before = await asyncio.to_thread(idle_only, before, stack.zookeeper_hosts, idle)
    assert len(idle_before.ledgers) > 30 and len(idle_before.znodes) >= 6, idle_before
    changes = idle_before.differences(await asyncio.to_thread(idle_only, after, stack.zookeeper_hosts, idle))
    assert changes == {}, changes
    await asyncio.sleep(max(0.0, period + 5 - (time.monotonic() - started)))
    final = await footprint(admin, stack.zookeeper_hosts, ns)
    # (The namespace's __change_events stays loaded beside the loaded topic: its topic policies were read from it.)
    assert final.loaded == before.loaded, (before.loaded, final.loaded)
    assert not idle & final.loaded
    changes = idle_before.differences(await asyncio.to_thread(idle_only, final, stack.zookeeper_hosts, idle))
    assert changes == {}, changes

    # A first --apply whose state file says an earlier run trimmed idle-b already: it trims the others.
    backlog_ledgers = stored(stack.zookeeper_hosts, t["backlog"]).ledger_ids
    state = tmp_path / "trim.state"
    state.write_text(json.dumps({"topic": str(t["idle-b"]), "dropped": [], "at": 0}) + "\n")
    first = await apply(h, ns, state, tmp_path / "apply-1.json")
    assert {d["topic"] for d in first["trimmed"]} == {str(t[n]) for n in PAST if n != "idle-b"}
    assert first["already_done"] == [str(t["idle-b"])]
    # Another run with a state file of its own trims idle-b (the others are within their retention now).
    second = await apply(h, ns, tmp_path / "trim-2.state", tmp_path / "apply-2.json")
    assert [d["topic"] for d in second["trimmed"]] == [str(t["idle-b"])]
    trimmed = {d["topic"]: d for d in first["trimmed"] + second["trimmed"]}
    for name in PAST:
        topic = str(t[name])
        reported = {ld["ledger_id"] for ld in found[topic]["past_retention"]}
        assert trimmed[topic]["error"] is None
        assert reported <= set(trimmed[topic]["dropped"]), (reported, trimmed[topic])
        left = set(stored(stack.zookeeper_hosts, t[name]).ledger_ids)
        assert not reported & left, (reported, left)
        # What the trim freed is at least what the dry run reported (a lower bound).
        freed = trimmed[topic]["bytes_before"] - trimmed[topic]["bytes_after"]
        assert freed >= found[topic]["past_retention_bytes"], (freed, found[topic])
        # The broker extension queued every ledger the trim dropped.
        queued = await asyncio.to_thread(queued_ledgers, stack.service_url, topic)
        assert set(trimmed[topic]["dropped"]) <= queued, (trimmed[topic]["dropped"], queued)
    assert {json.loads(line)["topic"] for line in state.read_text().splitlines()} == {str(t[n]) for n in PAST}
    # Untouched: the backlogged topic keeps every ledger.
    assert stored(stack.zookeeper_hosts, t["backlog"]).ledger_ids == backlog_ledgers


async def apply(h: WorkerHarness, ns: str, state: Path, report: Path, *more: str) -> dict[str, Any]:
    r = await asyncio.to_thread(
        cli,
        h.config_path,
        "trim-idle",
        "-n",
        ns,
        "--apply",
        "--state",
        str(state),
        "--rate",
        "5",
        "--report",
        str(report),
        *more,
    )
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    print(r.stdout)
    assert "bytes) before" in r.stdout and "bytes) after" in r.stdout
    out: dict[str, Any] = json.loads(await asyncio.to_thread(report.read_text))
    assert out["bytes_before"] >= out["bytes_after"]
    return out


# The namespace's message TTL in the test below: far shorter than the wait for the brokers' lists, so every
# entry written before it is older than the TTL when the dry run reads the topics.
TTL_S = 10


def partly_acknowledged(service_url: str, topic: str, subscription: str, n: int, acknowledged: int) -> None:
    """A subscription made before any message, then ``n`` messages of which it acknowledges the first
    ``acknowledged`` (cumulatively: its mark-delete position moves to the last one)."""
    client = pulsar.Client(service_url, operation_timeout_seconds=30, logger=quiet_logger())
    try:
        client.subscribe(topic, subscription).close()
        produce(service_url, topic, n, payload=SMALL)
        consumer = client.subscribe(topic, subscription)
        last = None
        for _ in range(acknowledged):
            last = consumer.receive(timeout_millis=10_000)
        if last is not None:
            consumer.acknowledge_cumulative(last)
        consumer.close()
    finally:
        client.close()


async def backlog(admin: PulsarAdmin, topic: TopicName, subscription: str) -> int:
    """The subscription's backlog as its broker counts it (the topic is loaded: ``stats`` loads nothing new)."""
    return int((await admin.stats(topic))["subscriptions"][subscription]["msgBacklog"])


async def test_trim_idle_holds_back_a_topic_whose_message_ttl_would_expire_its_backlog(
    stack: Stack, unique: str, admin: PulsarAdmin, tmp_path: Path, make_worker: WorkerFactory
) -> None:
    """Loading a topic turns its message TTL on: within ``messageExpiryCheckIntervalInMinutes`` the broker
    acknowledges, on every subscription, the entries older than the TTL, and its next trim drops them. A namespace
    with a 10 s TTL and retention 0, three idle topics of 30 entries with one subscription each: ``held`` (15
    acknowledged, 15 not: all older than the TTL), ``acked`` (30 acknowledged), ``own-ttl`` (as ``held``, with its
    own TTL of 0 over the namespace's). Each has acknowledged ledgers past retention. The dry run must report the
    effective TTL of each and the 15 entries a load of ``held`` would expire; ``--apply`` must trim ``acked`` and
    ``own-ttl`` and leave ``held`` unloaded and untouched; ``--apply --allow-ttl-expiry`` trims it, and the
    broker's own expiry (the same monitor, run at once) then takes exactly the 15 entries reported."""
    ns = await fresh_namespace(admin, f"ldw-ttl-{unique}")
    t = {name: TopicName.parse(f"persistent://{ns}/{name}-{unique}") for name in ("held", "acked", "own-ttl")}
    sub = f"sub-{unique}"
    for name, acknowledged in (("held", 15), ("acked", 30), ("own-ttl", 15)):
        await asyncio.to_thread(partly_acknowledged, stack.service_url, str(t[name]), sub, 30, acknowledged)
    await admin._call(
        "POST", f"/admin/{t['own-ttl'].admin_path}/messageTTL", params={"messageTTL": "0"}, follow_redirect=True
    )
    for topic in t.values():
        await admin.unload(topic)
    await admin.set_retention(ns, 0, 0)
    await admin.set_namespace_policy(ns, "messageTTL", TTL_S)
    unloaded_at = time.monotonic()
    period = await stats_period_s(admin)
    await asyncio.sleep(max(0.0, period + 5 - (time.monotonic() - unloaded_at)))
    held = str(t["held"])
    held_before = stored(stack.zookeeper_hosts, t["held"])
    before = await footprint(admin, stack.zookeeper_hosts, ns)
    assert not {str(x) for x in t.values()} & before.loaded, before.loaded

    h = worker_config(make_worker, f"ttl-{unique}")
    dry, printed = await dry_run(h, ns, tmp_path)
    found = {d["topic"]: d for d in dry["topics"]}
    # Each has acknowledged ledgers past retention 0.
    assert set(found) == {str(x) for x in t.values()}, found.keys()
    for d in found.values():
        assert d["topic_policy_unread"] is None, d
        assert d["past_retention"], d
    d = found[held]
    assert d["message_ttl"] == {"seconds": TTL_S, "from": "namespace"}, d
    assert d["ttl_expiry"]["entries"] == d["ttl_expiry"]["entries_at_most"] == 15, d["ttl_expiry"]
    assert d["ttl_expiry"]["subscriptions"][sub]["entries"] == 15, d["ttl_expiry"]
    assert d["ttl_expiry"]["uncounted_ledgers"] == [], d["ttl_expiry"]
    assert d["ttl_risk"] and "15" in d["ttl_risk"], d
    d = found[str(t["acked"])]
    assert d["message_ttl"] == {"seconds": TTL_S, "from": "namespace"}, d
    assert d["ttl_expiry"]["entries_at_most"] == 0 and d["ttl_risk"] is None, d
    d = found[str(t["own-ttl"])]
    assert d["message_ttl"] == {"seconds": 0, "from": "topic"}, d
    assert d["ttl_expiry"]["entries_at_most"] == 0 and d["ttl_risk"] is None, d
    assert dry["ttl_risk"] == [{"topic": held, "why": found[held]["ttl_risk"]}], dry["ttl_risk"]
    assert "--allow-ttl-expiry" in printed

    # --apply trims the two whose load expires nothing and holds the other back: not trimmed, not loaded (its
    # managed-ledger and cursor znodes unchanged, as they are only while no broker opens the topic).
    state = tmp_path / "trim.state"
    first = await apply(h, ns, state, tmp_path / "apply-1.json")
    assert {x["topic"] for x in first["trimmed"]} == {str(t["acked"]), str(t["own-ttl"])}, first["trimmed"]
    assert first["held_by_ttl"] == [{"topic": held, "why": found[held]["ttl_risk"]}], first["held_by_ttl"]
    assert first["allow_ttl_expiry"] is False
    assert {json.loads(line)["topic"] for line in state.read_text().splitlines()} == {
        str(t["acked"]),
        str(t["own-ttl"]),
    }
    held_path = f"/managed-ledgers/{t['held'].managed_ledger_name}"
    held_znodes = {p: v for p, v in before.znodes.items() if p == held_path or p.startswith(held_path + "/")}
    after = await footprint(admin, stack.zookeeper_hosts, ns)
    assert len(held_znodes) == 2, held_znodes  # the managed ledger and its one cursor
    assert all(after.znodes.get(p) == v for p, v in held_znodes.items()), (held_znodes, after.znodes)
    assert stored(stack.zookeeper_hosts, t["held"]).ledger_ids == held_before.ledger_ids
    # The trims loaded the two others: their broker applies the TTL the dry run reported, and own-ttl keeps its
    # backlog.
    assert await admin.topic_policy(t["acked"], "messageTTL", applied=True) == TTL_S
    assert await admin.topic_policy(t["own-ttl"], "messageTTL", applied=True) == 0
    assert await backlog(admin, t["own-ttl"], sub) == 15

    # Asked explicitly, --apply trims it too.
    second = await apply(h, ns, state, tmp_path / "apply-2.json", "--allow-ttl-expiry")
    assert [x["topic"] for x in second["trimmed"]] == [held] and second["held_by_ttl"] == [], second
    assert second["allow_ttl_expiry"] is True
    assert await admin.topic_policy(t["held"], "messageTTL", applied=True) == TTL_S
    assert await backlog(admin, t["held"], sub) == 15
    # What the dry run said a load expires is what the broker's expiry takes: its monitor for the subscription,
    # run now with the topic's TTL instead of at the next periodic check.
    await admin._call(
        "POST", f"/admin/{t['held'].admin_path}/subscription/{sub}/expireMessages/{TTL_S}", follow_redirect=True
    )
    for _ in range(60):
        left = await backlog(admin, t["held"], sub)
        if left == 0:
            break
        await asyncio.sleep(1)
    assert left == 0, left
