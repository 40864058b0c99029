"""Scale: ``scan --dry-run`` and the audit (Spark ``local[2]``) over a synthetic cluster written straight into
ZooKeeper, on a standalone stack instance of its own (``make bench-scale``; not part of ``make bench``).

For each size N (ledgers), on a fresh instance (its own STACK_DIR and ports, started and stopped here):

- N/10 live topics in 10 namespaces (``public/scale-0`` ... ``-9``, made through the admin API), each with a
  managed-ledger znode listing 8 ledgers and a cursor znode naming a cursor ledger, in Pulsar's format
  (``worker.formats.managed_ledger_metadata``'s encoders: what the broker writes);
- a ledger-metadata znode in BookKeeper's format (``LedgerMetadataFormat``, format 3, CLOSED, a day old) for
  each of those 9 ledgers, plus N/10 orphans: half data ledgers their topic does not list, a quarter cursor
  ledgers their cursor does not name, a quarter ledgers of topics that have no managed ledger (10 each);
- ids from 1,000,000,000 up, handed out in a shuffled order, so a topic's ledgers are spread over the id
  space as a busy cluster's are (every subtree of the ledgers root names thousands of topics).

No bookie holds any entry (a dry run reads metadata only). Then ``scan --dry-run --json`` and ``audit
--no-buckets`` (``--master local[2]``) over those namespaces, each in a process of its own, must find exactly
the orphans written. Measured: wall time; peak memory (the scan: its VmHWM, from ``/usr/bin/time``; the audit:
the peak of its whole process tree's RSS, the Spark JVM and its Python workers included, sampled every
0.2 s); ZooKeeper requests (the server's ``zk_packets_received``, 4-letter ``mntr``) per ledger, less the
idle rate measured just before. Results: printed, and ``bench/results/<time>-scale-<id>.json``.

    python -m bench.scale [--sizes 100000,1000000] [--keep]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.env import RESULTS
from testkit.managed_ledger_encoding import encode_managed_cursor_info, encode_managed_ledger_info
from testkit.stack import REPO, Profile
from worker.formats.managed_ledger_metadata import (
    LedgerInfo,
    ManagedCursorInfo,
    ManagedLedgerInfo,
)
from worker.formats.metadata_paths import hierarchical_ledger_path
from worker.formats.protobuf_wire import encode_field, encode_varint
from worker.formats.topic_name import TopicName

INSTANCE = {
    "STACK_DIR": str(REPO / "deploy" / "local" / ".data-bench-scale"),
    "WEB_PORT": "18080",
    "BROKER_PORT": "16650",
    "BOOKIE_PORT": "13181",
    "BOOKIE_HTTP_PORT": "18000",
    "ZK_PORT": "12181",
    "S3_PORT": "15000",
    "BROKER_EXTENSION": "0",
    # ZooKeeper runs inside the standalone JVM: a million znodes and their snapshots need the heap.
    "PULSAR_MEM": "-Xms2g -Xmx6g -XX:MaxDirectMemorySize=1g",
    "PULSAR_EXTRA_OPTS": "-Dpulsar.allocator.exit_on_oom=true -Dio.netty.recycler.maxCapacityPerThread=4096"
    " -Dzookeeper.4lw.commands.whitelist=mntr,srvr",
    # The bookie's garbage collector walks every ledger's metadata: not during the measurement.
    "BROKER_CONF": "gcWaitTime=86400000 majorCompactionInterval=0 minorCompactionInterval=0",
}
NAMESPACES = [f"public/scale-{i}" for i in range(10)]
FIRST_ID = 1_000_000_000
DAY_MS = 86_400_000


# ---- the instance ----------------------------------------------------------------------------------------


def _instance() -> Profile:
    return Profile("standalone", INSTANCE, prefix="LDW_BENCH_SCALE_")


def _stack_sh(*args: str, timeout: float = 900) -> subprocess.CompletedProcess[str]:
    return _instance().run(*args, timeout=timeout)


def bring_up() -> None:
    _stack_sh("down")
    shutil.rmtree(INSTANCE["STACK_DIR"], ignore_errors=True)
    r = _stack_sh("up")
    if r.returncode != 0:
        raise SystemExit(f"stack.sh up failed:\n{r.stderr[-3000:]}")


def bring_down() -> None:
    _instance().down_dropping_data(timeout=900)


def admin_url() -> str:
    return f"http://127.0.0.1:{INSTANCE['WEB_PORT']}"


def zk_hosts() -> str:
    return f"127.0.0.1:{INSTANCE['ZK_PORT']}"


def _rest(method: str, path: str, body: Any = None) -> None:
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(
        f"{admin_url()}{path}", data=data, method=method, headers={"Content-Type": "application/json"}
    )
    try:
        urllib.request.urlopen(req, timeout=60).close()
    except urllib.error.HTTPError as e:
        if e.code != 409:
            raise


def zk_packets() -> int:
    """The server's count of requests received (ZooKeeper's 4-letter ``mntr``)."""
    with socket.create_connection(("127.0.0.1", int(INSTANCE["ZK_PORT"])), timeout=10) as s:
        s.sendall(b"mntr")
        out = b""
        while chunk := s.recv(65536):
            out += chunk
    for line in out.decode().splitlines():
        k, _, v = line.partition("\t")
        if k == "zk_packets_received":
            return int(v)
    raise RuntimeError(f"no zk_packets_received in mntr: {out[:300]!r}")


# ---- the synthetic cluster --------------------------------------------------------------------------------


def ledger_metadata(custom: dict[str, str], length: int, ctime_ms: int) -> bytes:
    """BookKeeper's stored ledger metadata (LedgerMetadataSerDe format 3: bookkeeper-proto DataFormats.proto
    LedgerMetadataFormat) as a Pulsar broker's client writes it: one bookie, CRC32C, CLOSED."""
    body = (
        encode_field(1, 1)  # quorumSize
        + encode_field(2, 1)  # ensembleSize
        + encode_field(3, length)
        + encode_field(4, 9)  # lastEntryId
        + encode_field(5, 3)  # state CLOSED
        + encode_field(6, encode_field(1, b"127.0.0.1:13181") + encode_field(2, 0))  # segment: ensemble, firstEntryId
        + encode_field(7, 3)  # digestType CRC32C
        + encode_field(8, b"")  # password
        + encode_field(9, 1)  # ackQuorumSize
        + encode_field(10, ctime_ms)
        + b"".join(
            encode_field(11, encode_field(1, k.encode()) + encode_field(2, v.encode())) for k, v in custom.items()
        )
    )
    return b"BookieMetadataFormatVersion\t3\n" + encode_varint(len(body)) + body


@dataclass
class Synthetic:
    ledgers: int
    topics: int
    gone_topics: int
    orphans: set[int] = field(default_factory=set)
    znodes: int = 0
    write_s: float = 0.0


def _plan(n: int, seed: int) -> tuple[list[tuple[int, str]], int, int]:
    """Every ledger to write as (topic index, kind), shuffled; kinds: data, cursor, orphan-data,
    orphan-cursor, gone. Returns the plan, the live topics and the gone topics."""
    topics = n // 10
    live = 9 * topics
    orphans = n - live
    orphan_data, orphan_cursor = orphans // 2, orphans // 4
    gone = orphans - orphan_data - orphan_cursor
    gone_topics = max(1, gone // 10)
    rnd = random.Random(seed)
    plan: list[tuple[int, str]] = []
    for t in range(topics):
        plan += [(t, "data")] * 8 + [(t, "cursor")]
    plan += [(rnd.randrange(topics), "orphan-data") for _ in range(orphan_data)]
    plan += [(rnd.randrange(topics), "orphan-cursor") for _ in range(orphan_cursor)]
    plan += [(topics + i % gone_topics, "gone") for i in range(gone)]
    rnd.shuffle(plan)
    return plan, topics, gone_topics


def _topic(i: int) -> TopicName:
    return TopicName.parse(f"persistent://{NAMESPACES[i % len(NAMESPACES)]}/t{i:07d}")


def write_synthetic(n: int, seed: int = 7) -> Synthetic:
    from kazoo.client import KazooClient

    for ns in NAMESPACES:
        _rest("PUT", f"/admin/v2/namespaces/{ns}")
    plan, topics, gone_topics = _plan(n, seed)
    syn = Synthetic(len(plan), topics, gone_topics)
    ctime = int(time.time() * 1000) - DAY_MS
    data_ids: list[list[int]] = [[] for _ in range(topics)]
    cursor_id = [-1] * topics
    zk = KazooClient(hosts=zk_hosts(), timeout=60)
    zk.start(60)
    t0 = time.monotonic()
    try:
        pending: list[Any] = []
        parents: set[str] = set()

        def flush() -> None:
            for f in pending:
                f.get(timeout=120)
            pending.clear()

        for i, (t, kind) in enumerate(plan):
            lid = FIRST_ID + i
            topic = _topic(t)
            custom = {"application": "pulsar", "component": "managed-ledger"}
            custom["pulsar/managed-ledger"] = topic.managed_ledger_name
            if kind == "data":
                data_ids[t].append(lid)
            elif kind == "cursor":
                cursor_id[t] = lid
                custom["pulsar/cursor"] = "sub"
            elif kind == "orphan-cursor":
                custom["pulsar/cursor"] = "sub"
                syn.orphans.add(lid)
            else:
                syn.orphans.add(lid)
            path = hierarchical_ledger_path(lid, "/ledgers")
            parent = path.rsplit("/", 1)[0]
            if parent not in parents:
                flush()
                zk.ensure_path(parent)
                parents.add(parent)
            pending.append(zk.create_async(path, ledger_metadata(custom, 1000 + i % 5000, ctime)))
            if len(pending) >= 5000:
                flush()
        flush()
        for ns in NAMESPACES:
            zk.ensure_path(f"/managed-ledgers/{ns}/persistent")
        for t in range(topics):
            info = ManagedLedgerInfo(tuple(LedgerInfo(lid, 10, 1000, ctime) for lid in sorted(data_ids[t])))
            path = f"/managed-ledgers/{_topic(t).managed_ledger_name}"
            pending.append(zk.create_async(path, encode_managed_ledger_info(info)))
            if len(pending) >= 5000:
                flush()
        flush()
        for t in range(topics):
            cursor = ManagedCursorInfo(cursor_id[t], min(data_ids[t]), 9, ctime)
            path = f"/managed-ledgers/{_topic(t).managed_ledger_name}/sub"
            pending.append(zk.create_async(path, encode_managed_cursor_info(cursor)))
            if len(pending) >= 5000:
                flush()
        flush()
    finally:
        zk.stop()
        zk.close()
    syn.write_s = round(time.monotonic() - t0, 1)
    syn.znodes = len(plan) + 2 * topics
    return syn


# ---- the runs ---------------------------------------------------------------------------------------------


def write_config(path: Path) -> None:
    import yaml

    cfg = {
        "pulsar": {"service_url": f"pulsar://127.0.0.1:{INSTANCE['BROKER_PORT']}", "admin_url": admin_url()},
        "bookkeeper": {"http_url": f"http://127.0.0.1:{INSTANCE['BOOKIE_HTTP_PORT']}"},
        "zookeeper": {"metadata_store_url": f"zk:{zk_hosts()}"},
        "offload": {"s3_targets": []},
        "logging": {"level": "WARNING"},
    }
    path.write_text(yaml.safe_dump(cfg))


def _namespace_args() -> list[str]:
    return [a for ns in NAMESPACES for a in ("-n", ns)]


class TreeRss:
    """The peak of the summed RSS of a process and its descendants, sampled every ``interval_s``, and their
    CPU time (each process's last sampled utime + stime: a process that ends between two samples loses at
    most its last ``interval_s``)."""

    def __init__(self, pid: int, interval_s: float = 0.2) -> None:
        self.pid = pid
        self.interval_s = interval_s
        self.peak_kib = 0
        self.cpu_ticks: dict[int, int] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _tree(self) -> list[int]:
        children: dict[int, list[int]] = {}
        for d in os.listdir("/proc"):
            if not d.isdigit():
                continue
            try:
                with open(f"/proc/{d}/stat") as f:
                    ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                continue
            children.setdefault(ppid, []).append(int(d))
        out, todo = [], [self.pid]
        while todo:
            p = todo.pop()
            out.append(p)
            todo += children.get(p, [])
        return out

    def _run(self) -> None:
        while not self._stop.is_set():
            total = 0
            for p in self._tree():
                try:
                    with open(f"/proc/{p}/status") as f:
                        for line in f:
                            if line.startswith("VmRSS:"):
                                total += int(line.split()[1])
                    with open(f"/proc/{p}/stat") as f:
                        stat = f.read().rsplit(")", 1)[1].split()
                    self.cpu_ticks[p] = int(stat[11]) + int(stat[12])
                except (OSError, ValueError, IndexError):
                    continue
            self.peak_kib = max(self.peak_kib, total)
            self._stop.wait(self.interval_s)

    def stop(self) -> int:
        self._stop.set()
        self._thread.join()
        return self.peak_kib

    @property
    def cpu_s(self) -> float:
        return sum(self.cpu_ticks.values()) / os.sysconf("SC_CLK_TCK")


def _idle_rate(seconds: float = 10.0) -> float:
    a = zk_packets()
    time.sleep(seconds)
    return (zk_packets() - a) / seconds


def load_average() -> float:
    return round(os.getloadavg()[0], 1)


def run_scan(config: Path, concurrency: int) -> dict[str, Any]:
    cmd = [sys.executable, "-m", "worker.cli", "scan", "--dry-run", "--json", "--config", str(config)]
    cmd += ["--min-age", "10m", "--concurrency", str(concurrency), *_namespace_args()]
    idle = _idle_rate()
    before = zk_packets()
    with tempfile.NamedTemporaryFile("r", suffix=".time") as tf:
        t0 = time.monotonic()
        r = subprocess.run(
            ["/usr/bin/time", "-f", "%M %U %S", "-o", tf.name, *cmd], cwd=REPO, capture_output=True, text=True
        )
        wall = time.monotonic() - t0
        peak, user, system = tf.read().strip().splitlines()[-1].split()
        peak_kib, cpu_s = int(peak), float(user) + float(system)
    packets = zk_packets() - before
    if r.returncode != 0:
        raise SystemExit(f"scan failed ({r.returncode}):\n{r.stderr[-3000:]}")
    report = json.loads(r.stdout.strip().splitlines()[-1])
    return {
        "wall_s": round(wall, 1),
        "cpu_s": round(cpu_s, 1),
        "load_average_after": load_average(),
        "peak_rss_mib": round(peak_kib / 1024, 1),
        "zk_requests": packets,
        "zk_requests_idle_share": round(idle * wall),
        "report": report,
    }


def run_audit(config: Path, report_dir: Path) -> dict[str, Any]:
    cmd = [sys.executable, "-m", "worker.cli", "audit", "--config", str(config), "--no-buckets"]
    cmd += ["--master", "local[2]", "--min-age", "10m", "--report-dir", str(report_dir), *_namespace_args()]
    idle = _idle_rate()
    before = zk_packets()
    t0 = time.monotonic()
    p = subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    rss = TreeRss(p.pid)
    out, err = p.communicate()
    wall = time.monotonic() - t0
    peak_kib = rss.stop()
    packets = zk_packets() - before
    if p.returncode != 0:
        raise SystemExit(f"audit failed ({p.returncode}):\n{err[-3000:]}\n{out[-2000:]}")
    import pyarrow.dataset as ds

    dataset = ds.dataset(str(report_dir / "audit" / "ledgers"), format="parquet")
    table = dataset.to_table(columns=["ledger_id", "verdict"])
    rows = table.to_pydict()
    return {
        "wall_s": round(wall, 1),
        "cpu_s": round(rss.cpu_s, 1),
        "load_average_after": load_average(),
        "peak_tree_rss_mib": round(peak_kib / 1024, 1),
        "zk_requests": packets,
        "zk_requests_idle_share": round(idle * wall),
        "summary": out.strip().splitlines()[-1],
        "verdicts": dict(zip(rows["ledger_id"], rows["verdict"], strict=True)),
    }


def one_size(n: int, concurrency: int, keep: bool) -> dict[str, Any]:
    print(f"[bench] size {n}: starting a stack instance of its own (web {INSTANCE['WEB_PORT']})", flush=True)
    bring_up()
    try:
        syn = write_synthetic(n)
        print(
            f"[bench] wrote {syn.znodes} znodes ({syn.ledgers} ledgers, {syn.topics} topics, "
            f"{len(syn.orphans)} orphans) in {syn.write_s}s",
            flush=True,
        )
        work = Path(tempfile.mkdtemp(prefix="ldw-bench-scale-"))
        try:
            config = work / "worker.yaml"
            write_config(config)
            scan = run_scan(config, concurrency)
            found = {d["ledger_id"] for d in scan["report"]["orphans"]}
            scan_exact = found == syn.orphans
            print(
                f"[bench] scan: {scan['wall_s']} s ({scan['cpu_s']} s CPU), peak RSS {scan['peak_rss_mib']} MiB, "
                f"{scan['zk_requests']} ZooKeeper requests; orphans exact: {scan_exact}",
                flush=True,
            )
            audit = run_audit(config, work / "reports")
            audited = {lid for lid, v in audit.pop("verdicts").items() if v == "orphan"}
            audit_exact = audited == syn.orphans
            print(
                f"[bench] audit: {audit['wall_s']} s ({audit['cpu_s']} s CPU), peak tree RSS "
                f"{audit['peak_tree_rss_mib']} MiB, "
                f"{audit['zk_requests']} ZooKeeper requests; orphans exact: {audit_exact}",
                flush=True,
            )
        finally:
            shutil.rmtree(work, ignore_errors=True)
    finally:
        if not keep:
            bring_down()
    counts = scan["report"]["counts"]
    scan.pop("report")
    return {
        "ledgers": syn.ledgers,
        "topics": syn.topics + syn.gone_topics,
        "orphans": len(syn.orphans),
        "write_s": syn.write_s,
        "scan": {
            **scan,
            "counts": counts,
            "orphans_exact": scan_exact,
            "missed": sorted(syn.orphans - found)[:20],
            "extra": sorted(found - syn.orphans)[:20],
            "requests_per_ledger": round((scan["zk_requests"] - scan["zk_requests_idle_share"]) / syn.ledgers, 3),
            "us_per_ledger": round(scan["wall_s"] * 1e6 / syn.ledgers, 1),
        },
        "audit": {
            **audit,
            "orphans_exact": audit_exact,
            "missed": sorted(syn.orphans - audited)[:20],
            "extra": sorted(audited - syn.orphans)[:20],
            "requests_per_ledger": round((audit["zk_requests"] - audit["zk_requests_idle_share"]) / syn.ledgers, 3),
            "us_per_ledger": round(audit["wall_s"] * 1e6 / syn.ledgers, 1),
        },
    }


def main() -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.scale", description=__doc__)
    ap.add_argument("--sizes", default="100000,1000000", help="ledger counts, comma-separated")
    ap.add_argument("--concurrency", type=int, default=16, help="scan --concurrency")
    ap.add_argument("--keep", action="store_true", help="leave the last instance running (for inspection)")
    args = ap.parse_args()
    sizes = [int(x) for x in args.sizes.split(",")]
    rows = []
    for i, n in enumerate(sizes):
        rows.append(one_size(n, args.concurrency, args.keep and i == len(sizes) - 1))
    result = {
        "bench": "scale",
        "time": time.strftime("%Y-%m-%dT%H:%M:%S"),
        "git": subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True
        ).stdout.strip(),
        "machine": {"cpus": os.cpu_count()},
        "concurrency": args.concurrency,
        "sizes": rows,
    }
    if len(rows) > 1:
        a, b = rows[0], rows[-1]
        k = b["ledgers"] / a["ledgers"]
        result["growth"] = {
            "ledgers": k,
            "scan_time": round(b["scan"]["wall_s"] / a["scan"]["wall_s"], 2),
            "scan_peak_rss": round(b["scan"]["peak_rss_mib"] / a["scan"]["peak_rss_mib"], 2),
            "scan_requests_per_ledger": (a["scan"]["requests_per_ledger"], b["scan"]["requests_per_ledger"]),
            "audit_time": round(b["audit"]["wall_s"] / a["audit"]["wall_s"], 2),
            "audit_peak_rss": round(b["audit"]["peak_tree_rss_mib"] / a["audit"]["peak_tree_rss_mib"], 2),
            "audit_requests_per_ledger": (a["audit"]["requests_per_ledger"], b["audit"]["requests_per_ledger"]),
        }
    RESULTS.mkdir(parents=True, exist_ok=True)
    out = RESULTS / f"{time.strftime('%Y-%m-%dT%H%M%S')}-scale-{uuid.uuid4().hex[:8]}.json"
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps({k: v for k, v in result.items() if k != "sizes"}, indent=2))
    print(f"[bench] results: {out}")
    ok = all(r["scan"]["orphans_exact"] and r["audit"]["orphans_exact"] for r in rows)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
