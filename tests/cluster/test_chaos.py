"""The chaos run (``make chaos``): over a thousand ledgers on the cluster profile, drained while the
worker is killed with SIGKILL again and again (a supervisor restarts it), a broker restarts, and the
bookie HTTP API fails 20 % of requests and stalls others through a loopback fault proxy.

Invariants asserted at the end:
- 0 live ledgers deleted: every listed ledger still exists and every topic reads back completely;
- 0 orphans left: in BookKeeper and in S3;
- 0 pending deletions lost: pending and retry backlogs are 0 and every message's ledger reached deleted /
  already gone (orphans) or the DLQ with a reason (forgeries, live ledgers once their attempts ran out);
- the metrics agree: the last worker incarnation's counters equal the outcomes its own log recorded.
"""

from __future__ import annotations

import asyncio
import os
import random
import threading
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import boto3
import pytest

from testkit.admin import StagingAdmin
from testkit.harness import WorkerHarness, create_ledgers, pulsar_ml_metadata
from testkit.harness import ml_info as ml
from testkit.topics import count_from_earliest, eventually, ml_ledger_ids, produce
from tests.cluster.conftest import Cluster
from tests.cluster.placement import spread
from tests.integration.helpers import HttpProxy
from worker.backends.bookie_http import BookieClient
from worker.backends.http import new_session
from worker.backends.stores import Stores
from worker.broker.admin import PulsarAdmin
from worker.formats.message import LedgerComponent, LedgerType, OffloadContext, PendingDeleteLedgerInfo
from worker.formats.topic_name import TopicName

# Setup alone (12 JVM runs of CreateLedger, two offloads) takes minutes on 2 shared cores.
pytestmark = [pytest.mark.chaos, pytest.mark.timeout(3600)]

TOPICS = 10
ENTRIES = 30  # 6 ledgers a topic (5 entries each)
ORPHANS_PER_TOPIC = 80
GHOST_ORPHANS = 100
STALE_COPIES = 40
FORGED = 20
WORKER_KILLS = 5
FAIL_RATIO = 0.2
STALL_RATIO = 0.1
STALL_S = 2.0


def off(topic: str, lid: int, ctx: OffloadContext) -> PendingDeleteLedgerInfo:
    return PendingDeleteLedgerInfo(
        topic, LedgerComponent.MANAGED_LEDGER, LedgerType.OFFLOAD_LEDGER, lid, offload_context=ctx
    )


class FaultPlan:
    """20 % of bookie HTTP requests answer 500, 10 % of the others are held 2 s; counted."""

    def __init__(self, seed: int = 7) -> None:
        self.rng = random.Random(seed)
        self.lock = threading.Lock()
        self.failed = 0
        self.stalled = 0
        self.on = True

    def fail(self, method: str, path: str) -> tuple[int, str] | None:
        with self.lock:
            if self.on and self.rng.random() < FAIL_RATIO:
                self.failed += 1
                return 500, "chaos: injected failure"
        return None

    def stall(self, method: str, path: str) -> float | None:
        with self.lock:
            if self.on and self.rng.random() < STALL_RATIO:
                self.stalled += 1
                return STALL_S
        return None


async def offload(admin: PulsarAdmin, owner: str, topic: TopicName) -> list[int]:
    a = StagingAdmin(owner, admin.session)
    current = max(ml_ledger_ids(await a.internal_stats(topic)))
    await a.trigger_offload(topic, current, 0)

    async def finished() -> dict[str, Any] | None:
        st = await a.offload_status(topic)
        return st if st.get("status") in ("SUCCESS", "ERROR") else None

    st = await eventually(finished, timeout=180, what=f"the offload of {topic}")
    assert st["status"] == "SUCCESS", st
    return [int(ld["ledgerId"]) for ld in (await a.internal_stats(topic))["ledgers"] if ld.get("offloaded")]


async def test_chaos_run(
    cluster: Cluster, cluster_namespace: str, unique: str, cbookie: BookieClient, tmp_path: Path
) -> None:
    t_setup = time.monotonic()
    # The worker's log (every incarnation) is the run's record: keep it where LDW_CHAOS_DIR says.
    workdir = Path(os.environ.get("LDW_CHAOS_DIR") or tmp_path)
    os.makedirs(workdir, exist_ok=True)
    topics = [f"persistent://{cluster_namespace}/chaos-{unique}-{i}" for i in range(TOPICS)]
    for t in topics:
        produce(cluster.service_url, t, ENTRIES)
    owners = spread(cluster, topics)
    s3 = boto3.client(
        "s3",
        endpoint_url=cluster.s3_endpoint,
        region_name="us-east-1",
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
    )
    live: dict[str, list[int]] = {}
    offloaded: dict[str, list[int]] = {}
    async with new_session(60) as session:
        admin = StagingAdmin(cluster.admin_url, session)
        for t in topics[:2]:
            offloaded[t] = await offload(admin, owners[t], TopicName.parse(t))
            assert offloaded[t], f"nothing offloaded on {t}"
        for t in topics:
            stats = await StagingAdmin(owners[t], session).internal_stats(TopicName.parse(t))
            live[t] = ml_ledger_ids(stats)[:-1]
    async with Stores(f"zk:{cluster.zookeeper_hosts}") as zk:
        live_ctx: dict[tuple[str, int], OffloadContext] = {}
        for t, ids in offloaded.items():
            md = await zk.pulsar.stored_topic(TopicName.parse(t))
            assert md is not None
            for ld in md.managed_ledger.ledgers:
                o = ld.offload
                if ld.ledger_id in ids and o is not None and o.complete and o.uuid is not None:
                    live_ctx[(t, ld.ledger_id)] = OffloadContext.from_uuid(
                        o.uuid, o.driver_name, dict(o.driver_metadata)
                    )
    # Failed earlier offload attempts: objects under other uuids, tagged like the offloader's. Orphans.
    stale: list[tuple[str, int, OffloadContext]] = []
    some_ctx = next(iter(live_ctx.values()))
    for i in range(STALE_COPIES):
        (t, lid) = list(live_ctx)[i % len(live_ctx)]
        ctx = OffloadContext.from_uuid(uuid.uuid4(), some_ctx.driver_name, dict(some_ctx.driver_metadata))
        for key in (f"{ctx.uuid}-ledger-{lid}", f"{ctx.uuid}-ledger-{lid}-index"):
            s3.put_object(
                Bucket=cluster.s3_bucket,
                Key=key,
                Body=b"partial",
                Metadata={"ManagedLedgerName": TopicName.parse(t).managed_ledger_name},
            )
        stale.append((t, lid, ctx))
    orphans = {t: create_ledgers(cluster, ORPHANS_PER_TOPIC, pulsar_ml_metadata(t)) for t in topics}
    ghost = f"persistent://{cluster_namespace}/chaos-ghost-{unique}"
    orphans[ghost] = create_ledgers(cluster, GHOST_ORPHANS, pulsar_ml_metadata(ghost))
    foreign = create_ledgers(cluster, FORGED, {"application": "not-pulsar"})
    all_orphans = [i for ids in orphans.values() for i in ids]
    all_live = [i for ids in live.values() for i in ids]
    n_ledgers = len(all_orphans) + len(all_live) + len(live_ctx) + len(stale) + len(foreign)
    setup_s = time.monotonic() - t_setup

    plan = FaultPlan()
    proxy = HttpProxy(cluster.bookie_http_url)
    proxy.fault(plan.fail)
    proxy.stall(plan.stall)
    w = WorkerHarness(
        cluster,
        workdir,
        f"chaos-{unique}",
        bookkeeper={"http_url": proxy.url},
        offload={
            "s3_targets": [
                {
                    "bucket": cluster.s3_bucket,
                    "endpoint": cluster.s3_endpoint,
                    "region": "us-east-1",
                    "access_key_id": "testing",
                    "secret_access_key": "testing",
                }
            ]
        },
        worker={
            "max_inflight": 32,
            "deletes_per_second": 200,
            "delete_burst": 32,
            "max_attempts": 25,
            "in_use_retry_s": 1,
            "backoff_initial_s": 0.5,
            "backoff_max_s": 3,
        },
    )
    print(f"\nchaos run: worker log {w.log_path}", flush=True)
    try:
        w.start()
        sent = 0
        for t, ids in orphans.items():
            for lid in ids:
                w.send(ml(t, lid))
                sent += 1
        for t, ids in live.items():
            for lid in ids:
                w.send(ml(t, lid))
                sent += 1
        for (t, lid), ctx in live_ctx.items():
            w.send(off(t, lid, ctx))
            sent += 1
        for t, lid, ctx in stale:
            w.send(off(t, lid, ctx))
            sent += 1
        for lid in foreign:
            w.send(ml(topics[0], lid))
            sent += 1
        w.close_client()
        t0 = time.monotonic()

        kills = 0
        broker_restarted = ""

        async def supervisor() -> None:
            nonlocal kills, broker_restarted
            for i in range(WORKER_KILLS):
                await asyncio.sleep(12)
                w.kill9()
                kills += 1
                await asyncio.to_thread(w.start, 120)
                if i == 1:
                    # A broker restarts (graceful stop, start on the same data) while the worker drains.
                    broker_restarted = "broker2"
                    await asyncio.to_thread(cluster.stop, "broker2")
                    await asyncio.to_thread(cluster.start, "broker2")

        await supervisor()

        # Asked of ZooKeeper, not of the bookie HTTP API: that API serves one request at a time, and
        # polling ~900 ledgers through it would starve the worker's own deletes.
        async with Stores(f"zk:{cluster.zookeeper_hosts}") as zk:

            async def orphans_gone() -> bool:
                for i in all_orphans:
                    if await zk.bookkeeper.ledger_metadata_exists(i):
                        return False
                return not any(_exists(s3, cluster.s3_bucket, f"{ctx.uuid}-ledger-{lid}") for _, lid, ctx in stale)

            await eventually(orphans_gone, timeout=1500, interval=10, what="every orphan gone from BookKeeper and S3")
        drain_orphans_s = time.monotonic() - t0

        async def queue_empty() -> bool:
            return await _backlog(cluster, w) == 0

        await eventually(queue_empty, timeout=900, interval=3, what="pending and retry backlogs at 0")
        drain_s = time.monotonic() - t0
        plan.on = False

        last_metrics = {
            k: w.metric(f"ledger_deletion_{k}_total")
            for k in ("received", "deleted", "rejected", "dlq", "retried", "acked", "in_use")
        }
        w.stop()
    finally:
        w.close()
        proxy.close()

    events = w.log_events()
    # Per ledger (and copy), what the daemon settled, across every incarnation.
    final: dict[tuple[str, int], set[str]] = {}
    outcomes = Counter()
    for e in events:
        if "outcome" in e and "ledger_id" in e:
            outcomes[e["outcome"]] += 1
            final.setdefault((e.get("ledger_type", "LEDGER"), int(e["ledger_id"])), set()).add(e["outcome"])
    for lid in all_orphans:
        got = final.get(("LEDGER", lid), set())
        assert got & {"deleted", "already_gone"}, f"orphan {lid}: {got}"
    for _, lid, _ in stale:
        assert final.get(("OFFLOAD_LEDGER", lid), set()) & {"deleted", "already_gone"}
    async with Stores(f"zk:{cluster.zookeeper_hosts}") as zk:
        for lid in all_live:
            assert "deleted" not in final.get(("LEDGER", lid), set()), f"live ledger {lid} deleted"
            assert await zk.bookkeeper.ledger_metadata_exists(lid), f"live ledger {lid} missing"
        for lid in foreign:
            # A failed or stalled metadata read (the fault proxy) is "transient" first, then retried;
            # what matters is that it ends rejected and is never deleted.
            got = final.get(("LEDGER", lid), set())
            assert "rejected" in got and not got & {"deleted", "already_gone"}, f"forged {lid}: {got}"
            assert await zk.bookkeeper.ledger_metadata_exists(lid)
    for (_t, lid), ctx in live_ctx.items():
        assert _exists(s3, cluster.s3_bucket, f"{ctx.uuid}-ledger-{lid}"), f"live offloaded copy of {lid} deleted"
    for t in topics:
        assert count_from_earliest(cluster.service_url, t) == ENTRIES, f"{t} does not read back completely"
    dead = w.read_dlq()
    dead_keys = {(m.properties().get("reason"), m.properties().get("last_error")) for m in dead}
    dead_ledgers = set()
    from worker.formats.message import decode

    for m in dead:
        try:
            info = decode(m.data())
            dead_ledgers.add((info.ledger_type.value, info.ledger_id))
        except Exception:
            pass
    expected_dead = (
        {("LEDGER", i) for i in all_live}
        | {("LEDGER", i) for i in foreign}
        | {("OFFLOAD_LEDGER", lid) for (_, lid) in live_ctx}
    )
    assert dead_ledgers == expected_dead, (
        f"DLQ holds {len(dead_ledgers)} ledgers, expected {len(expected_dead)}: "
        f"missing {sorted(expected_dead - dead_ledgers)[:10]}, extra {sorted(dead_ledgers - expected_dead)[:10]}"
    )
    # The last incarnation's counters agree with what it logged.
    since = max(i for i, e in enumerate(events) if e.get("event") == "worker ready")
    tail = Counter(e["outcome"] for e in events[since:] if "outcome" in e and "ledger_id" in e)
    assert last_metrics["deleted"] == tail["deleted"] + tail["already_gone"], (last_metrics, tail)
    assert last_metrics["rejected"] == tail["rejected"], (last_metrics, tail)

    redeliveries = sum(1 for e in events if e.get("event") == "ledger already gone")
    retries = sum(1 for e in events if e.get("event") == "retry scheduled")
    print(
        "\n== chaos run figures ==\n"
        f"ledgers: {n_ledgers} over {len(topics) + 1} topics (orphans {len(all_orphans)} in BookKeeper,"
        f" {len(stale)} stale offloaded copies in S3, live {len(all_live)} + {len(live_ctx)} offloaded,"
        f" forged {len(foreign)}); messages sent {sent}; setup {setup_s:.0f} s\n"
        f"faults: {plan.failed} bookie HTTP requests failed (500), {plan.stalled} stalled {STALL_S:.0f} s"
        f" (of {len(proxy.requests)} proxied); worker kill -9 x{kills} (restarted each time);"
        f" broker restart: {broker_restarted}\n"
        f"outcomes logged: {dict(outcomes)}; retries scheduled {retries};"
        f" redelivered to an already-gone ledger {redeliveries}\n"
        f"DLQ: {len(dead)} messages, reasons {sorted(dead_keys)}\n"
        f"time: orphans gone after {drain_orphans_s:.0f} s, queue at 0 after {drain_s:.0f} s\n"
        f"last incarnation's counters: {last_metrics}"
    )
    assert kills >= WORKER_KILLS and plan.failed > 0 and plan.stalled > 0


def _exists(s3: Any, bucket: str, key: str) -> bool:
    try:
        s3.head_object(Bucket=bucket, Key=key)
        return True
    except s3.exceptions.ClientError:
        return False


async def _backlog(cluster: Cluster, h: WorkerHarness) -> float:
    async with new_session(30) as s:
        admin = StagingAdmin(cluster.admin_url, s)
        sub = "ledger-deletion-worker"
        pending = await admin.partitioned_stats(TopicName.parse(h.topics["pending"]))
        retry = await admin.stats(TopicName.parse(h.topics["retry"]))
        return float(
            (pending["subscriptions"].get(sub) or {}).get("msgBacklog", 0)
            + (retry["subscriptions"].get(sub) or {}).get("msgBacklog", 0)
        )
