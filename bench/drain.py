"""One worker draining a backlog: the real daemon as a subprocess, timed from its own log.

The backlog is queued before the worker starts (the subscription is created first, so nothing is lost),
hence every message is visible the moment the worker's receive loop starts: the clock starts at its
``worker ready`` log line and stops at the N-th settled message (``ledger deleted`` and friends), both
stamped by the worker's own clock. ``/metrics`` is polled (every 100 ms) only to know when to stop, to
cross-check the time, and for the processing-latency histogram at the end.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterable
from datetime import datetime
from pathlib import Path
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from bench.result import Row
from bench.stats import histogram_quantiles, histogram_upper_bounds
from testkit.admin import StagingAdmin
from testkit.harness import WorkerHarness
from testkit.stack import REPO, Stack
from worker.backends.http import new_session
from worker.broker.admin import PulsarAdmin
from worker.broker.topology import ensure_topology
from worker.formats.message import PendingDeleteLedgerInfo
from worker.formats.topic_name import TopicName
from worker.settings import load_settings

# Log events that settle a message for good (pipeline._settle).
SETTLED_EVENTS = {
    "ledger deleted",
    "ledger already gone",
    "deletion rejected: storage identity not proven",
    "attempts exhausted: dead-lettered",
    "undecodable message dead-lettered",
}
STARTUP_TIMEOUT_S = 60.0
POLL_S = 0.1

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def _scrape(port: int) -> Samples | None:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2) as r:
            text = r.read().decode()
    except OSError:
        return None
    out: Samples = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def _sum(m: Samples, name: str, **labels: str) -> float:
    return sum(v for (n, lbls), v in m.items() if n == name and all(dict(lbls).get(k) == x for k, x in labels.items()))


def _settled(m: Samples) -> float:
    """Messages settled for good (deleted or already gone, rejected, dead-lettered): the drain's progress."""
    return (
        _sum(m, "ledger_deletion_deleted_total")
        + _sum(m, "ledger_deletion_rejected_total")
        + _sum(m, "ledger_deletion_dlq_total")
    )


def _proc_status_kib(pid: int, field: str) -> float | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return float(line.split()[1])
    except OSError:
        return None
    return None


def _stat_cpu_s(stat: str) -> float:
    """utime + stime of a ``/proc/.../stat`` line, in seconds (fields after the ``(comm)``, which may hold
    spaces)."""
    rest = stat[stat.rindex(")") + 2 :].split()
    return (int(rest[11]) + int(rest[12])) / os.sysconf("SC_CLK_TCK")


def _cpu_s(pid: int) -> float | None:
    try:
        return _stat_cpu_s(Path(f"/proc/{pid}/stat").read_text())
    except OSError:
        return None


def _cpu_by_thread(pid: int) -> dict[str, float]:
    """CPU seconds of each thread, summed by thread name (``comm``; Python threads share the process's)."""
    out: dict[str, float] = {}
    for task in Path(f"/proc/{pid}/task").glob("*"):
        try:
            stat = (task / "stat").read_text()
        except OSError:
            continue
        name = stat[stat.index("(") + 1 : stat.rindex(")")] + ("/main" if task.name == str(pid) else "")
        out[name] = out.get(name, 0.0) + _stat_cpu_s(stat)
    return out


def cpu_per_message(rows: list[Row]) -> list[str]:
    """``CPU per settled message`` of each worker row, split into the event loop thread and the others when
    the row measured threads."""
    out = []
    for r in rows:
        if r.kind != "worker" or r.cpu_s is None or not r.completed:
            continue
        line = f"CPU per settled message, {r.key}: {1000 * r.cpu_s / r.completed:.3f} ms"
        by = r.extra.get("cpu_s_by_thread")
        if by:
            main = sum(v for k, v in by.items() if k.endswith("/main"))
            rest = sum(v for k, v in by.items() if not k.endswith("/main"))
            n = r.completed
            line += f" (event loop thread {1000 * main / n:.3f} ms, other threads {1000 * rest / n:.3f} ms)"
        out.append(line)
    return out


def _log_times(path: Path) -> tuple[datetime | None, list[datetime]]:
    ready: datetime | None = None
    settled: list[datetime] = []
    try:
        lines = path.read_text(errors="replace").splitlines()
    except OSError:
        return None, []
    for line in lines:
        if not line.startswith("{"):
            continue  # the C++ client's own warnings
        try:
            d = json.loads(line)
            ts = datetime.fromisoformat(str(d["timestamp"]))
        except (ValueError, KeyError):
            continue
        if d.get("event") == "worker ready":
            ready = ts
        elif d.get("event") in SETTLED_EVENTS:
            settled.append(ts)
    return ready, sorted(settled)


def _histogram(m: Samples, name: str) -> tuple[dict[float, float], float, float]:
    buckets: dict[float, float] = {}
    for (n, lbls), v in m.items():
        if n == f"{name}_bucket":
            le = float(dict(lbls)["le"])
            buckets[le] = buckets.get(le, 0.0) + v
    return buckets, _sum(m, f"{name}_count"), _sum(m, f"{name}_sum")


def backlog_form(n: int) -> str:
    """How the backlog is published (``BENCH_BACKLOG``): ``auto`` (the default) sends up to 5,000 messages
    one entry each, as phase 1 publishes them (its producers do not batch), and more in batched entries, which
    is quicker to set up; ``unbatched`` or ``batched`` force one form. The form matters on this machine: the
    broker dispatches and acknowledges per entry, beside its embedded ZooKeeper on the same 2 cores."""
    form = os.environ.get("BENCH_BACKLOG", "auto")
    if form not in ("auto", "unbatched", "batched"):
        raise SystemExit(f"BENCH_BACKLOG must be auto, unbatched or batched, not {form!r}")
    if form == "auto":
        return "batched" if n > 5000 else "unbatched"
    return form


def _send_all(h: WorkerHarness, infos: list[PendingDeleteLedgerInfo]) -> None:
    """The worker's backlog, every message confirmed before the drain starts."""
    import pulsar

    from testkit.harness import quiet_logger
    from worker.broker.client import PendingDeleteSchema

    client = pulsar.Client(h.stack.service_url, logger=quiet_logger())
    try:
        batched = backlog_form(len(infos)) == "batched"
        failures = publish(client, h.topics["pending"], infos, batched=batched, schema=PendingDeleteSchema())
    finally:
        client.close()
    if failures:
        raise RuntimeError(f"{len(failures)} of {len(infos)} sends failed: {failures[:3]}")


def publish(client: Any, topic: str, items: Iterable[Any], *, batched: bool, schema: Any = None) -> list[str]:
    """Asynchronous sends (batched entries, or one entry each), flushed; the results that were not Ok. The
    producer blocks when its queue is full: past its pending limit a send would fail unseen
    (``ProducerQueueIsFull``) and a reader would wait for a message that was never published."""
    import pulsar

    producer = client.create_producer(
        topic,
        batching_enabled=batched,
        batching_max_messages=500,
        max_pending_messages=5000,
        block_if_queue_full=True,
        **({"schema": schema} if schema is not None else {}),
    )
    failures: list[str] = []

    def done(res: pulsar.Result, _mid: object) -> None:
        if res != pulsar.Result.Ok:
            failures.append(str(res))

    for item in items:
        producer.send_async(item, done)
    producer.flush()
    producer.close()
    return failures


def bench_harness(
    stack: Stack,
    out_dir: Path,
    name: str,
    concurrency: int,
    bookkeeper: dict[str, Any],
    offload: bool = False,
) -> WorkerHarness:
    """The daemon as every worker row runs it: no offload target, unless the row deletes offloaded copies
    (``offload``: the stack's S3 bucket, as the test harness configures it)."""
    return WorkerHarness(
        stack,
        out_dir,
        name,
        topics={"parallelism": 4},
        bookkeeper=bookkeeper,
        **({} if offload else {"offload": {"s3_targets": []}}),
        worker={
            "max_inflight": concurrency,
            # The rate limit out of the way: the storage, not the token bucket, sets the pace.
            "deletes_per_second": 1_000_000.0,
            "delete_burst": 1_000_000,
            "pace": False,
            # The smallest safe pair (the age guard must outlast a cached snapshot): the ledgers were
            # made well before this row starts, so none is retried as too young.
            "min_ledger_age_s": 2,
            "snapshot_ttl_s": 1.5,
            "stats_poll_interval_s": 15,
        },
        logging={"level": "INFO", "format": "json"},
    )


async def drain(
    stack: Stack,
    out_dir: Path,
    *,
    key: str,
    what: str,
    run_id: str,
    infos: list[PendingDeleteLedgerInfo],
    route: str,
    concurrency: int,
    delete_via: str = "bookie-http",
    deadline_s: float,
    bookkeeper: dict[str, Any] | None = None,
    offload: bool = False,
) -> Row:
    n = len(infos)
    row = Row(key, what, "worker", route, delete_via, concurrency, n)
    h = bench_harness(
        stack,
        out_dir,
        f"bench-{run_id}-{key}",
        concurrency,
        {"delete_via": delete_via, **(bookkeeper or {})},
        offload=offload,
    )
    settings = load_settings(h.config_path)
    async with new_session(30) as session:
        admin = StagingAdmin(stack.admin_url, session)
        # The subscription exists before the first message: the backlog is retained for the worker.
        await ensure_topology(admin, settings.topics)
        t = time.monotonic()
        await asyncio.to_thread(_send_all, h, infos)
        row.extra["enqueue_s"] = round(time.monotonic() - t, 3)
        row.extra["backlog"] = backlog_form(n)
        try:
            await _run(h, row, n, deadline_s)
        finally:
            await asyncio.to_thread(h.close)
            await _delete_topics(admin, settings.topics.pending, settings.topics.retry, settings.topics.dlq, row)
    return row


def _spawn(h: WorkerHarness) -> subprocess.Popen[bytes]:
    """The daemon exactly as the harness runs it; the clock starts later, at its 'worker ready' line.

    ``BENCH_PYSPY=DIR``: ``py-spy record`` attaches to the daemon (collapsed stacks in DIR, one file per
    row; it writes them when the daemon exits), for the profile (``BENCH_PYSPY_GIL=1``: GIL holder only;
    summed by ``python -m bench.profile_summary``). Sampling slows the worker a little, so profiled runs
    give the profile, not the figures."""
    with open(h.log_path, "ab") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "worker.cli", "run", "--config", str(h.config_path)],
            cwd=REPO,
            stdout=log,
            stderr=subprocess.STDOUT,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
    prof_dir = os.environ.get("BENCH_PYSPY")
    if prof_dir:
        out = Path(prof_dir) / f"{h.name}.collapsed"
        spy = Path(sys.executable).with_name("py-spy")
        cmd = [str(spy), "record", "--format", "raw", "--rate", "100", "-o", str(out), "--pid", str(proc.pid)]
        if os.environ.get("BENCH_PYSPY_GIL") == "1":
            cmd.append("--gil")  # only the thread holding the GIL: where the interpreter's CPU goes
        subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return proc


async def _run(h: WorkerHarness, row: Row, n: int, deadline_s: float) -> None:
    h.proc = _spawn(h)
    pid = h.proc.pid
    started = time.monotonic()
    ready_at: float | None = None
    done_at: float | None = None
    cpu0: float | None = None
    threads0: dict[str, float] = {}
    m: Samples | None = None
    while True:
        now = time.monotonic()
        if h.proc.poll() is not None:
            row.errors.append(f"worker exited with {h.proc.returncode}: {h.log_tail(5)}")
            break
        if ready_at is None and now - started > STARTUP_TIMEOUT_S:
            row.errors.append(f"worker not ready after {STARTUP_TIMEOUT_S:.0f}s")
            break
        if ready_at is not None and now - ready_at > deadline_s:
            row.errors.append(f"deadline {deadline_s:.0f}s passed")
            break
        got = _scrape(h.port)
        if got is not None:
            m = got
            if ready_at is None and _sum(m, "ledger_deletion_ready") >= 1:
                ready_at = now
                row.extra["startup_s"] = round(now - started, 2)
                cpu0 = _cpu_s(pid)
                threads0 = _cpu_by_thread(pid)
                rss = _proc_status_kib(pid, "VmRSS")
                row.rss_ready_mib = round(rss / 1024, 1) if rss is not None else None
            settled = _settled(m)
            if settled >= n:
                done_at = now
                break
        await asyncio.sleep(POLL_S if ready_at is not None else 0.02)

    # The process is still alive here unless it died: its high-water mark covers the whole drain.
    hwm = _proc_status_kib(pid, "VmHWM")
    cpu1 = _cpu_s(pid)
    if cpu0 is not None:
        threads1 = _cpu_by_thread(pid)
        row.extra["cpu_s_by_thread"] = {
            k: round(v - threads0.get(k, 0.0), 2)
            for k, v in sorted(threads1.items())
            if v - threads0.get(k, 0.0) >= 0.01
        }
    final = _scrape(h.port) or m or {}
    if h.proc.poll() is None:
        row.extra["exit_code"] = await asyncio.to_thread(h.stop)
    row.peak_rss_mib = round(hwm / 1024, 1) if hwm is not None else None
    if cpu0 is not None and cpu1 is not None:
        row.cpu_s = round(cpu1 - cpu0, 2)

    row.completed = int(_sum(final, "ledger_deletion_deleted_total"))
    row.extra["outcomes"] = {
        f"{dict(lbls).get('route')}/{dict(lbls).get('result')}": int(v)
        for (name, lbls), v in final.items()
        if name == "ledger_deletion_deleted_total" and v
    }
    # The snapshot cache's and the gone proof's cost on the admin API (issue 9: <= 20 per 1,000 messages).
    admin_calls = _sum(final, "ledger_deletion_admin_requests_total")
    row.extra["admin_requests"] = int(admin_calls)
    row.extra["admin_requests_per_1000_msgs"] = round(1000 * admin_calls / n, 1) if n else None
    # How full the batch receives were (the sweep and the shared reads work per batch).
    batches = _sum(final, "ledger_deletion_batch_messages_count")
    row.extra["batch_messages_mean"] = (
        round(_sum(final, "ledger_deletion_batch_messages_sum") / batches, 1) if batches else None
    )
    for counter in ("rejected", "dlq", "retried", "in_use", "failed"):
        v = _sum(final, f"ledger_deletion_{counter}_total")
        if v:
            row.extra[counter] = int(v)
    wrong_route = [k for k in row.extra["outcomes"] if not k.startswith(f"{row.route}/")]
    if wrong_route:
        row.errors.append(f"expected route {row.route}, saw {wrong_route}")

    buckets, count, total = _histogram(final, "ledger_deletion_processing_seconds")
    # The table shows what the histogram proves (the bucket's upper bound); the JSON keeps both.
    row.latency_s = histogram_upper_bounds(buckets, count)
    row.extra["latency_interpolated_s"] = histogram_quantiles(buckets, count)
    row.latency_mean_s = total / count if count else None
    row.latency_source = "worker histogram: upper bound of the percentile's bucket (mean exact)"

    ready_ts, settled_ts = _log_times(h.log_path)
    by_poll = (done_at - ready_at) if (ready_at is not None and done_at is not None) else None
    row.extra["seconds_by_poll"] = round(by_poll, 3) if by_poll is not None else None
    if ready_ts is not None and settled_ts:
        last = settled_ts[min(n, len(settled_ts)) - 1]
        row.finish((last - ready_ts).total_seconds())
        row.extra["timing"] = "worker log: 'worker ready' -> N-th settled message"
    elif by_poll is not None:
        row.finish(by_poll)
        row.extra["timing"] = "metrics poll (100 ms)"
    row.extra["log"] = str(h.log_path.relative_to(REPO))


async def _delete_topics(admin: PulsarAdmin, pending: str, retry: str, dlq: str, row: Row) -> None:
    """The run's own topics go away with it (best effort: a failure is noted, not raised)."""
    try:
        await admin.delete_partitioned_topic(TopicName.parse(pending), force=True)
        for t in (retry, dlq):
            await admin.delete_topic(TopicName.parse(t), force=True)
    except Exception as e:
        row.extra["cleanup_error"] = f"{type(e).__name__}: {e}"


async def drain_shared(
    stack: Stack,
    out_dir: Path,
    *,
    key: str,
    what: str,
    run_id: str,
    infos: list[PendingDeleteLedgerInfo],
    workers: int,
    concurrency: int,
    delete_via: str,
    deadline_s: float,
) -> Row:
    """``workers`` daemons (replicas of one deployment: same topics, same Shared subscription) draining one
    backlog. Timed from the first 'worker ready' to the N-th settled message over all their logs."""
    n = len(infos)
    row = Row(key, what, "worker", "direct", delete_via, concurrency, n)
    row.extra["workers"] = workers
    hs = []
    for i in range(workers):
        d = out_dir / f"shared-{run_id}-{key}-{i}"
        d.mkdir(parents=True, exist_ok=True)
        hs.append(bench_harness(stack, d, f"bench-{run_id}-{key}", concurrency, {"delete_via": delete_via}))
    settings = load_settings(hs[0].config_path)
    async with new_session(30) as session:
        admin = StagingAdmin(stack.admin_url, session)
        await ensure_topology(admin, settings.topics)
        await asyncio.to_thread(_send_all, hs[0], infos)
        try:
            procs = [_spawn(h) for h in hs]
            for h, p in zip(hs, procs, strict=True):
                h.proc = p
            deadline = time.monotonic() + STARTUP_TIMEOUT_S + deadline_s
            final: list[Samples] = [{} for _ in hs]
            while time.monotonic() < deadline:
                if any(p.poll() is not None for p in procs):
                    row.errors.append("a worker exited early")
                    break
                got = [_scrape(h.port) for h in hs]
                final = [g if g is not None else f for g, f in zip(got, final, strict=True)]
                settled = sum(_settled(m) for m in final)
                if settled >= n:
                    break
                await asyncio.sleep(POLL_S)
            else:
                row.errors.append(f"deadline {deadline_s:.0f}s passed")
            hwm = [_proc_status_kib(p.pid, "VmHWM") for p in procs]
            cpu = [_cpu_s(p.pid) for p in procs]
        finally:
            for h in hs:
                await asyncio.to_thread(h.close)
            await _delete_topics(admin, settings.topics.pending, settings.topics.retry, settings.topics.dlq, row)
    shares = [int(_sum(m, "ledger_deletion_deleted_total")) for m in final]
    row.completed = sum(shares)
    row.extra["shares"] = shares
    row.peak_rss_mib = max((round(x / 1024, 1) for x in hwm if x is not None), default=None)
    row.cpu_s = round(sum(c for c in cpu if c is not None), 2) if any(c is not None for c in cpu) else None
    readies, settled_ts = [], []
    for h in hs:
        r, st = _log_times(h.log_path)
        if r is not None:
            readies.append(r)
        settled_ts += st
    settled_ts.sort()
    if readies and settled_ts:
        last = settled_ts[min(n, len(settled_ts)) - 1]
        row.finish((last - min(readies)).total_seconds())
        row.extra["timing"] = "first 'worker ready' -> N-th settled message over every worker's log"
    return row
