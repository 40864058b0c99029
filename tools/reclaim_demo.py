"""The disk coming back: bytes on the bookies' disks before, after the worker's deletes, and after the
garbage collection the worker asks for (``bookkeeper.gc_trigger_bytes``). ``make reclaim-demo``.

Four figures per bookie: before the topic is written, once it is written (flushed), after the deletes,
after the collection.

One run, on a real stack: a topic of ``--megabytes`` of incompressible messages (its ledgers roll every 5
entries), waited for until the bookies have flushed it into entry logs; the topic's metadata is then deleted
while its ledgers stay (real orphans); a worker with the GC trigger on deletes them through the bookie
HTTP API. The trigger's threshold is the orphans' total length, so the worker asks for a collection on the
last deletion: the "after deletes" figures are taken before that one (every ledger but the last deleted),
the "after GC" ones once every bookie has collected. Figures per bookie: its entry logs, journal and whole
data directory (read from the directories its own ``/api/v1/config/server_config`` names) and its own
metrics (BookKeeper's GarbageCollectorStats: ``bookie_RECLAIMED_DELETION_SPACE_BYTES``,
``bookie_RECLAIMED_COMPACTION_SPACE_BYTES``, ``bookie_ACTIVE_ENTRY_LOG_SPACE_BYTES``,
``bookie_DELETED_LEDGER_TOTAL``).

    python -m tools.reclaim_demo [--profile standalone|cluster] [--megabytes 48]

``standalone`` runs on a standalone instance of its own (ports and data apart from the shared stack, like
``make leak-demo``: started and stopped here); ``cluster`` on the cluster profile (started if down, and
then stopped again). Both come from ``deploy/local/stack.sh``, whose bookies export their metrics and
roll entry logs every ``BOOKIE_ENTRY_LOG_SIZE`` bytes.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import tempfile
import time
import urllib.request
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from testkit.harness import WorkerHarness
from testkit.orphans import delete_topic_metadata_keep_ledgers
from testkit.stack import STACK, Profile, Stack, admin_for, bookie_for, healthy, stack_of
from testkit.topics import eventually, produce
from worker.formats.message import LedgerComponent, LedgerType, PendingDeleteLedgerInfo
from worker.formats.topic_name import TopicName

# BookKeeper's own metrics (bookkeeper-server GarbageCollectorStats, scope "bookie" with the ledger
# storage's ledgerDir/indexDir labels; BookKeeperServerStats names them).
RECLAIMED_DELETION = "bookie_RECLAIMED_DELETION_SPACE_BYTES"
RECLAIMED_COMPACTION = "bookie_RECLAIMED_COMPACTION_SPACE_BYTES"
ACTIVE_ENTRY_LOG_SPACE = "bookie_ACTIVE_ENTRY_LOG_SPACE_BYTES"
DELETED_LEDGERS = "bookie_DELETED_LEDGER_TOTAL"
BOOKIE_METRICS = (RECLAIMED_DELETION, RECLAIMED_COMPACTION, ACTIVE_ENTRY_LOG_SPACE, DELETED_LEDGERS)

# before the topic is written, once it is flushed, after the worker's deletes, after the collection.
PHASES = ("before", "written", "after_deletes", "after_gc")
MESSAGE_BYTES = 200_000
DEMO = {
    "STACK_DIR": str(STACK.parent / ".data-reclaim-demo"),
    # Below the kernel's ephemeral range (32768-60999), where a client socket could take one first.
    "WEB_PORT": "19080",
    "BROKER_PORT": "19650",
    "BOOKIE_PORT": "19181",
    "BOOKIE_HTTP_PORT": "19000",
    "ZK_PORT": "19281",
    "S3_PORT": "19500",
    "S3_BUCKET": "pulsar-offload-reclaim-demo",
    "PULSAR_MEM": "-Xms256m -Xmx768m -XX:MaxDirectMemorySize=512m",
    # Stock brokers: the extension plays no part in reclaiming, and its jar is not rebuilt under running brokers.
    "BROKER_EXTENSION": "0",
}


def http_json(method: str, url: str, body: object | None = None) -> Any:
    req = urllib.request.Request(
        url,
        method=method,
        data=None if body is None else json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(req, timeout=30) as r:
        text = r.read().decode()
    return json.loads(text) if text.strip() else None


@dataclass(frozen=True)
class BookieDisk:
    """One bookie: its HTTP API and the directories its configuration names."""

    url: str
    ledger_dirs: tuple[Path, ...]
    journal_dirs: tuple[Path, ...]

    @classmethod
    def of(cls, url: str) -> BookieDisk:
        conf = http_json("GET", f"{url}/api/v1/config/server_config")

        def dirs(*keys: str) -> tuple[Path, ...]:
            for k in keys:
                if conf.get(k):
                    return tuple(Path(d.strip()) for d in str(conf[k]).split(",") if d.strip())
            return ()

        return cls(url, dirs("ledgerDirectories"), dirs("journalDirectories", "journalDirectory"))

    def figures(self) -> dict[str, float]:
        """Bytes of entry logs (``*.log`` under the ledger dirs), of journal files (``*.txn``), of everything
        under both (the index's RocksDB too), and the bookie's own metrics (summed over ledger dirs)."""
        roots = dict.fromkeys([*self.ledger_dirs, *self.journal_dirs])
        out: dict[str, float] = {
            "entry_logs": sum(_size(p) for d in self.ledger_dirs for p in d.rglob("*.log")),
            "journal": sum(_size(p) for d in self.journal_dirs for p in d.rglob("*.txn")),
            "data_dir": sum(_size(p) for d in roots for p in d.rglob("*") if p.is_file()),
        }
        with urllib.request.urlopen(f"{self.url}/metrics", timeout=30) as r:
            text = r.read().decode()
        for fam in text_string_to_metric_families(text):
            for s in fam.samples:
                # prometheus_client's parser suffixes a counter's samples with _total; BookKeeper writes (and
                # Prometheus stores) the bare names.
                name = s.name.removesuffix("_total")
                if name in BOOKIE_METRICS:
                    out[name] = out.get(name, 0.0) + s.value
        return out

    def in_force_gc(self) -> bool:
        return str(http_json("GET", f"{self.url}/api/v1/bookie/gc").get("is_in_force_gc")) == "true"


def _size(p: Path) -> int:
    try:
        return p.stat().st_size
    except OSError:  # an entry log removed while being listed: it is gone
        return 0


@dataclass
class Report:
    stack: str
    written_bytes: int = 0
    orphans: int = 0
    orphan_bytes: int = 0
    phases: dict[str, dict[str, dict[str, float]]] = field(default_factory=dict)
    gc_requests: dict[str, float] = field(default_factory=dict)

    def total(self, phase: str, key: str) -> float:
        return sum(b.get(key, 0.0) for b in self.phases[phase].values())

    def table(self) -> str:
        keys = ("entry_logs", "journal", "data_dir", *BOOKIE_METRICS)
        lines = [
            f"== reclaim on the {self.stack}: {self.written_bytes / 1e6:.1f} MB written; {self.orphans} orphan "
            f"ledgers ({self.orphan_bytes / 1e6:.1f} MB by their metadata) deleted by the worker; GC requests "
            + ", ".join(f"{k} {v:g}" for k, v in sorted(self.gc_requests.items())),
            f"{'bookie':<24} {'figure':<40} {'before':>14} {'written':>14} {'after deletes':>14} {'after GC':>14}",
        ]
        for bookie in self.phases["before"]:
            for k in keys:
                row = [self.phases[p][bookie].get(k, 0.0) for p in PHASES]
                lines.append(f"{bookie:<24} {k:<40} " + " ".join(f"{v:>14,.0f}" for v in row))
        return "\n".join(lines)


def snapshot(bookies: Sequence[BookieDisk]) -> dict[str, dict[str, float]]:
    return {b.url: b.figures() for b in bookies}


async def run_reclaim(
    stack: Stack,
    bookie_urls: Sequence[str],
    workdir: Path,
    *,
    name: str,
    megabytes: int = 48,
    on_phase: Callable[[str], None] = lambda phase: None,
    worker_http_port: Callable[[int], None] = lambda port: None,
) -> Report:
    """The whole scenario on ``stack`` (see the module docstring); ``on_phase`` is told each phase's name
    once its figures are taken, ``worker_http_port`` the worker's metrics port once it runs."""
    bookies = [BookieDisk.of(u) for u in bookie_urls]
    report = Report(stack=name)
    ns = f"public/ldw-reclaim-{uuid.uuid4().hex[:8]}"
    http_json("PUT", f"{stack.admin_url}/admin/v2/namespaces/{ns}")
    # Infinite retention: the broker must not trim the topic's ledgers itself before they are orphaned.
    http_json(
        "POST",
        f"{stack.admin_url}/admin/v2/namespaces/{ns}/retention",
        {"retentionTimeInMinutes": -1, "retentionSizeInMB": -1},
    )
    topic = f"persistent://{ns}/reclaim"

    report.phases["before"] = snapshot(bookies)
    on_phase("before")
    entry_logs_before = report.total("before", "entry_logs")

    n = max(5, megabytes * 1_000_000 // MESSAGE_BYTES)
    await asyncio.to_thread(produce, stack.service_url, topic, n, payload=os.urandom(MESSAGE_BYTES))
    report.written_bytes = n * MESSAGE_BYTES

    async def flushed() -> bool:
        # The bookies write entries to entry logs on their flush (flushInterval, or a full write cache).
        now = sum(b.figures()["entry_logs"] for b in bookies)
        return now - entry_logs_before >= 0.9 * report.written_bytes

    await eventually(flushed, timeout=240, interval=3, what="the topic's entries flushed into entry logs")
    report.phases["written"] = snapshot(bookies)
    on_phase("written")

    async with admin_for(stack) as any_broker:
        # In a cluster the topic's owner answers its internalStats: talk to that broker.
        owner = replace(stack, admin_url=(await any_broker.lookup(TopicName.parse(topic))).rstrip("/"))
    async with admin_for(owner) as admin, bookie_for(stack) as bookie:
        ids = await delete_topic_metadata_keep_ledgers(admin, stack.zookeeper_hosts, topic)
        lengths = {}
        for i in ids:
            md = await bookie.get_metadata(i)
            assert md is not None, f"orphan {i} vanished"
            lengths[i] = md.length
    # The largest last: its deletion crosses the threshold, after the "after deletes" figures.
    ordered = sorted(ids, key=lambda i: lengths[i])
    report.orphans, report.orphan_bytes = len(ids), sum(lengths.values())

    w = WorkerHarness(
        stack,
        workdir,
        f"reclaim-{uuid.uuid4().hex[:8]}",
        bookkeeper={
            "http_url": bookie_urls[0],
            "http_urls": list(bookie_urls[1:]),
            "gc_trigger_bytes": report.orphan_bytes,
            "gc_min_interval_s": 600,
        },
    )
    w.start()
    worker_http_port(w.port)
    try:
        msgs = {
            i: PendingDeleteLedgerInfo(topic, LedgerComponent.MANAGED_LEDGER, LedgerType.LEDGER, i) for i in ordered
        }

        async def deleted(some: Sequence[int]) -> bool:
            async with bookie_for(stack) as b:
                return all([await b.get_metadata(i) is None for i in some])

        for i in ordered[:-1]:
            w.send(msgs[i])
        await eventually(lambda: deleted(ordered[:-1]), timeout=300, interval=2, what="the orphans deleted")
        assert w.metric("ledger_deletion_bookie_gc_requests_total") == 0, "GC asked for below the threshold"
        report.phases["after_deletes"] = snapshot(bookies)
        on_phase("after_deletes")

        w.send(msgs[ordered[-1]])
        await eventually(lambda: deleted(ordered[-1:]), timeout=120, interval=1, what="the last orphan deleted")

        async def requested() -> bool:
            return w.metric("ledger_deletion_bookie_gc_requests_total", outcome="200") >= len(bookies)

        await eventually(requested, timeout=60, interval=1, what="a garbage collection asked of every bookie")
        report.gc_requests = {
            dict(lbls)["bookie"] + " " + dict(lbls)["outcome"]: v
            for (n_, lbls), v in w.metrics().items()
            if n_ == "ledger_deletion_bookie_gc_requests_total"
        }
        before_reclaimed = sum(report.total("after_deletes", k) for k in (RECLAIMED_DELETION, RECLAIMED_COMPACTION))

        async def collected() -> bool:
            now = snapshot(bookies)
            reclaimed = sum(b.get(k, 0.0) for b in now.values() for k in (RECLAIMED_DELETION, RECLAIMED_COMPACTION))
            return reclaimed > before_reclaimed and not any(b.in_force_gc() for b in bookies)

        await eventually(collected, timeout=180, interval=2, what="the bookies' garbage collection reclaiming space")
        await asyncio.sleep(2)  # a compaction's last entry log removal after the counter moved
        report.phases["after_gc"] = snapshot(bookies)
        on_phase("after_gc")
    finally:
        w.stop()
    return report


def _stack_sh(instance: Profile, *args: str, timeout: float = 900) -> str:
    r = instance.run(*args, timeout=timeout)
    if r.returncode != 0:
        raise SystemExit(f"stack.sh {' '.join(args)} failed:\n{r.stderr[-3000:]}")
    return r.stdout


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--profile", choices=("standalone", "cluster"), default="standalone")
    ap.add_argument("--megabytes", type=int, default=48)
    args = ap.parse_args(argv)
    # The standalone demo runs on an instance of its own (LDW_DEMO_<VAR> sets its <VAR>), the cluster on the
    # cluster profile.
    instance = Profile("standalone", DEMO, prefix="LDW_DEMO_") if args.profile == "standalone" else Profile("cluster")
    was_up = healthy(instance.addresses())
    _stack_sh(instance, "up")
    try:
        e = instance.addresses()
        urls = [e["BOOKIE_HTTP_URL"]] + ([e["BOOKIE_HTTP_URL_2"]] if "BOOKIE_HTTP_URL_2" in e else [])
        with tempfile.TemporaryDirectory(prefix="ldw-reclaim-") as tmp:
            t0 = time.monotonic()
            report = asyncio.run(
                run_reclaim(
                    stack_of(e),
                    urls,
                    Path(tmp),
                    name=f"{args.profile} stack ({len(urls)} bookie{'s' if len(urls) > 1 else ''})",
                    megabytes=args.megabytes,
                    on_phase=lambda p: print(f"-- {p} measured ({time.monotonic() - t0:.0f} s)", flush=True),
                )
            )
        print(report.table())
        print(json.dumps({"stack": args.profile, "written_bytes": report.written_bytes, "phases": report.phases}))
    finally:
        if not was_up:
            _stack_sh(instance, "down", timeout=300)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
