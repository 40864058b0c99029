"""The purge benchmark (``make bench-purge``): retention cut to 0 on topics holding tens of thousands of closed
ledgers, and what the metadata store, a producer and the purge itself see: stock brokers, brokers with the
extension, and brokers with the extension in defer mode while the worker drains (its pace on).

On a standalone stack instance of its own (ports and data apart from the shared stacks: ``LDW_BENCH_PURGE_<VAR>``
moves them), for each mode in turn (the broker restarted in that mode):

1. ``BENCH_PURGE_TOPICS`` topics get ``BENCH_PURGE_LEDGERS`` closed ledgers each (5 entries a ledger on this
   stack), retention infinite while they fill;
2. a **probe** writes and reads small znodes of its own in ZooKeeper in a loop (a set, then a get, every 10 ms) and
   a **paced producer** publishes ``BENCH_PURGE_RATE`` msg/s on a topic of another namespace; both run for
   ``BENCH_PURGE_IDLE_S`` seconds before the purge: the idle figures;
3. the purge: retention set to 0 and every topic trimmed at once (what retention does on its own at its next
   check); in the extension modes the worker runs (``delete_via: zookeeper``, its pace on, the ceiling
   ``BENCH_PURGE_CEILING`` deletes/s);
4. ``drain_s``: from the purge until every trimmed ledger is gone from BookKeeper's metadata (polled every
   second); ``lost``: ledgers any topic of the run still lists that are gone from BookKeeper (must be 0).

The stock row's rate (ledgers / drain_s) is the raw metadata delete rate of the run: the broker deleting as fast
as it can, nothing paced. The goal for defer mode: probe p99 <= 2x its idle p99 while draining at >= 0.5x that
rate. Rows ``purge-stock``, ``purge-extension``, ``purge-defer``, each with ``probe_p99_ms``,
``probe_idle_p99_ms``, ``publish_p99_ms``, ``drain_s``, ``ledgers``, ``lost`` (and p50/max, rates, the worker's
outcomes, its pace's least and most, halvings and log lines about them); saved under ``bench/results/``
(``BENCH_RESULTS_DIR``).

Knobs: ``BENCH_PURGE_MODES`` (stock,extension,defer,defer-unpaced: the worker's pace off, its fastest),
``BENCH_PURGE_TOPICS`` (100), ``BENCH_PURGE_LEDGERS`` (200), ``BENCH_PURGE_RATE`` (20), ``BENCH_PURGE_IDLE_S`` (30),
``BENCH_PURGE_CEILING`` (5000), ``BENCH_PURGE_TIMEOUT_S`` (1800), ``BENCH_PURGE_KEEP`` (1: leave the instance up).
"""

from __future__ import annotations

import asyncio
import json
import os
import threading
import time
import urllib.request
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import aiohttp
import pulsar
from kazoo.client import KazooClient
from kazoo.exceptions import NoNodeError

from bench.env import RESULTS, int_knob
from bench.run import _git_head, _loadavg, _machine
from bench.stats import sample_quantiles
from testkit.harness import WorkerHarness, quiet_logger
from testkit.stack import REPO, Profile, Stack, admin_for, stack_of
from testkit.topics import ml_ledger_ids
from worker.formats.metadata_paths import hierarchical_ledger_path
from worker.formats.topic_name import TopicName

# defer-unpaced: defer mode with the worker's pace off and its ceiling far above what it can reach, i.e. the
# fastest this worker deletes on this machine: what bounds the rate any pace can reach here.
MODES = ("stock", "extension", "defer", "defer-unpaced")
PENDING = "persistent://pulsar/system/__ledger_deletion"
ENTRIES_PER_LEDGER = 5  # config/standalone.conf: managedLedgerMaxEntriesPerLedger
PURGE = {
    "STACK_DIR": str(REPO / "deploy" / "local" / ".data-bench-purge"),
    "WEB_PORT": "29280",
    "BROKER_PORT": "27680",
    "BOOKIE_PORT": "24290",
    "BOOKIE_HTTP_PORT": "29030",
    "ZK_PORT": "24281",
    "S3_PORT": "25030",
    "BROKER_EXTENSION_SEND_DELAY_S": "1",
    "PULSAR_MEM": "-Xms512m -Xmx1g -XX:MaxDirectMemorySize=1g",
}


@dataclass(frozen=True)
class Knobs:
    modes: tuple[str, ...]
    topics: int
    ledgers: int
    rate: int
    idle_s: int
    ceiling: int
    timeout_s: int

    @classmethod
    def from_env(cls) -> Knobs:
        modes = tuple(m for m in os.environ.get("BENCH_PURGE_MODES", ",".join(MODES)).split(",") if m)
        if not modes or any(m not in MODES for m in modes):
            raise SystemExit(f"BENCH_PURGE_MODES must name some of {', '.join(MODES)}")
        return cls(
            modes,
            int_knob("BENCH_PURGE_TOPICS", 100, 1, 10_000),
            int_knob("BENCH_PURGE_LEDGERS", 200, 1, 10_000),
            int_knob("BENCH_PURGE_RATE", 20, 1, 1000),
            int_knob("BENCH_PURGE_IDLE_S", 30, 5, 600),
            int_knob("BENCH_PURGE_CEILING", 5000, 1, 100_000),
            int_knob("BENCH_PURGE_TIMEOUT_S", 1800, 60, 36_000),
        )


# The bench's own instance: LDW_BENCH_PURGE_<VAR> sets its <VAR>.
INSTANCE = Profile("standalone", PURGE, prefix="LDW_BENCH_PURGE_")


def mode_conf(mode: str) -> dict[str, str]:
    return {
        "BROKER_EXTENSION": "0" if mode == "stock" else "1",
        "BROKER_EXTENSION_DEFER": "1" if mode.startswith("defer") else "0",
    }


def stack_sh(mode: str, *args: str) -> str:
    r = INSTANCE.run(*args, timeout=900, **mode_conf(mode))
    if r.returncode != 0:
        raise SystemExit(f"stack.sh {' '.join(args)} failed:\n{r.stderr[-3000:]}")
    return r.stdout


# ---------------------------------------------------------------------------------------------------------------


@dataclass
class Timed:
    """Latency samples (ms) with the wall time each was taken."""

    samples: list[tuple[float, float]] = field(default_factory=list)
    errors: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, at: float, ms: float) -> None:
        with self.lock:
            self.samples.append((at, ms))

    def between(self, t0: float, t1: float) -> dict[str, float | None]:
        with self.lock:
            values = [ms for at, ms in self.samples if t0 <= at < t1]
        q = sample_quantiles(values, (0.5, 0.99))
        return {"p50_ms": q["p50"], "p99_ms": q["p99"], "max_ms": max(values, default=None), "n": len(values)}


class Probe(threading.Thread):
    """Sets, then gets, one of ten small znodes of its own every 10 ms; each call timed."""

    def __init__(self, zk_hosts: str, root: str) -> None:
        super().__init__(daemon=True)
        self.zk = KazooClient(hosts=zk_hosts, timeout=30)
        self.root = root
        self.timed = Timed()
        self.stopped = threading.Event()

    def run(self) -> None:
        self.zk.start(timeout=30)
        paths = [f"{self.root}/p{i}" for i in range(10)]
        for p in paths:
            self.zk.ensure_path(p)
        i = 0
        while not self.stopped.is_set():
            p = paths[i % len(paths)]
            i += 1
            try:
                t0 = time.perf_counter()
                self.zk.set(p, os.urandom(64))
                t1 = time.perf_counter()
                self.zk.get(p)
                t2 = time.perf_counter()
                now = time.time()
                self.timed.add(now, (t1 - t0) * 1000)
                self.timed.add(now, (t2 - t1) * 1000)
            except Exception:
                self.timed.errors += 1
            self.stopped.wait(0.01)

    def stop(self) -> None:
        self.stopped.set()
        self.join(30)
        try:
            self.zk.delete(self.root, recursive=True)
        finally:
            self.zk.stop()
            self.zk.close()


class PacedProducer(threading.Thread):
    """Publishes ``rate`` msg/s (one entry each), each publish timed from the send to its acknowledgement."""

    def __init__(self, service_url: str, topic: str, rate: int) -> None:
        super().__init__(daemon=True)
        self.service_url = service_url
        self.topic = topic
        self.rate = rate
        self.timed = Timed()
        self.stopped = threading.Event()

    def run(self) -> None:
        client = pulsar.Client(self.service_url, operation_timeout_seconds=30, logger=quiet_logger())
        try:
            producer = client.create_producer(self.topic, batching_enabled=False, send_timeout_millis=30000)
            period = 1.0 / self.rate
            nxt = time.monotonic()
            while not self.stopped.is_set():
                sent_at = time.perf_counter()
                wall = time.time()

                def done(res: Any, _mid: Any, sent_at: float = sent_at, wall: float = wall) -> None:
                    if res == pulsar.Result.Ok:
                        self.timed.add(wall, (time.perf_counter() - sent_at) * 1000)
                    else:
                        self.timed.errors += 1

                producer.send_async(b"p" * 100, done)
                nxt += period
                self.stopped.wait(max(0.0, nxt - time.monotonic()))
            producer.flush()
            producer.close()
        finally:
            client.close()

    def stop(self) -> None:
        self.stopped.set()
        self.join(60)


def fill(stack: Stack, topics: list[str], msgs: int) -> None:
    """``msgs`` one-entry messages on each topic, sent asynchronously across all of them."""
    client = pulsar.Client(stack.service_url, operation_timeout_seconds=120, logger=quiet_logger())
    try:
        producers = [
            client.create_producer(t, batching_enabled=False, block_if_queue_full=True, max_pending_messages=500)
            for t in topics
        ]
        for i in range(msgs):
            for p in producers:
                p.send_async(b"x" * 100 + str(i).encode(), None)
        for p in producers:
            p.flush()
            p.close()
    finally:
        client.close()


def present(zk: KazooClient, ids: set[int]) -> set[int]:
    """Which of ``ids`` still have ledger metadata: one child listing per hierarchical parent (10,000 ids each)."""
    parents: dict[str, set[int]] = {}
    for lid in ids:
        path = hierarchical_ledger_path(lid)
        parents.setdefault(path.rsplit("/", 1)[0], set()).add(lid)
    out: set[int] = set()
    for parent, want in parents.items():
        try:
            children = set(zk.get_children(parent))
        except NoNodeError:
            continue
        out |= {lid for lid in want if hierarchical_ledger_path(lid).rsplit("/", 1)[1] in children}
    return out


async def trim_all(session: aiohttp.ClientSession, stack: Stack, topics: list[TopicName]) -> list[int]:
    async def one(t: TopicName) -> int:
        try:
            async with session.post(f"{stack.admin_url}/admin/v2/{t.rest_path}/trim") as r:
                await r.read()
                return r.status
        except (TimeoutError, aiohttp.ClientError):
            return 0

    return list(await asyncio.gather(*(one(t) for t in topics)))


async def one_mode(mode: str, k: Knobs, run_id: str) -> dict[str, Any]:
    stack_sh(mode, "down")
    stack_sh(mode, "up")
    stack = stack_of(INSTANCE.addresses())
    ns = f"public/purge-{mode}-{run_id}"
    paced_ns = f"public/purge-paced-{mode}-{run_id}"
    topics = [TopicName.parse(f"persistent://{ns}/t{i}") for i in range(k.topics)]
    row: dict[str, Any] = {"key": f"purge-{mode}", "mode": mode, "topics": k.topics}
    async with admin_for(stack) as admin:
        for _ in range(120):
            if await admin.healthy():
                break
            await asyncio.sleep(1)
        for n in (ns, paced_ns):
            await admin.ensure_namespace(n)
            await admin.set_retention(n, -1, -1)
        t0 = time.monotonic()
        await asyncio.to_thread(fill, stack, [str(t) for t in topics], k.ledgers * ENTRIES_PER_LEDGER)
        row["fill_s"] = round(time.monotonic() - t0, 1)
        listed = {t: ml_ledger_ids(await admin.internal_stats(t)) for t in topics}
        purged = {lid for ids in listed.values() for lid in ids[:-1]}
        row["ledgers"] = len(purged)
        print(f"[{mode}] {len(purged)} closed ledgers on {k.topics} topics in {row['fill_s']} s", flush=True)

        probe = Probe(stack.zookeeper_hosts, f"/ldw-bench-probe-{run_id}")
        producer = PacedProducer(stack.service_url, f"persistent://{paced_ns}/paced", k.rate)
        probe.start()
        producer.start()
        worker: WorkerHarness | None = None
        zk = KazooClient(hosts=stack.zookeeper_hosts, timeout=30)
        zk.start(timeout=30)
        try:
            await asyncio.sleep(5)  # the producer's first ledger and the probe's znodes are made
            idle0 = time.time()
            await asyncio.sleep(k.idle_s)
            idle1 = time.time()
            if mode != "stock":
                # The worker's files go there; a clean clone has no bench/out yet.
                (REPO / "bench" / "out").mkdir(parents=True, exist_ok=True)
                queue = {"pending": PENDING, "retry": f"{PENDING}-RETRY", "dlq": f"{PENDING}-DLQ", "parallelism": 4}
                worker = WorkerHarness(
                    stack,
                    REPO / "bench" / "out",
                    f"purge-{mode}-{run_id}",
                    topics=queue,
                    bookkeeper={"http_url": stack.bookie_http_url, "delete_via": "zookeeper"},
                    worker={
                        "min_ledger_age_s": 5,
                        "snapshot_ttl_s": 2,
                        "deletes_per_second": k.ceiling if mode != "defer-unpaced" else 100_000,
                        "pace": mode != "defer-unpaced",
                        "delete_burst": 200,
                        "max_inflight": 64,
                        "receive_batch": 256,
                    },
                    logging={"level": "INFO", "format": "json"},
                )
                worker.start()
            await admin.set_retention(ns, 0, 0)
            await asyncio.sleep(2)  # the policy reaches the topics
            fired = time.time()
            async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=600)) as session:
                statuses = await trim_all(session, stack, topics)
            row["trims_ok"] = sum(1 for s in statuses if s == 204)
            row["trim_calls_s"] = round(time.time() - fired, 1)
            left = set(purged)
            paces: list[float] = []
            deadline = time.monotonic() + k.timeout_s
            while left and time.monotonic() < deadline:
                await asyncio.sleep(1)
                left = await asyncio.to_thread(present, zk, left)
                if worker is not None and (rate := pace_rate(worker)) is not None:
                    paces.append(rate)
            row["pace_min"], row["pace_max"] = min(paces, default=None), max(paces, default=None)
            drained = time.time()
            row["left"] = len(left)
            row["drain_s"] = round(drained - fired, 1)
            row["drain_rate"] = round(len(purged) / (drained - fired), 1) if not left else None
            row["probe_idle"] = probe.timed.between(idle0, idle1)
            row["probe"] = probe.timed.between(fired, drained)
            row["publish_idle"] = producer.timed.between(idle0, idle1)
            row["publish"] = producer.timed.between(fired, drained)
            row["probe_errors"], row["publish_errors"] = probe.timed.errors, producer.timed.errors
        finally:
            producer.stop()
            probe.stop()
            if worker is not None:
                row["worker"] = worker_outcomes(worker)
                row["pace_decreases"], row["pace_log_lines"] = pace_steps(worker)
                worker.close()
        # Nothing lost: every ledger a topic of the run still lists exists.
        still = {t: ml_ledger_ids(await admin.internal_stats(t)) for t in topics}
        paced = TopicName.parse(f"persistent://{paced_ns}/paced")
        still[paced] = ml_ledger_ids(await admin.internal_stats(paced))
        listed_now = {lid for ids in still.values() for lid in ids}
        missing = listed_now - present(zk, listed_now)
        zk.stop()
        zk.close()
        row["lost"] = len(missing)
        row["lost_ids"] = sorted(missing)[:20]
    row["probe_p99_ms"] = row["probe"]["p99_ms"]
    row["probe_idle_p99_ms"] = row["probe_idle"]["p99_ms"]
    row["publish_p99_ms"] = row["publish"]["p99_ms"]
    row["loadavg"] = _loadavg()
    return row


def pace_rate(w: WorkerHarness) -> float | None:
    """The worker's pace now (``ledger_deletion_pace_deletes_per_second``), from its /metrics."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{w.port}/metrics", timeout=2) as r:
            text = r.read().decode()
    except OSError:
        return None
    for line in text.splitlines():
        if line.startswith("ledger_deletion_pace_deletes_per_second "):
            return float(line.split()[1])
    return None


def pace_steps(w: WorkerHarness) -> tuple[int | None, int]:
    """The pace's halvings over the run (``ledger_deletion_pace_decreases_total``) and the log lines it wrote about
    them: one when it slowed, one when it recovered, not one per halving."""
    try:
        decreases: int | None = int(w.metric("ledger_deletion_pace_decreases_total"))
    except OSError:
        decreases = None
    lines = sum(1 for e in w.log_events() if "delete pace" in str(e.get("event", "")))
    return decreases, lines


def worker_outcomes(w: WorkerHarness) -> dict[str, int]:
    counts: dict[str, int] = {}
    for e in w.log_events():
        if e.get("outcome"):
            counts[str(e["outcome"])] = counts.get(str(e["outcome"]), 0) + 1
    return counts


def fmt(v: Any) -> str:
    if v is None:
        return "-"
    return f"{v:,.1f}" if isinstance(v, float) else f"{v:,}" if isinstance(v, int) else str(v)


def report(rows: list[dict[str, Any]]) -> list[str]:
    cols = [
        ("ledgers", "ledgers"),
        ("drain_s", "drain s"),
        ("drain_rate", "ledgers/s"),
        ("probe_idle_p99_ms", "probe idle p99"),
        ("probe_p99_ms", "probe p99"),
        ("probe_ratio", "p99/idle"),
        ("publish_p99_ms", "publish p99"),
        ("lost", "lost"),
    ]
    raw = next((r["drain_rate"] for r in rows if r["mode"] == "stock" and r.get("drain_rate")), None)
    for r in rows:
        idle = r.get("probe_idle_p99_ms")
        r["probe_ratio"] = round(r["probe_p99_ms"] / idle, 2) if idle and r.get("probe_p99_ms") else None
        r["vs_raw_rate"] = round(r["drain_rate"] / raw, 2) if raw and r.get("drain_rate") else None
    lines = ["row              " + "  ".join(f"{h:>15}" for _, h in cols) + "  vs raw rate"]
    for r in rows:
        lines.append(
            f"{r['key']:<16} " + "  ".join(f"{fmt(r.get(c)):>15}" for c, _ in cols) + f"  {fmt(r['vs_raw_rate'])}"
        )
    lines.append("probe: ms per ZooKeeper call (a set or a get of its own znodes); publish: ms send to ack, paced")
    lines.append(f"raw metadata delete rate (stock: the broker deleting unpaced): {fmt(raw)} ledgers/s")
    defer = next((r for r in rows if r["mode"] == "defer"), None)
    if defer is not None and raw:
        met_probe = defer["probe_ratio"] is not None and defer["probe_ratio"] <= 2
        met_rate = defer["vs_raw_rate"] is not None and defer["vs_raw_rate"] >= 0.5
        lines.append(
            f"goal (defer): probe p99 <= 2x idle: {'met' if met_probe else 'missed'} ({fmt(defer['probe_ratio'])}x);"
            f" drain >= 0.5x raw: {'met' if met_rate else 'missed'} ({fmt(defer['vs_raw_rate'])}x)"
        )
    unpaced = next((r for r in rows if r["mode"] == "defer-unpaced"), None)
    if unpaced is not None and raw:
        lines.append(
            f"the worker unpaced (defer-unpaced): {fmt(unpaced.get('drain_rate'))} ledgers/s,"
            f" {fmt(unpaced.get('vs_raw_rate'))}x raw: the most any pace can reach on this machine"
        )
    return lines


async def main() -> int:
    k = Knobs.from_env()
    run_id = uuid.uuid4().hex[:8]
    started = datetime.now(UTC).isoformat()
    rows = []
    try:
        for mode in k.modes:
            rows.append(await one_mode(mode, k, run_id))
            print(json.dumps(rows[-1], default=str), flush=True)
    finally:
        if os.environ.get("BENCH_PURGE_KEEP") != "1":
            stack_sh(k.modes[-1], "down")
    lines = report(rows)
    print("\n".join(lines))
    out = {
        "meta": {
            "started": started,
            "run_id": run_id,
            "git_head": _git_head(),
            "machine": _machine(),
            "knobs": k.__dict__,
        },
        "rows": rows,
        "report": lines,
    }
    RESULTS.mkdir(parents=True, exist_ok=True)
    kept = RESULTS / f"{started[:19].replace(':', '')}-purge-{run_id}.json"
    kept.write_text(json.dumps(out, indent=2, default=str) + "\n")
    print(f"saved {kept}")
    return 0


if __name__ == "__main__":
    raise SystemExit(asyncio.run(main()))
