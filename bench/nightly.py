"""Nightly jobs on Spark, side by side with the same code in one process (``python -m bench.nightly [--quick]``).

1. DLQ replay on the not-found fast path: N dead letters (ledgers that do not exist, of topics that are
   gone; ``delete_via: zookeeper``, so storage answers from the metadata store) in a 2-partition DLQ.
   Compared: ``replay`` on Spark local[2] (read, dedupe, decide in its default 4 partitions per core,
   Parquet) vs the same source reader and ``decide_rows`` in one process and one asyncio loop. Dry run:
   both read the same dead letters.
2. Audit: M ledger metadata records written in BookKeeper's own format (format 3) under a separate ledgers
   root in ZooKeeper, so no bookie sees them, owned by 100 topics that do not exist. Compared: the audit's
   ledger stage on Spark local[2] vs the scanner (``worker.operations.scanner.Scanner``, what ``scan`` runs) in one
   process over the same records read from the same root.

Rates exclude the SparkSession start (reported apart). Results: printed, and bench/out/nightly.json.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import tempfile
import time
import uuid
from typing import Any

from bench.env import OUT, stack
from testkit.admin import StagingAdmin
from worker.formats.message import LedgerComponent, LedgerType, PendingDeleteLedgerInfo, encode
from worker.formats.metadata_paths import hierarchical_ledger_path
from worker.formats.protobuf_wire import encode_field, encode_varint
from worker.settings import Settings, load_settings


def _settings(s: Any, dlq: str) -> Settings:
    return load_settings(
        None,
        pulsar={"service_url": s.service_url, "admin_url": s.admin_url},
        topics={"dlq": dlq},
        bookkeeper={"delete_via": "zookeeper"},
        zookeeper={"metadata_store_url": f"zk:{s.zookeeper_hosts}"},
        logging={"level": "WARNING"},
    )


# ---- 1. replay -----------------------------------------------------------------------------------------


def _fill_dlq(s: Any, dlq: str, n: int, run: str) -> None:
    import urllib.request

    import pulsar

    base = f"{s.admin_url}/admin/v2/persistent/{dlq.removeprefix('persistent://')}"
    req = urllib.request.Request(f"{base}/partitions", data=b"2", method="PUT")
    req.add_header("Content-Type", "application/json")
    urllib.request.urlopen(req, timeout=30).close()
    body = json.dumps({"ledgerId": -1, "entryId": -1, "partitionIndex": -1}).encode()
    req = urllib.request.Request(f"{base}/subscription/ledger-deletion-dlq-replay", data=body, method="PUT")
    req.add_header("Content-Type", "application/json")
    urllib.request.urlopen(req, timeout=30).close()
    client = pulsar.Client(s.service_url, logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error))
    try:
        producer = client.create_producer(
            dlq,
            batching_enabled=True,
            block_if_queue_full=True,
            message_routing_mode=pulsar.PartitionsRoutingMode.RoundRobinDistribution,
        )
        for i in range(n):
            info = PendingDeleteLedgerInfo(
                f"persistent://public/default/bench-gone-{run}-{i % 50}",
                LedgerComponent.MANAGED_LEDGER,
                LedgerType.LEDGER,
                10**15 + i,
            )
            producer.send_async(encode(info), None, properties={"reason": "transient", "RECONSUMETIMES": "10"})
        producer.flush()
        producer.close()
    finally:
        client.close()


async def _single_process(settings: Settings) -> tuple[int, float, dict[str, int]]:
    from worker.nightly.replay import decide_rows
    from worker.nightly.source import read_partition
    from worker.nightly.source_plan import plan

    t0 = time.monotonic()
    p = settings.pulsar
    parts = await plan(str(p.admin_url).rstrip("/"), settings.topics.dlq, settings.topics.dlq_replay_subscription, None)

    def read_all() -> list[dict[str, Any]]:
        return [{"payload": r[5]} for part in parts for r in read_partition(p.service_url, None, part, 30000)]

    rows = await asyncio.to_thread(read_all)
    await decide_rows(settings, rows, dry_run=True, concurrency=settings.nightly.concurrency)
    counts: dict[str, int] = {}
    for row in rows:
        counts[row["outcome"]] = counts.get(row["outcome"], 0) + 1
    return len(rows), time.monotonic() - t0, counts


def bench_replay(spark: Any, s: Any, n: int) -> dict[str, Any]:
    from worker.nightly.replay import ReplayOptions, replay

    run = uuid.uuid4().hex[:8]
    dlq = f"persistent://pulsar/system/__bench-nightly-{run}-DLQ"
    t0 = time.monotonic()
    _fill_dlq(s, dlq, n, run)
    fill_s = time.monotonic() - t0
    settings = _settings(s, dlq)
    read1, single_s, counts1 = asyncio.run(_single_process(settings))
    out = tempfile.mkdtemp(prefix="bench-replay-")
    try:
        t0 = time.monotonic()
        summary = replay(spark, settings, ReplayOptions(out, dry_run=True))
        spark_s = time.monotonic() - t0
    finally:
        shutil.rmtree(out, ignore_errors=True)
    return {
        "what": f"replay-dlq, not-found fast path, {n} dead letters (dry run, delete_via zookeeper)",
        "fill_s": round(fill_s, 1),
        "single": {
            "read": read1,
            "seconds": round(single_s, 2),
            "rate": round(read1 / single_s, 1),
            "outcomes": counts1,
        },
        "spark": {
            "read": summary.read,
            "seconds": round(spark_s, 2),
            "rate": round(summary.read / spark_s, 1),
            "outcomes": summary.rows,
        },
        "ratio": round((summary.read / spark_s) / (read1 / single_s), 2),
        "compared_against": "the same source reader + decision core (decide_rows) in one process, one asyncio loop",
    }


# ---- 2. audit ------------------------------------------------------------------------------------------


def serialized_metadata(ml_name: str, length: int, ctime_ms: int) -> bytes:
    """BookKeeper's LedgerMetadataSerDe format 3 (DataFormats.proto LedgerMetadataFormat), CLOSED."""
    custom = [("application", "pulsar"), ("component", "managed-ledger"), ("pulsar/managed-ledger", ml_name)]
    body = (
        encode_field(1, 1)  # quorumSize
        + encode_field(2, 1)  # ensembleSize
        + encode_field(3, length)
        + encode_field(4, 99)  # lastEntryId
        + encode_field(5, 3)  # state CLOSED
        + encode_field(6, encode_field(1, b"127.0.0.1:3181") + encode_field(2, 0))  # segment
        + encode_field(7, 1)  # ackQuorumSize
        + encode_field(10, ctime_ms)
        + b"".join(encode_field(11, encode_field(1, k.encode()) + encode_field(2, v.encode())) for k, v in custom)
    )
    return b"BookieMetadataFormatVersion\t3\n" + encode_varint(len(body)) + body


def _write_root(hosts: str, root: str, m: int, run: str) -> None:
    from kazoo.client import KazooClient

    zk = KazooClient(hosts=hosts, timeout=30)
    zk.start(30)
    try:
        layout = zk.get("/ledgers/LAYOUT")[0]
        zk.create(root, b"", makepath=True)
        zk.create(f"{root}/LAYOUT", layout)
        ctime = int(time.time() * 1000) - 86_400_000
        parents: set[str] = set()
        pending: list[Any] = []
        for i in range(m):
            path = hierarchical_ledger_path(i + 1, root)
            parent = path.rsplit("/", 1)[0]
            if parent not in parents:
                for f in pending:
                    f.get(timeout=60)
                pending = []
                zk.ensure_path(parent)
                parents.add(parent)
            ml = f"public/default/persistent/bench-audit-{run}-{i % 100}"
            pending.append(zk.create_async(path, serialized_metadata(ml, 1000 + i, ctime)))
            if len(pending) >= 2000:
                for f in pending:
                    f.get(timeout=60)
                pending = []
        for f in pending:
            f.get(timeout=60)
    finally:
        zk.stop()
        zk.close()


def _delete_root(hosts: str, root: str) -> None:
    from kazoo.client import KazooClient

    zk = KazooClient(hosts=hosts, timeout=30)
    zk.start(30)
    try:
        for sub in zk.get_children(root):
            for leaf_dir in zk.get_children(f"{root}/{sub}") if sub.isdigit() else []:
                d = f"{root}/{sub}/{leaf_dir}"
                futs = [zk.delete_async(f"{d}/{c}") for c in zk.get_children(d)]
                for f in futs:
                    f.get(timeout=60)
        zk.delete(root, recursive=True)
    finally:
        zk.stop()
        zk.close()


async def _scan_single(settings: Settings, root: str) -> tuple[int, float, dict[str, int]]:
    from worker.backends.http import new_session
    from worker.backends.ledger_listing import ledger_subtrees, read_subtrees
    from worker.backends.stores import Stores
    from worker.broker.snapshot_cache import snapshot_cache
    from worker.operations.scanner import Scanner

    url = settings.zookeeper.metadata_store_url
    assert url
    uri = f"zk://{url.removeprefix('zk:')}{root}"
    t0 = time.monotonic()
    # The scanner's own listing/read loop against the same records: ids from the subtree walk, each
    # ledger's metadata read by the scanner through the ZooKeeper ledger store, 16 at a time.
    ids = [r[0] for r in read_subtrees(uri, ledger_subtrees(uri))]
    async with Stores(url, uri) as zk, new_session(30) as session:
        store = zk.bookkeeper

        class Listing:
            async def list_ledger_ids(self) -> list[int]:
                return ids

            async def get_metadata(self, ledger_id: int) -> Any:
                got = await store.read(ledger_id)
                return None if got is None else got[0]

        admin = StagingAdmin(str(settings.pulsar.admin_url), session)
        snaps = snapshot_cache(admin, settings.worker, zk, ttl_s=60)
        report = await Scanner(Listing(), snaps, zk.pulsar, min_age_s=600).scan()
    return len(report.decisions), time.monotonic() - t0, report.counts()


def bench_audit(spark: Any, s: Any, m: int) -> dict[str, Any]:
    from pyspark.sql import functions as F

    from worker.nightly.audit import audit_ledgers

    run = uuid.uuid4().hex[:8]
    root = f"/bench-ledgers-{run}"
    settings = _settings(s, "persistent://pulsar/system/__unused-DLQ")
    t0 = time.monotonic()
    _write_root(s.zookeeper_hosts, root, m, run)
    write_s = time.monotonic() - t0
    try:
        n1, single_s, counts1 = asyncio.run(_scan_single(settings, root))
        t0 = time.monotonic()
        df = audit_ledgers(spark, settings, min_age_s=600, ledgers_root=root, partitions=2)
        counts2 = {r["verdict"]: int(r["n"]) for r in df.groupBy("verdict").agg(F.count("*").alias("n")).collect()}
        spark_s = time.monotonic() - t0
    finally:
        _delete_root(s.zookeeper_hosts, root)
    n2 = sum(counts2.values())
    return {
        "what": f"audit of {m} ledger metadata records (BookKeeper format 3, separate ZooKeeper root), 100 gone topics",
        "write_s": round(write_s, 1),
        "single": {"ledgers": n1, "seconds": round(single_s, 2), "rate": round(n1 / single_s, 1), "verdicts": counts1},
        "spark": {"ledgers": n2, "seconds": round(spark_s, 2), "rate": round(n2 / spark_s, 1), "verdicts": counts2},
        "ratio": round((n2 / spark_s) / (n1 / single_s), 2),
        "compared_against": (
            "the scanner (worker.operations.scanner.Scanner, what scan runs) in one process over the same root"
        ),
    }


def main() -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.nightly", description=__doc__)
    ap.add_argument("--quick", action="store_true", help="5k dead letters, 20k ledgers (default 100k / 200k)")
    ap.add_argument("--skip-replay", action="store_true")
    ap.add_argument("--skip-audit", action="store_true")
    args = ap.parse_args()
    n, m = (5_000, 20_000) if args.quick else (100_000, 200_000)
    n = int(os.environ.get("BENCH_NIGHTLY_N", n))
    m = int(os.environ.get("BENCH_NIGHTLY_M", m))
    s = stack()
    from worker.nightly.spark import session

    t0 = time.monotonic()
    spark = session("local[2]", "ldw-bench", **{"spark.sql.shuffle.partitions": "2"})
    startup = time.monotonic() - t0
    results: dict[str, Any] = {
        "spark_startup_s": round(startup, 1),
        "loadavg": os.getloadavg(),
        "cores": os.cpu_count(),
    }
    try:
        if not args.skip_replay:
            results["replay"] = bench_replay(spark, s, n)
            _print(results["replay"])
        if not args.skip_audit:
            results["audit"] = bench_audit(spark, s, m)
            _print(results["audit"])
    finally:
        spark.stop()
    print(f"[bench.nightly] SparkSession start (not in the rates): {startup:.1f}s; load average {os.getloadavg()}")
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "nightly.json").write_text(json.dumps(results, indent=2, default=str))
    return 0


def _print(r: dict[str, Any]) -> None:
    one, sp = r["single"], r["spark"]
    print(f"[bench.nightly] {r['what']}")
    print(f"  one process : {one['seconds']:>8}s  {one['rate']:>9}/s")
    print(f"  Spark local[2]: {sp['seconds']:>6}s  {sp['rate']:>9}/s  = {r['ratio']}x")
    print(f"  compared against: {r['compared_against']}")


if __name__ == "__main__":
    raise SystemExit(main())
