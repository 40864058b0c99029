"""Orchestration: make the ledgers once, measure every group, compare, print, write JSON."""

from __future__ import annotations

import asyncio
import os
import platform
import subprocess
import time
import traceback
import uuid
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench import drain, ledgers, owner, raw, report
from bench.env import OUT, RESULTS, Knobs, stack
from bench.result import Row
from testkit.admin import StagingAdmin
from testkit.harness import ml_info as _ml
from testkit.harness import pulsar_ml_metadata
from testkit.stack import REPO, Stack
from worker.backends.bookie_http import BookieClient
from worker.backends.http import new_session

# Optional groups (owner route, ZooKeeper mode) are skipped once the run has taken this long.
OPTIONAL_BUDGET_S = 230.0
CLEANUP_BUDGET_S = 60.0


def _loadavg() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def _machine() -> dict[str, Any]:
    """What the figures were measured on (saved with them: ratios travel, absolute rates do not)."""
    info: dict[str, Any] = {"platform": platform.platform(), "python": platform.python_version()}
    try:
        cpu = Path("/proc/cpuinfo").read_text()
        models = [ln.split(":", 1)[1].strip() for ln in cpu.splitlines() if ln.startswith("model name")]
        info["cpu_model"] = models[0] if models else "?"
        mem = Path("/proc/meminfo").read_text().splitlines()[0].split()
        info["mem_total_gib"] = round(int(mem[1]) / 1024 / 1024, 1)
    except OSError:
        pass
    info["cpus"] = os.cpu_count()
    return info


def _git_head() -> str:
    try:
        return subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True, timeout=10
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "?"


def _prune_previous_outputs() -> None:
    """Worker configs and logs of earlier runs (results.json is overwritten): bench/out stays one run big."""
    for p in OUT.glob("worker-bench-*"):
        if p.suffix in (".log", ".yaml"):
            p.unlink(missing_ok=True)


async def _guard(key: str, what: str, n: int, conc: int, fn: Callable[[], Awaitable[Row]]) -> Row:
    """A group that blows up is reported as a row with its error; the run goes on."""
    print(f"[bench] {what} (N={n}) ...", flush=True)
    try:
        row = await fn()
    except Exception as e:
        row = Row(key, what, "worker" if key.startswith("worker") else "raw", "?", "?", conc, n)
        row.errors.append(f"{type(e).__name__}: {e}")
        traceback.print_exc()
    rate = f"{row.rate:.2f}/s" if row.rate is not None else "-"
    print(f"[bench]   {row.completed}/{row.n} in {row.seconds}s = {rate}; errors: {len(row.errors)}", flush=True)
    return row


async def _leftover(bookie: BookieClient, ids: list[int]) -> int | None:
    try:
        return len(set(ids) & set(await bookie.list_ledger_ids()))
    except Exception:
        return None


async def amain() -> int:
    knobs = Knobs.from_env()
    s: Stack = stack()
    OUT.mkdir(parents=True, exist_ok=True)
    _prune_previous_outputs()
    run_id = uuid.uuid4().hex[:8]
    n, c = knobs.n, knobs.concurrency
    t_start = time.monotonic()
    meta: dict[str, Any] = {
        "run_id": run_id,
        "started": datetime.now(UTC).isoformat(timespec="seconds"),
        "git_head": _git_head(),
        "n": n,
        "concurrency": c,
        "owner_n": knobs.owner_n,
        "zk": knobs.zk,
        "cpus": os.cpu_count(),
        "machine": _machine(),
        "knobs": {"bookie": knobs.bookie},
        "loadavg_before": _loadavg(),
        "bookie_http": s.bookie_http_url,
    }

    # Direct-route orphans: Pulsar managed-ledger metadata naming a topic that does not exist. One JVM
    # makes every group's ledgers (a JVM start costs ~7 s); each group gets its own slice.
    gone_topic = f"persistent://public/default/ldw-bench-gone-{run_id}"
    groups = ["raw-seq", "raw-conc", "worker-conc", "worker-1"] if knobs.bookie else []
    groups += ["raw-zk", "worker-zk"] if knobs.zk else []
    if c == 1:
        groups = [g for g in groups if g not in ("raw-conc", "worker-conc")]
    sizes = {g: knobs.zk_n if g.endswith("zk") else n for g in groups}
    total = sum(sizes.values())
    print(f"[bench] creating {total} ledgers for {gone_topic} ...", flush=True)
    t = time.monotonic()
    try:
        all_ids = await asyncio.to_thread(ledgers.create, s, total, pulsar_ml_metadata(gone_topic))
    except ledgers.LedgerCreationFailed as e:
        await asyncio.to_thread(raw.bookie_sequential, s.bookie_http_url, e.made, CLEANUP_BUDGET_S)
        raise
    meta["create_s"] = round(time.monotonic() - t, 1)
    meta["ledgers_created"] = len(all_ids)
    meta["zk_n"] = knobs.zk_n
    ids: dict[str, list[int]] = {}
    for g in groups:
        ids[g], all_ids = all_ids[: sizes[g]], all_ids[sizes[g] :]
    raw_deadline = 30 + n * 0.5
    worker_deadline = 60 + n * 0.5

    rows: list[Row] = []
    owner_topic: str | None = None
    async with new_session(60) as session:
        bookie = BookieClient(s.bookie_http_url, session)
        admin = StagingAdmin(s.admin_url, session)

        async def record(row: Row, lids: list[int]) -> None:
            row.leftover = await _leftover(bookie, lids)
            rows.append(row)

        if "raw-seq" in ids:
            lids = ids["raw-seq"]
            await record(
                await _guard(
                    "raw-bookie-seq",
                    "raw bookie HTTP DELETE, sequential",
                    n,
                    1,
                    lambda: asyncio.to_thread(raw.bookie_sequential, s.bookie_http_url, lids, raw_deadline),
                ),
                lids,
            )
        if "raw-conc" in ids:
            lids_c = ids["raw-conc"]
            await record(
                await _guard(
                    f"raw-bookie-c{c}",
                    f"raw bookie HTTP DELETE, {c} in flight",
                    n,
                    c,
                    lambda: raw.bookie_concurrent(s.bookie_http_url, lids_c, c, raw_deadline),
                ),
                lids_c,
            )

        def worker_group(
            g: str, conc: int, key: str, what: str, via: str = "bookie-http", n: int = n
        ) -> Callable[[], Awaitable[Row]]:
            infos = [_ml(gone_topic, lid) for lid in ids[g]]
            return lambda: drain.drain(
                s,
                OUT,
                key=key,
                what=what,
                run_id=run_id,
                infos=infos,
                route="direct",
                concurrency=conc,
                delete_via=via,
                deadline_s=60 + n * 0.5,
            )

        if "worker-conc" in ids:
            what = f"worker, direct route, max_inflight={c}"
            key = f"worker-direct-c{c}"
            await record(await _guard(key, what, n, c, worker_group("worker-conc", c, key, what)), ids["worker-conc"])
        if "worker-1" in ids:
            what = "worker, direct route, max_inflight=1"
            await record(
                await _guard("worker-direct-c1", what, n, 1, worker_group("worker-1", 1, "worker-direct-c1", what)),
                ids["worker-1"],
            )

        if knobs.owner_n and time.monotonic() - t_start < OPTIONAL_BUDGET_S:
            what = f"worker, owner route (live topic), max_inflight={c}"
            key = f"worker-owner-c{c}"
            print(f"[bench] making owner-route orphans (~{knobs.owner_n}) ...", flush=True)
            try:
                t = time.monotonic()
                owner_topic, owner_ids = await owner.make(s, admin, run_id, knobs.owner_n)
                meta["owner_setup_s"] = round(time.monotonic() - t, 1)
                meta["owner_topic"] = owner_topic
                infos = [_ml(owner_topic, lid) for lid in owner_ids]

                def owner_drain() -> Awaitable[Row]:
                    return drain.drain(
                        s,
                        OUT,
                        key=key,
                        what=what,
                        run_id=run_id,
                        infos=infos,
                        route="owner",
                        concurrency=c,
                        deadline_s=worker_deadline,
                    )

                await record(await _guard(key, what, len(owner_ids), c, owner_drain), owner_ids)
            except Exception as e:
                meta["owner_error"] = f"{type(e).__name__}: {e}"
                traceback.print_exc()
        elif knobs.owner_n:
            meta["owner_skipped"] = "time budget"

        if knobs.zk and time.monotonic() - t_start < OPTIONAL_BUDGET_S:
            lids_z = ids["raw-zk"]
            zn = knobs.zk_n
            await record(
                await _guard(
                    f"raw-zk-c{c}",
                    f"raw ZooKeeper znode delete, {c} in flight",
                    zn,
                    c,
                    lambda: raw.zookeeper_concurrent(s.zookeeper_hosts, lids_z, c, 30 + zn * 0.5),
                ),
                lids_z,
            )
            what = f"worker, direct route, max_inflight={c}, delete_via=zookeeper"
            key = f"worker-direct-zk-c{c}"
            await record(
                await _guard(key, what, zn, c, worker_group("worker-zk", c, key, what, via="zookeeper", n=zn)),
                ids["worker-zk"],
            )
        elif knobs.zk:
            meta["zk_skipped"] = "time budget"

        # Compare each worker row with the raw row at the same concurrency and storage path.
        by_key = {r.key: r for r in rows}
        for r in rows:
            if r.kind != "worker":
                continue
            base = "raw-bookie-seq" if r.concurrency == 1 else f"raw-bookie-c{r.concurrency}"
            if r.delete_via == "zookeeper":
                base = f"raw-zk-c{r.concurrency}"
            b = by_key.get(base)
            r.baseline = base
            if b is not None and b.rate and r.rate:
                r.ratio = r.rate / b.rate
            zk_raw = by_key.get(f"raw-bookie-c{c}")
            if r.delete_via == "zookeeper" and zk_raw is not None and zk_raw.rate and r.rate:
                r.extra["ratio_vs_raw_bookie"] = round(r.rate / zk_raw.rate, 2)

        # Leave nothing behind: leftovers of this run's groups (a group that failed or timed out) are
        # deleted here, bounded by count and time; the owner topic goes with its remaining ledgers.
        cleanup_ids = [lid for lids in ids.values() for lid in lids]
        try:
            present = set(await bookie.list_ledger_ids())
            left = [lid for lid in cleanup_ids if lid in present]
            meta["cleanup_leftovers"] = len(left)
            if left:
                await asyncio.to_thread(raw.bookie_sequential, s.bookie_http_url, left, CLEANUP_BUDGET_S)
        except Exception as e:
            meta["cleanup_error"] = f"{type(e).__name__}: {e}"
        if owner_topic is not None:
            try:
                await owner.remove(admin, owner_topic)
            except Exception as e:
                meta["owner_cleanup_error"] = f"{type(e).__name__}: {e}"

    meta["loadavg_after"] = _loadavg()
    meta["total_s"] = round(time.monotonic() - t_start, 1)
    print()
    print(report.table(rows))
    print(report.notes(rows, meta))
    for line in drain.cpu_per_message(rows):
        print(line)
    path = OUT / "results.json"
    report.write_json(path, rows, meta)
    # A copy that stays: bench/results/ is committed, one file per run worth keeping.
    kept = RESULTS / f"{meta['started'][:19].replace(':', '')}-{run_id}.json"
    report.write_json(kept, rows, meta)
    print(f"results: {path.relative_to(REPO)} and {kept}")
    return 1 if any(r.errors for r in rows) else 0


def main() -> int:
    return asyncio.run(amain())
