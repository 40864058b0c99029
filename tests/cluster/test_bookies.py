"""Two bookies: the worker configured with both bookies' HTTP endpoints spreads its calls over them, and
either bookie deletes ledgers whatever bookie holds their entries (ensembles of one, placed by BookKeeper
on either bookie)."""

from __future__ import annotations

from pathlib import Path

from testkit.harness import WorkerHarness, create_ledgers, pulsar_ml_metadata
from testkit.topics import eventually
from tests.cluster.conftest import Cluster
from worker.backends.bookie_http import BookieClient
from worker.formats.message import LedgerComponent, LedgerType, PendingDeleteLedgerInfo


async def test_worker_spreads_bookie_calls_over_both_bookies(
    cluster: Cluster, unique: str, cbookie: BookieClient, tmp_path: Path, harnesses: list[WorkerHarness]
) -> None:
    topic = f"persistent://public/default/two-bookies-{unique}"
    ids = create_ledgers(cluster, 24, pulsar_ml_metadata(topic))
    h = WorkerHarness(
        cluster,
        tmp_path,
        f"bookies-{unique}",
        bookkeeper={"http_urls": [cluster.bookie_http_url_2]},
        worker={"max_inflight": 8, "deletes_per_second": 1000, "delete_burst": 100},
    )
    harnesses.append(h)
    h.start()
    for lid in ids:
        h.send(PendingDeleteLedgerInfo(topic, LedgerComponent.MANAGED_LEDGER, LedgerType.LEDGER, lid))

    async def gone() -> bool:
        return all([await cbookie.get_metadata(i) is None for i in ids])

    await eventually(gone, timeout=180, interval=1, what="every orphan deleted")

    async def settled() -> bool:
        return h.metric("ledger_deletion_deleted_total") >= len(ids)

    await eventually(settled, timeout=60, what="every message settled")
    assert h.metric("ledger_deletion_deleted_total", result="deleted") == len(ids)
    calls = "ledger_deletion_bookie_http_requests_total"
    per_bookie = {
        b: h.metric(calls, bookie=b.rstrip("/"), operation="delete", outcome="200")
        for b in (cluster.bookie_http_url, cluster.bookie_http_url_2)
    }
    assert sum(per_bookie.values()) == len(ids), per_bookie
    # 8 in flight against two endpoints that serve one delete at a time: both take a real share.
    assert min(per_bookie.values()) >= len(ids) // 4, per_bookie
