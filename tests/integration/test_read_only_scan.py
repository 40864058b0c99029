"""A dry run changes nothing, and a topic load racing a scan makes no live ledger look orphaned.

``scan --dry-run`` and the audit read a topic's live state from the broker that has it loaded, else from
Pulsar's metadata store (``worker.broker.live_state_reader``): asking a broker for a topic it has not
loaded (``internalStats``) would load it, and a lookup would assign its bundle. Idle topics whose bundles
nobody owns are the case that shows it: before and after the dry runs, the namespace's ledgers, its
managed-ledger and cursor znodes, its bundle owners and the topics the broker lists as loaded are
identical (``testkit.footprint``).
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import pulsar
import pytest

from testkit.footprint import footprint, stats_period_s
from testkit.orphans import delete_topic_metadata_keep_ledgers, drop_ledgers_from_metadata, quiesce
from testkit.topics import ml_ledger_ids, produce
from tests.conftest import Stack
from tests.integration.conftest import WorkerFactory
from tests.integration.helpers import (
    cli,
    compact,
    fresh_namespace,
    last_json,
    live_ids,
    live_topic_with_schema_and_cursor,
    produce_keyed,
    quiet_logger,
    worker_config,
)
from worker.backends.ledger_listing import LedgerWalk, MetadataListing
from worker.backends.pulsar_store import PulsarStore
from worker.backends.stores import Stores
from worker.broker.admin import PulsarAdmin
from worker.broker.live_state_reader import LiveStateReader
from worker.broker.loaded_topics import LoadedTopics
from worker.broker.snapshot_cache import SnapshotCache
from worker.core.metadata_stores import StoredTopic
from worker.formats.topic_name import TopicName
from worker.operations.scanner import Scanner, Verdict

pytestmark = [pytest.mark.integration, pytest.mark.timeout(900)]


async def idle_namespace(stack: Stack, admin: PulsarAdmin, ns: str, u: str) -> set[int]:
    """Idle topics of every shape, orphans among them, then every bundle of the namespace unloaded: no topic
    loaded, no bundle owned. Returns the orphans made."""
    plain = TopicName.parse(f"persistent://{ns}/plain-{u}")
    live_topic_with_schema_and_cursor(stack.service_url, str(plain), f"sub-{u}")
    partitioned = TopicName.parse(f"persistent://{ns}/parts-{u}")
    await admin.create_partitioned_topic(partitioned, 2)
    live_topic_with_schema_and_cursor(stack.service_url, str(partitioned), f"psub-{u}")
    compacted = TopicName.parse(f"persistent://{ns}/compacted-{u}")
    produce_keyed(stack.service_url, compacted, 12)
    await compact(stack, compacted)
    dropped = TopicName.parse(f"persistent://{ns}/dropped-{u}")
    produce(stack.service_url, str(dropped), 15)
    await quiesce(admin, plain)
    orphans = set(
        await drop_ledgers_from_metadata(
            admin, stack.zookeeper_hosts, dropped, ml_ledger_ids(await admin.internal_stats(dropped))[:2]
        )
    )
    gone = TopicName.parse(f"persistent://{ns}/gone-{u}")
    produce(stack.service_url, str(gone), 8)
    orphans |= set(await delete_topic_metadata_keep_ledgers(admin, stack.zookeeper_hosts, gone))
    await admin._call("PUT", f"/admin/v2/namespaces/{ns}/unload")
    return orphans


async def test_dry_runs_change_nothing(
    stack: Stack, unique: str, admin: PulsarAdmin, tmp_path: Path, spark: Any, make_worker: WorkerFactory
) -> None:
    ns = await fresh_namespace(admin, f"ldw-ro-{unique}")
    orphans = await idle_namespace(stack, admin, ns, unique)
    await asyncio.sleep(1.5)  # past --min-age 1s
    h = worker_config(make_worker, f"ro-{unique}")
    before = await footprint(admin, stack.zookeeper_hosts, ns)
    assert before.bundle_owners == {}, "the namespace's bundles are still owned"
    started = time.monotonic()

    r = await asyncio.to_thread(cli, h.config_path, "scan", "--dry-run", "--json", "-n", ns, "--min-age", "1s")
    assert r.returncode == 0, r.stderr[-3000:]
    scan = last_json(r.stdout)
    assert {d["ledger_id"] for d in scan["orphans"]} >= orphans, scan
    assert scan["counts"]["in_use"] > 0 and scan["counts"]["skipped"] == 0, scan

    from worker.cli import main

    reports = tmp_path / "audit"
    rc = await asyncio.to_thread(
        main,
        [
            "audit",
            "--config",
            str(h.config_path),
            "--no-buckets",
            "-n",
            ns,
            "--min-age",
            "1s",
            "--report-dir",
            str(reports),
        ],
    )
    assert rc == 0
    audited = {r["ledger_id"]: r["verdict"] for r in spark.read.parquet(str(reports / "audit" / "ledgers")).collect()}
    assert {lid for lid, v in audited.items() if v == "orphan"} >= orphans

    after = await footprint(admin, stack.zookeeper_hosts, ns)
    changes = before.differences(after)
    changes.pop("loaded", None)  # a broker's list lags its loads by up to statsUpdateFrequencyInSecs: below
    assert changes == {}, changes
    # Once the broker has refreshed its list since the last read above, it still serves none of them.
    await asyncio.sleep(max(0.0, await stats_period_s(admin) + 5 - (time.monotonic() - started)))
    final = await footprint(admin, stack.zookeeper_hosts, ns)
    assert final.loaded == frozenset(), final.loaded
    assert before.differences(final).keys() <= {"loaded"}


class LoadWhileReading(PulsarStore):
    """Pulsar's metadata store read as usual, except that the broker loads the topic (a real load:
    ``internalStats``) at the chosen point of the read, before the read goes on: a load racing the scan, on
    the real stack, at a known moment."""

    def __init__(self, kv: Any, admin: PulsarAdmin, when: str) -> None:
        super().__init__(kv)
        self.admin = admin
        self.when = when
        self.loaded: list[TopicName] = []
        self.read: dict[TopicName, set[int]] = {}

    async def _load(self, topic: TopicName) -> None:
        await self.admin.internal_stats(topic)
        self.loaded.append(topic)

    async def stored_topic(self, topic: TopicName) -> StoredTopic | None:
        got = await super().stored_topic(topic)
        if got is not None:
            self.read[topic] = set(got.managed_ledger.ledger_ids) | {
                c.cursors_ledger_id for c in got.cursors.values() if c.cursors_ledger_id >= 0
            }
        if self.when == "after the read" and got is not None:
            await self._load(topic)
        return got

    async def _cursors(self, topic: TopicName, path: str) -> Any:
        if self.when == "between the managed ledger and its cursors":
            await self._load(topic)
        return await super()._cursors(topic, path)


@pytest.mark.parametrize("when", ["after the read", "between the managed ledger and its cursors"])
async def test_a_load_racing_the_scan_makes_no_live_ledger_an_orphan(
    stack: Stack, unique: str, admin: PulsarAdmin, when: str
) -> None:
    """The stored read is taken, then the broker loads the topic (a new ledger; retention 0 and every
    message acknowledged, so the load may drop consumed ledgers), then the scan decides on what it read.
    Nothing it calls an orphan may be referenced by the loaded topic, and what it planted is found."""
    ns = await fresh_namespace(admin, f"ldw-race-{unique}")
    await admin.set_retention(ns, 0, 0)
    topics = []
    for i in range(3):
        t = TopicName.parse(f"persistent://{ns}/race{i}-{unique}")
        client = pulsar.Client(stack.service_url, operation_timeout_seconds=30, logger=quiet_logger())
        try:
            consumer = client.subscribe(str(t), f"sub-{unique}", consumer_type=pulsar.ConsumerType.Shared)
            produce(stack.service_url, str(t), 14)
            for _ in range(10):
                consumer.acknowledge(consumer.receive(timeout_millis=10_000))
            consumer.close()
        finally:
            client.close()
        await quiesce(admin, t)
        topics.append(t)
    orphans = set(
        await drop_ledgers_from_metadata(
            admin, stack.zookeeper_hosts, topics[0], ml_ledger_ids(await admin.internal_stats(topics[0]))[:1]
        )
    )
    await admin._call("PUT", f"/admin/v2/namespaces/{ns}/unload")
    await asyncio.sleep(1.5)

    async with Stores(f"zk:{stack.zookeeper_hosts}") as zk:
        metadata = LoadWhileReading(zk.kv, admin, when)
        # No broker lists these topics as loaded (the lists are read before any load): every one is read
        # from the metadata store, and loaded right then.
        loaded = LoadedTopics(admin, metadata, ttl_s=3600)
        reader = LiveStateReader(admin, metadata=metadata, loaded=loaded)
        snapshots = SnapshotCache(reader, ttl_s=0, max_size=64, metadata_store=zk.pulsar)
        listing = MetadataListing(
            {md.ledger_id: md async for chunk in LedgerWalk(zk.bookkeeper).chunks() for md in chunk}
        )
        scanner = Scanner(listing, snapshots, zk.pulsar, min_age_s=1, namespaces=[ns])
        report = await scanner.scan()
    assert set(topics) <= set(metadata.loaded)  # (the namespace's __change_events too)
    found = {d.ledger_id for d in report.orphans}
    assert orphans <= found
    verdicts = {d.ledger_id: d.verdict for d in report.decisions}
    dropped: set[int] = set()
    for t in topics:
        live = await live_ids(admin, t)  # the loaded topic, asked of its broker
        assert not live & found, (t, sorted(live & found))
        read = metadata.read[t]
        # The load added a ledger newer than anything read, and may have dropped some it had read.
        assert max(live) > max(read), (t, sorted(read), sorted(live))
        dropped |= read - live
    # The topic reloaded by the orphan maker had an empty current ledger, which its next load dropped: the
    # scan, which read it listed, kept it (Pulsar deletes it), and never called it an orphan.
    assert dropped and all(verdicts[lid] is Verdict.IN_USE for lid in dropped), (sorted(dropped), verdicts)
    assert not [d for d in report.decisions if d.verdict is Verdict.SKIPPED], report.to_dict()
