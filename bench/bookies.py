"""Deletes spread over every bookie: the bookie HTTP route's rate with one bookie endpoint and with two,
on the cluster profile of the local stack (two bookies), measured side by side in one run.

``make bench-bookies`` (brings ``PROFILE=cluster`` up first) or ``python -m bench.bookies``. A bookie's
HTTP server deletes one ledger at a time (a BookKeeper client built per call), so one endpoint is a fixed
ceiling; any bookie deletes any ledger, so the worker's ``bookkeeper.http_urls`` multiplies it. Rows:

- raw: concurrent DELETEs on bookie 1 only, then the same number split over both bookies at once;
- worker: the real daemon draining N orphans (direct route) with ``http_url`` only, then with
  ``http_urls`` naming the second bookie too; same ``max_inflight``, rate limit out of the way.

The goal (issue 9): two bookies >= 1.8x one. Knobs: ``BENCH_BOOKIES_N`` (200), ``BENCH_CONCURRENCY`` (16).
"""

from __future__ import annotations

import asyncio
import os
import time
import uuid
from datetime import UTC, datetime
from typing import Any

from bench import drain, ledgers, raw, report
from bench.env import OUT
from bench.result import Row
from bench.run import _loadavg, _machine
from testkit.harness import pulsar_ml_metadata
from testkit.stack import Stack, stack_env, stack_from_env
from worker.formats.message import LedgerComponent, LedgerType, PendingDeleteLedgerInfo

GOAL = 1.8


def _cluster() -> tuple[Stack, str]:
    return stack_from_env("cluster"), stack_env("cluster")["BOOKIE_HTTP_URL_2"]


async def _raw_both(b1: str, b2: str, ids: list[int], c: int, deadline_s: float) -> Row:
    """Half the ids on each bookie at once, c/2 in flight on each: the two bookies' combined ceiling."""
    half = len(ids) // 2
    t = time.monotonic()
    r1, r2 = await asyncio.gather(
        raw.bookie_concurrent(b1, ids[:half], max(1, c // 2), deadline_s),
        raw.bookie_concurrent(b2, ids[half:], max(1, c // 2), deadline_s),
    )
    row = Row(
        f"raw-bookies2-c{c}",
        f"raw bookie HTTP DELETE, {c} in flight over 2 bookies",
        "raw",
        "-",
        "bookie-http",
        c,
        len(ids),
    )
    row.completed = r1.completed + r2.completed
    row.errors = r1.errors + r2.errors
    row.finish(time.monotonic() - t)
    lat = [x for x in (r1.latency_mean_s, r2.latency_mean_s) if x is not None]
    row.latency_mean_s = sum(lat) / len(lat) if lat else None
    row.latency_source = "per call, measured (mean of the two bookies' means)"
    return row


async def amain() -> int:
    n = int(os.environ.get("BENCH_BOOKIES_N", "200"))
    c = int(os.environ.get("BENCH_CONCURRENCY", "16"))
    s, b2 = _cluster()
    b1 = s.bookie_http_url
    OUT.mkdir(parents=True, exist_ok=True)
    run_id = uuid.uuid4().hex[:8]
    t0 = time.monotonic()
    meta: dict[str, Any] = {
        "run_id": run_id,
        "bench": "bookies",
        "started": datetime.now(UTC).isoformat(timespec="seconds"),
        "n": n,
        "concurrency": c,
        "machine": _machine(),
        "bookies": [b1, b2],
        "loadavg_before": _loadavg(),
    }
    gone = f"persistent://public/default/ldw-bench-bookies-{run_id}"
    groups = ["raw-1", "raw-2", "worker-1", "worker-2"]
    print(f"[bench] creating {n * len(groups)} ledgers on the cluster profile ({s.zookeeper_hosts}) ...", flush=True)
    t = time.monotonic()
    made = await asyncio.to_thread(ledgers.create, s, n * len(groups), pulsar_ml_metadata(gone), timeout_s=600)
    meta["create_s"] = round(time.monotonic() - t, 1)
    ids = {g: made[i * n : (i + 1) * n] for i, g in enumerate(groups)}
    deadline = 60 + n * 0.5

    rows: list[Row] = []
    print("[bench] raw, one bookie ...", flush=True)
    one = await raw.bookie_concurrent(b1, ids["raw-1"], c, deadline)
    one.key, one.what = f"raw-bookie1-c{c}", f"raw bookie HTTP DELETE, {c} in flight on bookie 1"
    rows.append(one)
    print("[bench] raw, two bookies ...", flush=True)
    rows.append(await _raw_both(b1, b2, ids["raw-2"], c, deadline))

    def infos(g: str) -> list[PendingDeleteLedgerInfo]:
        return [PendingDeleteLedgerInfo(gone, LedgerComponent.MANAGED_LEDGER, LedgerType.LEDGER, x) for x in ids[g]]

    for g, urls, what in (
        ("worker-1", [], f"worker, bookie HTTP on 1 bookie, max_inflight={c}"),
        ("worker-2", [b2], f"worker, bookie HTTP over 2 bookies (http_urls), max_inflight={c}"),
    ):
        print(f"[bench] {what} ...", flush=True)
        row = await drain.drain(
            s,
            OUT,
            key=f"{g}-c{c}",
            what=what,
            run_id=run_id,
            infos=infos(g),
            route="direct",
            concurrency=c,
            deadline_s=deadline,
            bookkeeper={"http_urls": urls},
        )
        rows.append(row)

    by = {r.key: r for r in rows}
    pairs = ((f"raw-bookies2-c{c}", f"raw-bookie1-c{c}"), (f"worker-2-c{c}", f"worker-1-c{c}"))
    for k, base in pairs:
        r, b = by[k], by[base]
        r.baseline = base
        r.ratio = r.rate / b.rate if r.rate and b.rate else None
    w1, w2 = by[f"worker-1-c{c}"], by[f"worker-2-c{c}"]
    for r in (w1, w2):
        if r.rate and one.rate:
            r.extra["ratio_vs_raw_bookie1"] = round(r.rate / one.rate, 2)
    meta["loadavg_after"] = _loadavg()
    meta["total_s"] = round(time.monotonic() - t0, 1)
    print()
    print(report.table(rows))
    print(f"compared against: the same rows with one bookie endpoint (bookie 1 = {b1}); goal: 2 bookies >= {GOAL}x")
    if w2.ratio is not None:
        verdict = "met" if w2.ratio >= GOAL else "missed"
        print(
            f"worker over 2 bookies = {w2.ratio:.2f}x the worker on 1 bookie ({verdict}); raw 2 bookies = "
            f"{by[f'raw-bookies2-c{c}'].ratio or 0:.2f}x raw 1 bookie"
        )
    report.keep(rows, meta, "bookies")
    return 1 if any(r.errors for r in rows) else 0


def main() -> int:
    return asyncio.run(amain())


if __name__ == "__main__":
    raise SystemExit(main())
