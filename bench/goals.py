"""Issue 9's remaining goals, each measured side by side with its comparator in one run (part of
``make bench``; ``python -m bench.goals``):

- the already-gone fast path (ledgers that no longer exist, a gone topic) against raw pulsar-client
  consume + acknowledge of the same number of messages, over a large backlog; the worker's RSS when
  ready and its peak (VmHWM) over that backlog;
- the worker (``delete_via: zookeeper``, 16 in flight) against the PIP's pseudocode run sequentially
  (``bench/pip_baseline.py``) on the same number of real orphans;
- admin API calls per 1,000 messages spread over 10 live topics (owner route, real orphans of each);
- two workers (replicas on the Shared subscription) against one, on the same size of backlog;
- the scanner's ledgers classified per second, metadata from the bookie HTTP API against ZooKeeper.

- the S3 route: offloaded copies deleted by the worker against raw ``DeleteObjects`` of as many copies
  (``bench/s3_route.py``).

Every worker row also prints its CPU seconds per settled message.

Knobs: ``BENCH_GONE_N`` (100000), ``BENCH_GOALS_N`` (3000), ``BENCH_TOPICS`` (10), ``BENCH_PER_TOPIC`` (100),
``BENCH_S3_N`` (2000 copies), ``BENCH_CONCURRENCY`` (16), ``BENCH_GOALS`` (which parts:
``gone,pip,two,topics,scan,s3``).
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import subprocess
import sys
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pulsar
import yaml

from bench import drain, ledgers, pip_baseline, report, s3_route
from bench.env import OUT, stack
from bench.result import Row
from bench.run import _git_head, _loadavg, _machine
from testkit.admin import StagingAdmin
from testkit.harness import ml_info as _ml
from testkit.harness import pulsar_ml_metadata, quiet_logger
from testkit.stack import Stack
from worker.backends.http import new_session
from worker.backends.stores import Stores
from worker.daemon.daemon import batch_size
from worker.formats.topic_name import TopicName
from worker.settings import WorkerSettings

C = int(os.environ.get("BENCH_CONCURRENCY", "16"))


def raw_consume_ack(s: Stack, n: int, deadline_s: float) -> Row:
    """The fast path's ceiling: receive + acknowledge n messages with the plain client (the same receiver
    queue as the worker's at ``max_inflight`` C and the default ``receive_batch``:
    ``worker.daemon.daemon.batch_size``), nothing else."""
    row = Row(f"raw-consume-ack-{n}", "raw pulsar-client receive + acknowledge", "raw", "-", "-", 1, n)
    topic = f"persistent://public/default/ldw-bench-consume-{uuid.uuid4().hex[:8]}"
    client = pulsar.Client(s.service_url, logger=quiet_logger())
    try:
        consumer = client.subscribe(
            topic,
            "raw",
            consumer_type=pulsar.ConsumerType.Shared,
            receiver_queue_size=batch_size(C, WorkerSettings().receive_batch),
        )
        # The same form as the worker's backlog (``drain.backlog_form``): the same number of the same entries.
        payload = b"x" * 120  # about the size of an encoded pending deletion
        failed = drain.publish(client, topic, (payload for _ in range(n)), batched=drain.backlog_form(n) == "batched")
        if failed:
            row.errors.append(f"{len(failed)} of {n} sends failed: {sorted(set(failed))}")
        start = time.monotonic()
        while row.completed < n and time.monotonic() - start < deadline_s:
            consumer.acknowledge(consumer.receive(timeout_millis=30_000))
            row.completed += 1
        row.finish(time.monotonic() - start)
        consumer.unsubscribe()
    finally:
        client.close()
    return row


def _scan_row(cfg: Path, source: str) -> Row:
    """One whole-cluster ``scan --dry-run`` as an operator runs it, timed from process start to exit."""
    row = Row(
        f"scan-{source}", f"scan --dry-run, whole cluster, --metadata-from {source}", "worker", "-", source, 16, 0
    )
    cmd = [sys.executable, "-m", "worker.cli", "scan", "--dry-run", "--json", "--min-age", "0s"]
    t = time.monotonic()
    out = subprocess.run([*cmd, "--metadata-from", source, "--config", str(cfg)], capture_output=True, text=True)
    seconds = time.monotonic() - t
    if out.returncode != 0:
        row.errors.append(out.stderr[-500:])
        return row
    report = json.loads(out.stdout.strip().splitlines()[-1])
    row.n = row.completed = int(report["listed"])
    row.finish(seconds)
    row.extra["counts"] = report["counts"]
    row.extra["timing"] = "process start -> exit (includes interpreter start, the same for both)"
    return row


def _produce(s: Stack, topic: str, n: int) -> None:
    client = pulsar.Client(s.service_url, logger=quiet_logger())
    try:
        p = client.create_producer(topic, batching_enabled=False)
        for _ in range(n):
            p.send(b"x" * 100)
        p.close()
    finally:
        client.close()


async def amain() -> int:
    gone_n = int(os.environ.get("BENCH_GONE_N", "100000"))
    n = int(os.environ.get("BENCH_GOALS_N", "3000"))
    n_topics = int(os.environ.get("BENCH_TOPICS", "10"))
    parts = set(os.environ.get("BENCH_GOALS", "gone,pip,two,topics,scan,s3").split(","))
    s3_n = int(os.environ.get("BENCH_S3_N", "2000"))
    per_topic = int(os.environ.get("BENCH_PER_TOPIC", "100"))
    s = stack()
    OUT.mkdir(parents=True, exist_ok=True)
    run_id = uuid.uuid4().hex[:8]
    t0 = time.monotonic()
    meta: dict[str, Any] = {
        "run_id": run_id,
        "bench": "goals",
        "started": datetime.now(UTC).isoformat(timespec="seconds"),
        "git_head": _git_head(),
        "gone_n": gone_n,
        "n": n,
        "topics": n_topics,
        "per_topic": per_topic,
        "concurrency": C,
        "machine": _machine(),
        "loadavg_before": _loadavg(),
    }
    rows: list[Row] = []
    fast = raw = pip = w1 = two = None
    owner_rows: dict[str, Row] = {}
    gone_topic = f"persistent://public/default/ldw-bench-goals-gone-{run_id}"

    # 1. The already-gone fast path: ids far above anything the stack allocated, so none exists.
    if "gone" in parts:
        base = 10**12 + random.randrange(10**9)
        print(f"[bench] raw consume + ack of {gone_n} messages ...", flush=True)
        raw = await asyncio.to_thread(raw_consume_ack, s, gone_n, 60 + gone_n * 0.05)
        rows.append(raw)
        print(f"[bench] worker, already-gone fast path, {gone_n} messages ...", flush=True)
        fast = await drain.drain(
            s,
            OUT,
            key=f"worker-gone-{gone_n}",
            what=f"worker, already-gone fast path (zookeeper), max_inflight={C}",
            run_id=run_id,
            infos=[_ml(gone_topic, base + i) for i in range(gone_n)],
            # Settled by their batch's sweep, before any route is read (``Pipeline.sweep``).
            route="none",
            concurrency=C,
            delete_via="zookeeper",
            deadline_s=120 + gone_n * 0.05,
        )
        fast.baseline, fast.ratio = raw.key, (fast.rate / raw.rate if fast.rate and raw.rate else None)
        rows.append(fast)

    # 2. The PIP's pseudocode, sequential, against the worker: real orphans, ZooKeeper deletes both.
    if "pip" in parts or "two" in parts:
        print(f"[bench] creating {2 * n} ledgers ...", flush=True)
        made = await asyncio.to_thread(ledgers.create, s, 2 * n, pulsar_ml_metadata(gone_topic), timeout_s=900)
        pip_ids, worker_ids = made[:n], made[n:]
        async with Stores(f"zk:{s.zookeeper_hosts}") as zk:
            paths = {lid: await zk.bookkeeper.ledger_path(lid) for lid in pip_ids}
        await asyncio.sleep(2.5)  # past the worker's minimum ledger age
        print(f"[bench] PIP pseudocode, sequential, {n} orphans ...", flush=True)
        pip = await asyncio.to_thread(pip_baseline.run, s, [_ml(gone_topic, x) for x in pip_ids], paths, 60 + n * 0.5)
        rows.append(pip)
        print(f"[bench] worker, {n} orphans, zookeeper ...", flush=True)
        w1 = await drain.drain(
            s,
            OUT,
            key=f"worker-zk-{n}",
            what=f"worker, direct route, delete_via=zookeeper, max_inflight={C}",
            run_id=run_id,
            infos=[_ml(gone_topic, x) for x in worker_ids],
            route="direct",
            concurrency=C,
            delete_via="zookeeper",
            deadline_s=60 + n * 0.5,
        )
        w1.baseline, w1.ratio = pip.key, (w1.rate / pip.rate if w1.rate and pip.rate else None)
        rows.append(w1)

    # 3. Two replicas against one: the same size of backlog, fresh orphans.
    if "two" in parts and w1 is not None:
        print(f"[bench] two workers, {n} orphans ...", flush=True)
        two_ids = await asyncio.to_thread(ledgers.create, s, n, pulsar_ml_metadata(gone_topic), timeout_s=900)
        await asyncio.sleep(2.5)
        two = await drain.drain_shared(
            s,
            OUT,
            key=f"workers2-zk-{n}",
            what=f"two workers (Shared subscription), zookeeper, max_inflight={C} each",
            run_id=run_id,
            infos=[_ml(gone_topic, x) for x in two_ids],
            workers=2,
            concurrency=C,
            delete_via="zookeeper",
            deadline_s=60 + n * 0.5,
        )
        two.baseline, two.ratio = w1.key, (two.rate / w1.rate if two.rate and w1.rate else None)
        rows.append(two)

    # 4. Admin calls per 1,000 messages over live topics (owner route). Twice: orphans older than each
    if "topics" in parts:
        # topic's current ledger (made before the topics: a ledger dropped from the metadata is older than the
        # ledgers the topic still lists), then orphans newer than anything the topic lists (made after it): a
        # snapshot cannot vouch for a ledger id above its newest one, so each of those re-reads the topic.
        ns = "public/ldw-bench"
        async with new_session(30) as session:
            admin = StagingAdmin(s.admin_url, session)
            await admin.ensure_namespace(ns)
            await admin.set_retention(ns, -1, -1)
            for order in ("older", "newer"):
                print(f"[bench] {n_topics} live topics x {per_topic} orphans ({order} than the topic's ledgers) ...")
                topics = [f"persistent://{ns}/goals-{run_id}-{order}-{i}" for i in range(n_topics)]
                infos = []
                if order == "newer":
                    for t in topics:
                        await asyncio.to_thread(_produce, s, t, 12)
                for t in topics:
                    ids = await asyncio.to_thread(ledgers.create, s, per_topic, pulsar_ml_metadata(t), timeout_s=300)
                    infos += [_ml(t, x) for x in ids]
                if order == "older":
                    for t in topics:
                        await asyncio.to_thread(_produce, s, t, 12)
                random.shuffle(infos)  # spread over the topics, as a real backlog is
                await asyncio.sleep(2.5)
                r = await drain.drain(
                    s,
                    OUT,
                    key=f"worker-owner-{n_topics}topics-{order}",
                    what=f"worker, owner route, {n_topics} live topics, orphans {order} than the topic's ledgers",
                    run_id=run_id,
                    infos=infos,
                    route="owner",
                    concurrency=C,
                    delete_via="zookeeper",
                    deadline_s=60 + len(infos) * 0.5,
                )
                rows.append(r)
                owner_rows[order] = r
                for t in topics:
                    try:
                        await admin.delete_topic(TopicName.parse(t), force=True)
                    except Exception as e:
                        meta.setdefault("cleanup_errors", []).append(f"{t}: {e}")

    # 5. The S3 route against raw DeleteObjects.
    s3_pair: tuple[Row, Row, Row] | None = None
    if "s3" in parts:
        s3_pair = await s3_route.compare(s, OUT, run_id, s3_n, C)
        rows += list(s3_pair)

    # 6. The scanner: ledgers classified per second, metadata from the bookie HTTP API vs ZooKeeper.
    scan_rows: dict[str, Row] = {}
    if "scan" in parts:
        print(f"[bench] scanner: {n} more ledgers, then a whole-cluster dry run per metadata source ...", flush=True)
        scan_ids = await asyncio.to_thread(ledgers.create, s, n, pulsar_ml_metadata(gone_topic), timeout_s=900)
        cfg = OUT / f"scan-{run_id}.yaml"
        cfg.write_text(
            yaml.safe_dump(
                {
                    "pulsar": {"service_url": s.service_url, "admin_url": s.admin_url},
                    "bookkeeper": {"http_url": s.bookie_http_url},
                    "zookeeper": {"metadata_store_url": f"zk:{s.zookeeper_hosts}"},
                }
            )
        )
        for source in ("bookie", "zookeeper"):
            scan_rows[source] = await asyncio.to_thread(_scan_row, cfg, source)
            rows.append(scan_rows[source])
        z, b = scan_rows["zookeeper"], scan_rows["bookie"]
        z.baseline, z.ratio = b.key, (z.rate / b.rate if z.rate and b.rate else None)
        async with Stores(f"zk:{s.zookeeper_hosts}") as zk:
            for lid in scan_ids:
                await zk.bookkeeper.delete_ledger_metadata(lid)

    meta["loadavg_after"] = _loadavg()
    meta["total_s"] = round(time.monotonic() - t0, 1)
    print()
    print(report.table(rows))
    print("compared against: each worker row's 'vs' row, measured in this run")
    if fast is not None and raw is not None:
        print(
            f"already-gone fast path: worker {fast.rate or 0:.0f} msg/s vs raw consume+ack {raw.rate or 0:.0f} msg/s"
            f" = {fast.ratio or 0:.2f}x (goal >= 0.15x); worker RSS at ready {fast.rss_ready_mib} MiB,"
            f" peak over {gone_n} messages {fast.peak_rss_mib} MiB (goal < 200 MB and flat)"
        )
    if w1 is not None:
        print(f"worker vs sequential PIP pseudocode: {w1.ratio or 0:.2f}x (goal >= 5x)")
    if s3_pair is not None:
        r_raw, r_floor, r_w = s3_pair
        print(
            f"S3 route: worker {r_w.rate or 0:.0f} copies/s vs raw DeleteObjects {r_raw.rate or 0:.0f} copies/s"
            f" = {r_w.ratio or 0:.2f}x (goal >= 0.5x); the identity rule's floor (a HEAD of each object, then"
            f" DeleteObjects) {r_floor.rate or 0:.0f} copies/s = {r_floor.ratio or 0:.2f}x: the most any"
            f" program keeping the rule reaches on this server; worker vs floor"
            f" {(r_w.rate or 0) / (r_floor.rate or 1):.2f}x"
        )
    for line in drain.cpu_per_message(rows):
        print(line)
    if two is not None and w1 is not None:
        print(
            f"two workers vs one: {two.ratio or 0:.2f}x; shares {two.extra.get('shares')};"
            f" CPU-s {two.cpu_s} vs {w1.cpu_s}"
        )
    if scan_rows:
        z = scan_rows["zookeeper"]
        print(f"scanner, metadata from ZooKeeper vs the bookie HTTP API: {z.ratio or 0:.2f}x ledgers classified/s")
    for order, r in owner_rows.items():
        print(
            f"admin calls per 1,000 messages over {n_topics} topics, orphans {order} than the topic's ledgers:"
            f" {r.extra.get('admin_requests_per_1000_msgs')} ({r.extra.get('admin_requests')} calls for {r.n}"
            " messages; goal <= 20)"
        )
    report.keep(rows, meta, "goals")
    return 1 if any(r.errors for r in rows) else 0


def main() -> int:
    return asyncio.run(amain())


if __name__ == "__main__":
    raise SystemExit(main())
