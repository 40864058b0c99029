"""Ownership moves while the worker drains: bundles unloaded back and forth, the owning broker killed with
SIGKILL and started again. Invariants: no live ledger deleted (every topic reads back completely), every
orphan deleted, nothing lost (every message settled, none dead-lettered), and the epoch counters show that
decisions in flight were re-taken. Then two replicas on the Shared subscription drain one backlog."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

from testkit.admin import StagingAdmin
from testkit.footprint import listed_as_loaded
from testkit.harness import WorkerHarness, create_ledgers, pulsar_ml_metadata
from testkit.harness import ml_info as ml
from testkit.topics import count_from_earliest, eventually, ml_ledger_ids, produce
from tests.cluster.conftest import Cluster
from tests.cluster.placement import owner, spread, unload_bundle
from worker.backends.bookie_http import BookieClient
from worker.backends.http import new_session
from worker.formats.topic_name import TopicName

ENTRIES = 12


async def make_backlog(
    cluster: Cluster, ns: str, unique: str, *, orphans_per_topic: int, ghost_orphans: int
) -> tuple[list[str], dict[str, list[int]], dict[str, list[int]], str]:
    """Topics on both brokers with their listed (live) ledgers, leaked ledgers of each (orphans of a live
    topic) and ledgers of a topic that never existed (orphans by the direct route)."""
    base = f"persistent://{ns}/mv-{unique}"
    async with new_session(30) as s:
        a = StagingAdmin(cluster.admin_url, s)
        await a.create_partitioned_topic(TopicName.parse(base), 4)
        topics = [f"{base}-partition-{i}" for i in range(4)] + [f"persistent://{ns}/mvp-{unique}-{i}" for i in range(2)]
        for t in topics:
            produce(cluster.service_url, t, ENTRIES)
        owners = spread(cluster, topics)
        assert set(owners.values()) == set(cluster.admin_urls), owners
        live = {t: ml_ledger_ids(await a.internal_stats(TopicName.parse(t), base=owners[t]))[:-1] for t in topics}
    orphans = {t: create_ledgers(cluster, orphans_per_topic, pulsar_ml_metadata(t)) for t in topics}
    ghost = f"persistent://{ns}/ghost-{unique}"
    orphans[ghost] = create_ledgers(cluster, ghost_orphans, pulsar_ml_metadata(ghost))
    return topics, live, orphans, ghost


async def test_ownership_moves_mid_drain(
    cluster: Cluster,
    cluster_namespace: str,
    unique: str,
    cbookie: BookieClient,
    tmp_path: Path,
    harnesses: list[WorkerHarness],
) -> None:
    topics, live, orphans, _ = await make_backlog(
        cluster, cluster_namespace, unique, orphans_per_topic=6, ghost_orphans=8
    )
    all_orphans = [i for ids in orphans.values() for i in ids]
    all_live = [i for ids in live.values() for i in ids]
    # The worker asks a topic's owner (and so sees ownership move) once the brokers' own lists name the topic as
    # loaded, a list refreshed every statsUpdateFrequencyInSecs; before that it reads the topic's records from
    # the metadata store, where no move shows.
    async with new_session(30) as s:
        await listed_as_loaded(StagingAdmin(cluster.admin_url, s), topics)
    w = WorkerHarness(
        cluster,
        tmp_path,
        f"moves-{unique}",
        # Slow deletes keep decisions waiting for the rate limiter, i.e. in flight while ownership moves:
        # at 0.5/s, 16 decisions in flight wait ~30 s each, and the live ledgers' in-use retries (every
        # second) re-read their topic's owner all the while. At 1.5/s one clean run in three drained before
        # any move landed on a waiting decision.
        worker={
            "deletes_per_second": 0.5,
            "delete_burst": 1,
            "max_inflight": 16,
            "max_attempts": 1000,
            "in_use_retry_s": 1,
            "backoff_initial_s": 1,
            "backoff_max_s": 3,
        },
    )
    harnesses.append(w)
    w.start()
    # Interleaved across topics, live with orphans: while orphans of a topic wait for the rate limiter,
    # other messages of the same topic keep reading its live state, so a move is seen (an epoch bump) while
    # a delete decision is in flight (a re-evaluation).
    queue = [(t, ids) for t, ids in orphans.items()] + [(t, ids) for t, ids in live.items()]
    for i in range(max(len(ids) for _, ids in queue)):
        for t, ids in queue:
            if i < len(ids):
                w.send(ml(t, ids[i]))
    w.close_client()  # the test's producer must not hold a broker's shutdown up

    t0 = time.monotonic()
    moves = 0
    # 1. Bundles unloaded back and forth, without waiting for the new owner to settle in between.
    for _ in range(6):
        for t in topics[::2]:
            try:
                unload_bundle(cluster, t, cluster.other(owner(cluster, t)))
                moves += 1
            except AssertionError:
                pass  # an unload racing the previous one: ownership is in flux, which is the point
        await asyncio.sleep(1.5)
    # 2. The owner of partition 0 dies without a word, and comes back on the same data.
    victim = cluster.broker_of(owner(cluster, topics[0]))
    cluster.kill9(victim)
    await asyncio.sleep(8)
    cluster.start(victim)
    # 3. More moves after the restart.
    for _ in range(3):
        for t in topics[1::2]:
            try:
                unload_bundle(cluster, t, cluster.other(owner(cluster, t)))
                moves += 1
            except AssertionError:
                pass
        await asyncio.sleep(1.5)

    async def orphans_gone() -> bool:
        return all([await cbookie.get_metadata(i) is None for i in all_orphans])

    # 4. Ownership keeps moving until the drain ends (or a re-evaluation was seen): how many moves it takes
    # to catch a decision in flight depends on timing, not on the worker.
    deadline = time.monotonic() + 300
    k = 0
    while not await orphans_gone() and time.monotonic() < deadline:
        if w.metric("ledger_deletion_reevaluations_total") == 0:
            t = topics[k % len(topics)]
            k += 1
            try:
                unload_bundle(cluster, t, cluster.other(owner(cluster, t)))
                moves += 1
            except AssertionError:
                pass
        await asyncio.sleep(1.5)
    await eventually(orphans_gone, timeout=60, interval=2, what="every orphan deleted")
    drain_s = time.monotonic() - t0

    async def settled() -> bool:
        return w.metric("ledger_deletion_deleted_total") >= len(all_orphans)

    await eventually(settled, timeout=60, what="every orphan settled as deleted")
    bumps = w.metric("ledger_deletion_epoch_bumps_total")
    reevaluations = w.metric("ledger_deletion_reevaluations_total")
    redirects = w.metric("ledger_deletion_admin_requests_total", outcome="redirect")
    print(
        f"\nownership moves: {moves} unloads + kill -9 of {victim};"
        f" {len(all_orphans)} orphans deleted in {drain_s:.0f} s;"
        f" {len(all_live)} live ledgers kept; epoch bumps {bumps:.0f}, re-evaluations {reevaluations:.0f},"
        f" 307s seen {redirects:.0f}, redelivered after the kill (already gone)"
        f" {w.metric('ledger_deletion_deleted_total', result='already_gone'):.0f}"
    )
    assert w.proc is not None and w.proc.poll() is None, "the worker must survive ownership moves"
    assert w.metric("ledger_deletion_dlq_total") == 0
    assert w.metric("ledger_deletion_rejected_total") == 0
    assert w.metric("ledger_deletion_deleted_total", result="deleted") == len(all_orphans)
    # A broker killed before it persisted the worker's acks redelivers them: those find the ledger gone.
    # Every "already gone" must be an orphan, never a live ledger.
    gone_ids = {int(e["ledger_id"]) for e in w.log_events() if e.get("outcome") in ("already_gone", "deleted")}
    assert gone_ids == set(all_orphans), f"settled as deleted/gone but not orphans: {gone_ids - set(all_orphans)}"
    assert bumps > 0, "ownership moved under the worker but no topic's epoch moved"
    assert reevaluations > 0, "no delete decision was re-taken after its topic's owner moved"
    w.stop()
    for lid in all_live:
        assert await cbookie.get_metadata(lid) is not None, f"live ledger {lid} was deleted"
    for t in topics:
        assert count_from_earliest(cluster.service_url, t) == ENTRIES, f"{t} does not read back completely"


async def test_two_replicas_share_one_backlog(
    cluster: Cluster,
    cluster_namespace: str,
    unique: str,
    cbookie: BookieClient,
    tmp_path: Path,
    harnesses: list[WorkerHarness],
) -> None:
    topics, live, orphans, _ = await make_backlog(
        cluster, cluster_namespace, unique, orphans_per_topic=4, ghost_orphans=16
    )
    all_orphans = [i for ids in orphans.values() for i in ids]
    replicas = []
    for i, admin_url in enumerate(cluster.admin_urls):
        d = tmp_path / f"replica{i}"
        d.mkdir()
        # Same name, same topics and subscription: two replicas of one deployment (each asks its own broker).
        h = WorkerHarness(
            cluster.via(admin_url),
            d,
            f"shared-{unique}",
            worker={"deletes_per_second": 4, "delete_burst": 1, "max_attempts": 1000, "in_use_retry_s": 1},
        )
        harnesses.append(h)
        replicas.append(h.start())
    for t, ids in orphans.items():
        for lid in ids:
            replicas[0].send(ml(t, lid))
    for t, ids in live.items():
        for lid in ids:
            replicas[1].send(ml(t, lid))

    async def orphans_gone() -> bool:
        return all([await cbookie.get_metadata(i) is None for i in all_orphans])

    await eventually(orphans_gone, timeout=180, interval=1, what="every orphan deleted by the two replicas")

    async def counted() -> bool:
        return sum(h.metric("ledger_deletion_deleted_total") for h in replicas) >= len(all_orphans)

    await eventually(counted, timeout=30, what="deletions counted")
    shares = [h.metric("ledger_deletion_deleted_total", result="deleted") for h in replicas]
    print(f"\ntwo replicas: {len(all_orphans)} orphans, deleted {shares[0]:.0f} + {shares[1]:.0f}")
    assert all(s > 0 for s in shares), f"one replica did all the work: {shares}"
    assert sum(h.metric("ledger_deletion_deleted_total") for h in replicas) == len(all_orphans)
    for h in replicas:
        assert h.metric("ledger_deletion_dlq_total") == 0
        assert h.metric("ledger_deletion_rejected_total") == 0
        h.stop()
    for ids in live.values():
        for lid in ids:
            assert await cbookie.get_metadata(lid) is not None, f"live ledger {lid} was deleted"
    for t in topics:
        assert count_from_earliest(cluster.service_url, t) == ENTRIES
