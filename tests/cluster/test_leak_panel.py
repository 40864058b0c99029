"""The disk coming back, on the cluster profile's two bookies, seen through a real Prometheus.

A worker with ``bookkeeper.gc_trigger_bytes`` deletes real orphans (48 MB of a topic whose metadata was
deleted) through the bookie HTTP API of both bookies (tools/reclaim_demo.py's scenario); on the last
deletion it asks both bookies for a garbage collection. Prometheus (Debian's) scrapes the worker, both
brokers, both bookies' own /metrics and a Pushgateway holding the audit's push. Then:

- each bookie's entry logs shrank after the collection, by what its own counters say it reclaimed;
- every query of the dashboard's leak row returns data from those real series, and the worker's deleted
  bytes, the bookies' reclaimed bytes and Pulsar's storage size read through Prometheus are the real ones.
"""

from __future__ import annotations

import json
import subprocess
import time
import urllib.parse
from pathlib import Path
from typing import Any

from testkit.topics import eventually
from tests.cluster.conftest import Cluster
from tests.integration.prometheus_helpers import DASHBOARD, Prom, run_prometheus, selectors
from tests.ops.promql import GRAFANA_VARS
from tools import dashboards
from tools.reclaim_demo import RECLAIMED_COMPACTION, RECLAIMED_DELETION, Report, run_reclaim
from worker.nightly import metrics as nm

LEAK_ROW = "The leak"


def leak_row_queries(board: dict[str, Any]) -> list[tuple[str, str]]:
    """(panel title, PromQL) of every panel in the dashboard's leak row, Grafana variables substituted."""
    out: list[tuple[str, str]] = []
    in_row = False
    for p in board["panels"]:
        if p["type"] == "row":
            in_row = p["title"].startswith(LEAK_ROW)
            continue
        if in_row:
            for t in p["targets"]:
                expr = t["expr"]
                for k, v in GRAFANA_VARS.items():
                    expr = expr.replace(k, v)
                out.append((p["title"], expr))
    return out


def test_the_leak_row_closes_the_loop() -> None:
    """One row: Pulsar's logical storage, the bookies' disk and reclaimed bytes, our deleted bytes, the last
    audit's orphan bytes."""
    exprs = "\n".join(q for _, q in leak_row_queries(json.loads(DASHBOARD.read_text())))
    for needed in (
        "pulsar_storage_size",
        dashboards.BOOKIE_ENTRY_LOGS,
        '{__name__=~"bookie_ledger_dir_.+_usage"}',
        RECLAIMED_DELETION,
        RECLAIMED_COMPACTION,
        "ledger_deletion_freed_bytes_total",
        nm.AUDIT_ORPHAN_BYTES,
    ):
        assert needed in exprs, needed


def start_prometheus(
    tmp_path: Path, cluster: Cluster, worker_port: int, gateway: str
) -> tuple[Prom, subprocess.Popen[bytes]]:
    def target(url: str) -> str:
        return urllib.parse.urlparse(url).netloc

    cfg = {
        "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
        "scrape_configs": [
            {"job_name": "ledger-deletion-worker", "static_configs": [{"targets": [f"127.0.0.1:{worker_port}"]}]},
            {
                "job_name": "pulsar",
                "scrape_interval": "3s",
                "scrape_timeout": "3s",
                "metrics_path": "/metrics/",
                "static_configs": [{"targets": [target(u) for u in cluster.admin_urls]}],
            },
            {
                "job_name": "bookie",
                "static_configs": [{"targets": [target(cluster.bookie_http_url), target(cluster.bookie_http_url_2)]}],
            },
            {"job_name": "pushgateway", "honor_labels": True, "static_configs": [{"targets": [gateway]}]},
        ],
    }
    return run_prometheus(tmp_path, cfg)


def _value(prom: Prom, expr: str) -> float:
    body = prom.query(expr)
    assert body["status"] == "success", (expr, body)
    result = body["data"]["result"]
    return sum(float(r["value"][1]) for r in result)


async def test_bookies_reclaim_what_the_worker_deleted(cluster: Cluster, tmp_path: Path, pushgateway: str) -> None:
    procs: list[subprocess.Popen[bytes]] = []
    phases: dict[str, float] = {}
    prom_box: list[Prom] = []

    def with_worker(port: int) -> None:
        prom, proc = start_prometheus(tmp_path, cluster, port, pushgateway)
        procs.append(proc)
        prom_box.append(prom)

    def on_phase(phase: str) -> None:
        if prom_box and phase == "after_deletes":
            # What Prometheus has scraped of the bookies' reclaimed bytes before the collection (once it has
            # scraped both bookies: it started with the worker, moments ago).
            deadline = time.monotonic() + 30
            while _value(prom_box[0], f"count({RECLAIMED_DELETION})") < 2 and time.monotonic() < deadline:
                time.sleep(1)
            phases["bookies_scraped"] = _value(prom_box[0], f"count({RECLAIMED_DELETION})")
            phases[phase] = _value(prom_box[0], f"sum({RECLAIMED_DELETION}) + sum({RECLAIMED_COMPACTION})")

    try:
        report: Report = await run_reclaim(
            cluster,
            [cluster.bookie_http_url, cluster.bookie_http_url_2],
            tmp_path,
            name="cluster profile (2 bookies)",
            on_phase=on_phase,
            worker_http_port=with_worker,
        )
        print("\n" + report.table())
        prom = prom_box[0]

        # Both bookies were asked, and both gave disk back: entry logs shrank by at least what their own
        # counters say they reclaimed, less what the other tests wrote meanwhile (nothing else writes here).
        assert set(report.gc_requests) == {f"{u} 200" for u in (cluster.bookie_http_url, cluster.bookie_http_url_2)}
        for url, after in report.phases["after_gc"].items():
            before = report.phases["after_deletes"][url]
            reclaimed = (after[RECLAIMED_DELETION] - before[RECLAIMED_DELETION]) + (
                after[RECLAIMED_COMPACTION] - before[RECLAIMED_COMPACTION]
            )
            assert reclaimed > 1_000_000, (url, before, after)
            assert before["entry_logs"] - after["entry_logs"] > 0.9 * reclaimed, (url, before, after)
        assert report.total("after_deletes", "entry_logs") - report.total("after_gc", "entry_logs") > 0.5 * (
            report.written_bytes
        ), report.table()

        # The audit's push, made the way the nightly job makes it, with the orphans this run found.
        nm.push(
            pushgateway,
            nm.JOB_AUDIT,
            nm.run_registry(
                failed=False,
                duration_s=1,
                rows={"orphan": report.orphans},
                orphans={"bookkeeper": (report.orphans, report.orphan_bytes)},
            ),
        )

        missing: list[str] = []

        async def answered() -> bool:
            missing.clear()
            for title, expr in leak_row_queries(json.loads(DASHBOARD.read_text())):
                body = prom.query(expr)
                assert body["status"] == "success", (title, expr, body)
                missing.extend(f"{title}: {sel} (no series)" for sel in selectors(expr) if not prom.series(sel))
                if not body["data"]["result"]:
                    missing.append(f"{title}: {expr}")
            return not missing

        try:
            await eventually(answered, timeout=60, interval=2, what="every leak-row query returning data")
        except AssertionError:
            raise AssertionError("leak-row queries without data:\n" + "\n".join(missing)) from None

        # The numbers through Prometheus are the real ones (the worker has stopped: its last scraped value).
        deleted = _value(
            prom, 'sum(max_over_time(ledger_deletion_freed_bytes_total{job="ledger-deletion-worker"}[10m]))'
        )
        assert deleted == report.orphan_bytes, (deleted, report.orphan_bytes)
        reclaimed_now = _value(prom, f"sum({RECLAIMED_DELETION}) + sum({RECLAIMED_COMPACTION})")
        # Measured with both bookies' counters scraped (a fresh cluster's bookies have reclaimed nothing
        # before this collection: 0 is a real value), and the collection added more than a MB to them.
        assert phases.get("bookies_scraped") == 2, phases
        assert reclaimed_now - phases["after_deletes"] > 1_000_000, (phases, reclaimed_now)
        assert _value(prom, "sum(pulsar_storage_size)") > 0
        orphan_query = f'{nm.AUDIT_ORPHAN_BYTES}{{job="{nm.JOB_AUDIT}",class="bookkeeper"}}'

        async def pushed_orphan_bytes() -> bool:
            return _value(prom, orphan_query) == report.orphan_bytes

        try:
            await eventually(pushed_orphan_bytes, timeout=20, interval=1, what="the audit's orphan bytes scraped")
        except AssertionError:
            raise AssertionError((prom.query(orphan_query), report.orphan_bytes)) from None
        orphan_bytes = _value(prom, orphan_query)
        print(
            f"through Prometheus: deleted {deleted:,.0f} B; the bookies' reclaimed counters "
            f"{phases['after_deletes']:,.0f} B after the deletes, {reclaimed_now:,.0f} B after the collection "
            f"(+{reclaimed_now - phases['after_deletes']:,.0f}); audit orphan bytes {orphan_bytes:,.0f}"
        )
    finally:
        for proc in procs:
            proc.terminate()
            proc.wait(timeout=30)
