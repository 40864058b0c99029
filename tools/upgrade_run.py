"""The rolling upgrade (``make upgrade-test``): a cluster with the broker extension and a worker moved from Pulsar's
4.0 line to its 5.0 line one process at a time, and one broker back, under Pulsar's own load generator.

On the ``upgrade-cluster`` stack profile (one ZooKeeper, two bookies, two brokers; ports and data of its own), all
on the default line (4.0.8) with the extension on both brokers and a worker draining the default queue:

- ``pulsar-perf produce`` and ``pulsar-perf consume`` (the 4.0.8 distribution's: an older client against newer
  brokers, as in any rolling upgrade) run on a partitioned topic from the first phase to the last;
- a churn loop keeps dropping ledgers the ways a cluster does (``tools.leak_demo``'s drop paths: retention trims,
  rollover clean-up, cursor switches, unsubscribes, topic and namespace deletions, offloads, compactions, schema
  deletions, delayed-delivery buckets), each cycle on fresh namespaces, retried when a restart cut it short;
- the phases, each ``--phase-s`` long after its move: the baseline; broker1 to 5.0; broker2 to 5.0, with broker1
  killed with SIGKILL mid-way and started again; bookie1 to 5.0's BookKeeper; bookie2 likewise; broker1 rolled
  back to 4.0.8 (Pulsar's 5.0 upgrade guide asks for a rehearsed rollback of this kind: docs/operations.md).

At the end the load stops, the queue drains, and these must hold: every message ``pulsar-perf`` reports as
published was consumed (its own counts); every ledger a topic still lists (data, cursor, schema, compacted) is in
BookKeeper's metadata; every ledger the churn dropped that the metadata store had named was queued by a broker, or
is named in an extension's log as an empty ledger it let go while the queue was unreachable (Pulsar deletes those
itself), or belonged to a topic a broker's log says it deleted while no broker had it loaded (Pulsar's factory
deletes those ledgers itself, outside the extension; the topic's compacted ledger it forgets, for scan to find);
``scan --dry-run`` over the cluster finds no orphan the run does not explain, and none once it queued them and the
queue drained again; the worker
decoded the pending deletions of both lines' brokers (``ledger_deletion_decoded_total`` by writer, against a
never-acknowledged audit subscription on the queue counted by the payload's ``pulsar_version``); the worker never
exited, dead-lettered nothing but ledgers it held in use that a topic still lists, and logged no error it did not
recover from.

Printed: one row per phase (the versions running, ledgers the churn dropped, pending deletions queued and by
which line, ledgers the worker deleted, orphans ``scan`` saw at the phase's end, publish p99 of its worst 10 s
window), the end checks, and a JSON summary as the last line; both are kept under ``bench/results/``.

    python -m tools.upgrade_run [--phase-s 90] [--rate 40] [--keep]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
import uuid
from collections import Counter
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import aiohttp
import pulsar

from testkit.admin import StagingAdmin
from testkit.harness import WorkerHarness, quiet_logger
from testkit.stack import PROFILES, REPO, Profile, Stack, key_values, pulsar_line, stack_of
from tools.leak_demo import DEMO_BROKER_CONF, PATHS, DropPath, Round, acknowledge_until
from worker.backends.stores import Stores
from worker.formats.message import InvalidMessage, decode
from worker.formats.topic_name import TopicName

OLD = pulsar_line("4.0").version
NEW = pulsar_line("5.0").version
INSTANCE = Profile("upgrade-cluster", prefix="LDW_UPGRADE_")
PENDING = "persistent://pulsar/system/__ledger_deletion"
AUDIT = "upgrade-audit"  # a subscription on the queue nobody acknowledges: what was queued, read at the end
PERF_NAMESPACE = "public/upgrade"
PERF_TOPIC = f"persistent://{PERF_NAMESPACE}/perf"
PERF_PARTITIONS = 4
CHURN = PATHS  # every drop path the crash matrix knows
RESULTS = REPO / "bench" / "results"


@dataclass
class Phase:
    name: str
    started: float
    ended: float = 0.0
    versions: str = ""
    dropped: set[int] = field(default_factory=set)
    # What the metadata store itself named for the churn's topics once staged (the churn's listing is the broker's
    # memory, which may hold a ledger a stopping broker never wrote down).
    recorded: dict[int, str] = field(default_factory=dict)
    deleted: float = 0.0  # the worker's deletes so far
    settled: float = 0.0  # and the ledgers it found gone already (the broker deleted them itself)
    orphans: int = 0
    churn_cycles: int = 0
    churn_failures: int = 0


# The preparation: the profile's own broker.conf lines, each broker's `internal` listener (binary and HTTP), which a
# 5.0 broker looks topics up by (docs/operations.md). Then the churn's drop paths' lines (bucket delayed delivery,
# no offload deletion lag).
LISTENERS = key_values(PROFILES / "upgrade-cluster.env").get("BROKER_CONF", "")
broker_conf = f"{LISTENERS} {DEMO_BROKER_CONF}"


def stack_sh(*args: str, timeout: float = 900) -> str:
    r = INSTANCE.run(*args, timeout=timeout, BROKER_CONF=broker_conf)
    if r.returncode != 0:
        raise SystemExit(f"stack.sh {' '.join(args)} failed:\n{r.stderr[-4000:]}")
    return r.stderr


def versions() -> str:
    return INSTANCE.addresses()["NODE_VERSIONS"].replace("zookeeper:", "zk:")


# --- pulsar-perf --------------------------------------------------------------------------------------------------

_STAMP = re.compile(r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)")
_P99 = re.compile(r"99pct:\s*([\d.]+)")
_SENT = re.compile(r"Aggregated throughput stats --- (\d+) records sent")
_RECEIVED = re.compile(r"Aggregated throughput stats --- (\d+) records received")


def perf_windows(log: str) -> list[tuple[float, float]]:
    """(epoch seconds, publish p99 ms) of each periodic line of ``pulsar-perf produce``."""
    out = []
    for line in log.splitlines():
        if "Throughput produced" not in line:
            continue
        stamp, p99 = _STAMP.search(line), _P99.search(line)
        if stamp and p99:
            at = datetime.strptime(stamp.group(1), "%Y-%m-%dT%H:%M:%S").replace(tzinfo=UTC).timestamp()
            out.append((at, float(p99.group(1))))
    return out


def perf_total(log: str, pattern: re.Pattern[str]) -> int | None:
    found = pattern.findall(log)
    return int(found[-1]) if found else None


class Perf:
    """``pulsar-perf consume`` then ``produce`` on the run's topic, stopped with SIGINT (their own totals)."""

    def __init__(self, stack: Stack, workdir: Path, rate: int) -> None:
        self.bin = Path(INSTANCE.addresses()["PULSAR_HOME"]) / "bin" / "pulsar-perf"
        self.url = stack.service_url
        self.workdir = workdir
        self.rate = rate
        self.procs: dict[str, subprocess.Popen[bytes]] = {}

    def log(self, role: str) -> str:
        return (self.workdir / f"perf-{role}.log").read_text(errors="replace")

    def _start(self, role: str, *args: str) -> None:
        out = open(self.workdir / f"perf-{role}.log", "wb")
        self.procs[role] = subprocess.Popen(
            [str(self.bin), role, "-u", self.url, *args, PERF_TOPIC],
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            env={"PULSAR_MEM": "-Xms64m -Xmx256m", "PATH": "/usr/bin:/bin"},
        )

    def start(self) -> None:
        self._start("consume", "-ss", "perf", "-st", "Failover", "-sp", "Earliest")
        time.sleep(8)
        self._start("produce", "-r", str(self.rate), "-s", "1024", "-time", "0")

    def stop(self, role: str) -> None:
        p = self.procs[role]
        if p.poll() is None:
            p.send_signal(signal.SIGINT)
            try:
                p.wait(timeout=60)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()

    def kill(self) -> None:
        """Whatever still runs, gone (a run that failed midway must not leave a load generator behind)."""
        for p in self.procs.values():
            if p.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(p.pid, signal.SIGKILL)
                p.wait()

    def alive(self) -> dict[str, bool]:
        return {role: p.poll() is None for role, p in self.procs.items()}


# --- the churn ----------------------------------------------------------------------------------------------------


class OwnerAdmin(StagingAdmin):
    """Staging and read-out calls that ask the topic's owner, as Pulsar's admin client does: a cluster's topics live
    on either broker."""

    async def _call(self, method: str, path: str, **kw: Any) -> Any:
        kw["follow_redirect"] = True
        return await super()._call(method, path, **kw)


def admin_urls() -> list[str]:
    env = INSTANCE.addresses()
    return [env["PULSAR_ADMIN_URL"], env["PULSAR_ADMIN_URL_2"]]


def live_admin_url() -> str:
    """The first broker that answers its health check (one may be restarting): what a load balancer would pick."""
    for url in admin_urls():
        with contextlib.suppress(OSError):
            with urllib.request.urlopen(f"{url}/admin/v2/brokers/health", timeout=5) as r:
                if r.status == 200:
                    return url
    raise RuntimeError("no broker answers its health check")


@contextlib.asynccontextmanager
async def owner_admin(stack: Stack) -> AsyncIterator[tuple[Stack, OwnerAdmin]]:
    """``stack`` aimed at a live broker, and an :class:`OwnerAdmin` on it."""
    live = dataclasses.replace(stack, admin_url=await asyncio.to_thread(live_admin_url))
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=120)) as session:
        yield live, OwnerAdmin(live.admin_url, session)


class Churn:
    """Drop paths fired one cycle after another on fresh namespaces; what each cycle dropped, by phase."""

    def __init__(self, stack: Stack, phases: list[Phase]) -> None:
        self.stack = stack
        self.phases = phases
        self.stopping = asyncio.Event()
        self.cycle = 0
        self.namespaces: list[str] = []

    async def run(self) -> None:
        while not self.stopping.is_set():
            self.cycle += 1
            try:
                dropped, recorded = await asyncio.wait_for(self.one_cycle(), timeout=180)
                # The phase a cycle ends in: its drops fire last, and a slow cycle may span a whole phase.
                phase = self.phases[-1]
                phase.churn_cycles += 1
                phase.dropped |= dropped
                phase.recorded.update(recorded)
            except Exception as e:  # a broker restarted under it: counted, and the next cycle starts afresh
                self.phases[-1].churn_failures += 1
                print(f"  churn cycle {self.cycle}: {type(e).__name__}: {str(e)[:200]}", flush=True)
                await asyncio.sleep(3)

    async def one_cycle(self) -> tuple[set[int], dict[int, str]]:
        tag = f"{self.cycle}-{uuid.uuid4().hex[:4]}"
        paths = [DropPath(name, f"public/upg-{name[:8]}-{tag}", []) for name in CHURN]
        for p in paths:
            p.topics = [TopicName.parse(f"persistent://{p.namespace}/t{i}") for i in range(2)]
            self.namespaces.append(p.namespace)
        async with owner_admin(self.stack) as (live, admin):
            rnd = Round(live, admin, admin.session, paths)
            await asyncio.gather(*(rnd.stage(p) for p in paths))
            recorded = await metadata_named(self.stack, [t for p in paths for t in p.topics])
            cursor = [p for p in paths if p.name == "cursor-switch"]
            ops: list[Any] = [
                asyncio.to_thread(acknowledge_until, live, [str(t) for t in p.topics], p.stop) for p in cursor
            ]
            ops += [op for p in paths if p not in cursor for op in rnd.fire(p)]
            running = [asyncio.ensure_future(op) for op in ops]
            await asyncio.sleep(3)
            for p in cursor:
                p.stop.set()
            await asyncio.gather(*running, return_exceptions=True)
            await asyncio.gather(*(rnd.again(p) for p in paths), return_exceptions=True)
        return {i for p in paths for i in p.known}, recorded


# --- what the metadata and the queue say --------------------------------------------------------------------------


def named_by(st: Any) -> set[int]:
    """Every ledger a stored topic's metadata names that BookKeeper must hold: data ledgers (but offloaded copies the
    broker released), cursor ledgers, the compacted ledger and delayed-delivery buckets a cursor names, schema
    ledgers."""
    out: set[int] = set()
    for ld in st.managed_ledger.ledgers:
        if not (ld.offload is not None and ld.offload.bookkeeper_deleted):
            out.add(ld.ledger_id)
    for c in st.cursors.values():
        if c.cursors_ledger_id >= 0:
            out.add(c.cursors_ledger_id)
        named = {**c.cursor_properties, **{k: str(v) for k, v in c.position_properties.items()}}
        for k, v in named.items():
            if k == "CompactedTopicLedger" or k.startswith("#pulsar.internal.delayed.bucket"):
                with contextlib.suppress(ValueError):
                    out.add(int(v))
    out.update(st.schema_ledgers)
    return out


async def listed_ledgers(stack: Stack) -> dict[int, str]:
    """Every ledger Pulsar's metadata names now, and its topic, read from the metadata store itself (an admin call
    would load every topic)."""
    out: dict[int, str] = {}
    async with Stores(f"zk:{stack.zookeeper_hosts}") as stores:
        async for ns in stores.pulsar.namespaces():
            for topic in await stores.pulsar.persistent_topics(ns):
                st = await stores.pulsar.stored_topic(topic)
                if st is not None:
                    out.update(dict.fromkeys(named_by(st), str(topic)))
    return out


async def metadata_named(stack: Stack, topics: list[TopicName]) -> dict[int, str]:
    """What the metadata store names for ``topics`` now, and whose."""
    out: dict[int, str] = {}
    async with Stores(f"zk:{stack.zookeeper_hosts}") as stores:
        for topic in topics:
            st = await stores.pulsar.stored_topic(topic)
            if st is not None:
                out.update(dict.fromkeys(named_by(st), str(topic)))
    return out


async def in_bookkeeper(stack: Stack, ledger_ids: list[int]) -> set[int]:
    async with Stores(f"zk:{stack.zookeeper_hosts}") as stores:
        return {i for i in ledger_ids if await stores.bookkeeper.ledger_metadata_exists(i)}


_UNQUEUED = re.compile(r"empty ones the broker deletes itself, unqueued: \[([^\]]*)\]")
_LEDGER_OF = re.compile(r"LEDGER:(\d+) of ")


def broker_logs(stack_dir: Path) -> dict[str, str]:
    """Every broker's whole output, all its starts (stack.sh keeps them)."""
    return {
        name: (stack_dir / "logs" / f"{name}.out").read_text(errors="replace")
        for name in ("broker1", "broker2")
        if (stack_dir / "logs" / f"{name}.out").exists()
    }


def let_go_unqueued(logs: dict[str, str]) -> set[int]:
    """The empty ledgers an extension let go unqueued (a rollover that could not queue its drops), from its logs."""
    return {int(i) for text in logs.values() for m in _UNQUEUED.finditer(text) for i in _LEDGER_OF.findall(m[1])}


# Pulsar's delete of a topic no broker has loaded (BrokerService.deleteTopic): the managed-ledger factory deletes the
# ledgers, then the metadata, through the store the extension does not wrap. 4.0's line, then 5.0's.
_DELETED_UNLOADED = re.compile(
    r"Topic (\S+) is not loaded, try to delete from metadata|Topic is not loaded, try to delete from metadata"
    r" \{[^}]*?topic=([^,}\s]+)"
)


def deleted_unloaded(logs: dict[str, str]) -> set[str]:
    """The topics a broker deleted while no broker had them loaded, from its logs."""
    return {m[1] or m[2] for text in logs.values() for m in _DELETED_UNLOADED.finditer(text)}


def log_lines_naming(logs: dict[str, str], ledger_id: int, most: int = 6) -> list[str]:
    word = re.compile(rf"(?<![\d.]){ledger_id}(?![\d.])")
    out = []
    for name, text in logs.items():
        for line in text.splitlines():
            if word.search(line):
                out.append(f"{name}: {line[:400]}")
                if len(out) >= most:
                    return out
    return out


async def missing_in_bookkeeper(stack: Stack, listed: dict[int, str]) -> list[tuple[int, str]]:
    """The ledgers of ``listed`` BookKeeper no longer has that their topic still names once that is known. Reading
    some 16,000 ledgers takes a while, and a broker goes on switching cursor ledgers and trimming meanwhile: a ledger
    its topic stopped naming after ``listed`` was read was dropped, not lost. BookKeeper first, the metadata after."""
    present = await in_bookkeeper(stack, sorted(listed))
    gone = [(i, t) for i, t in sorted(listed.items()) if i not in present]
    still = await metadata_named(stack, [TopicName.parse(t) for t in {t for _, t in gone}])
    return [(i, t) for i, t in gone if still.get(i) == t]


def scan(config: Path, *, queue: bool = False) -> list[dict[str, Any]]:
    """``scan --dry-run`` over the cluster: its orphans; ``queue``: ``scan`` itself, which queues them."""
    args = [sys.executable, "-m", "worker.cli", "scan", "--json", "--min-age", "0s", "--config", str(config)]
    if not queue:
        args.insert(4, "--dry-run")
    r = subprocess.run(args, capture_output=True, text=True, timeout=900, cwd=REPO)
    if r.returncode != 0:
        raise RuntimeError(f"scan failed (exit {r.returncode}):\n{r.stderr[-3000:]}")
    return list(json.loads(r.stdout.strip().splitlines()[-1])["orphans"])


async def drained(h: WorkerHarness, config: Path, deadline_s: float) -> list[dict[str, Any]]:
    """Until the worker's queue is empty and a dry-run scan finds no orphan, or ``deadline_s`` passes: the orphans."""
    deadline = time.monotonic() + deadline_s
    orphans: list[dict[str, Any]] = []
    while time.monotonic() < deadline:
        await asyncio.sleep(20)
        backlog = h.metric("ledger_deletion_topic_backlog", role="pending") + h.metric(
            "ledger_deletion_topic_backlog", role="retry"
        )
        if backlog:
            print(f"  draining: queue backlog {backlog:.0f}", flush=True)
            continue
        orphans = await asyncio.to_thread(scan, config)
        print(f"  drained: {len(orphans)} orphans on the scan", flush=True)
        if not orphans:
            break
        await asyncio.sleep(20)  # what was queued last may still be on its way (the send delay)
        if not h.metric("ledger_deletion_topic_backlog", role="pending"):
            break
    return orphans


def audit_read(stack: Stack) -> list[tuple[int, str, int]]:
    """(ledger id, writer's pulsar_version, publish ms) of every pending deletion queued since the start."""
    client = pulsar.Client(stack.service_url, logger=quiet_logger())
    out = []
    try:
        consumer = client.subscribe(PENDING, AUDIT, consumer_type=pulsar.ConsumerType.Shared)
        while True:
            try:
                msg = consumer.receive(timeout_millis=5000)
            except pulsar.Timeout:
                break
            try:
                info = decode(msg.data())
            except InvalidMessage:
                out.append((-1, "undecodable", msg.publish_timestamp()))
                continue
            # Brokers write their Pulsar version; what scan queued says so instead.
            writer = info.properties.get("pulsar_version") or info.properties.get("source") or "unknown"
            out.append((info.ledger_id, str(writer), msg.publish_timestamp()))
        consumer.close()
    finally:
        client.close()
    return out


def audit_subscribe(stack: Stack) -> None:
    client = pulsar.Client(stack.service_url, logger=quiet_logger())
    try:
        client.subscribe(
            PENDING, AUDIT, consumer_type=pulsar.ConsumerType.Shared, initial_position=pulsar.InitialPosition.Earliest
        ).close()
    finally:
        client.close()


def decoded_by_writer(h: WorkerHarness) -> dict[str, float]:
    out: Counter[str] = Counter()
    for (n, lbls), v in h.metrics().items():
        if n == "ledger_deletion_decoded_total" and dict(lbls).get("source") == "broker-extension":
            out[dict(lbls).get("writer", "unknown")] += int(v)
    return dict(out)


# --- the run ------------------------------------------------------------------------------------------------------


async def run(args: argparse.Namespace) -> int:
    workdir = Path(tempfile.mkdtemp(prefix="upgrade-run-"))
    stack_dir = Path(INSTANCE.addresses()["STACK_DIR"])
    print(
        f"upgrade run: {OLD} -> {NEW} and back, phases of {args.phase_s} s, pulsar-perf at {args.rate} msg/s,"
        f" brokers {'without' if args.unprepared else 'with'} their internal listener; work files in {workdir}",
        flush=True,
    )
    t_run = time.monotonic()
    stack_sh("down")
    shutil.rmtree(stack_dir, ignore_errors=True)  # a fresh cluster, every process on the old line
    stack_sh("up")
    stack = stack_of(INSTANCE.addresses())
    queue = {"pending": PENDING, "retry": f"{PENDING}-RETRY", "dlq": f"{PENDING}-DLQ", "parallelism": 4}
    h = WorkerHarness(
        stack,
        workdir,
        "upgrade",
        topics=queue,
        worker={"min_ledger_age_s": 2, "in_use_retry_s": 2, "max_attempts": 200, "backoff_max_s": 5},
        logging={"level": "INFO", "format": "json"},
    )
    h.start(timeout=120)
    audit_subscribe(stack)
    async with owner_admin(stack) as (_, admin):
        await admin.ensure_namespace(PERF_NAMESPACE)
        await admin.create_partitioned_topic(TopicName.parse(PERF_TOPIC), PERF_PARTITIONS)
    perf = Perf(stack, workdir, args.rate)
    perf.start()
    try:
        phases: list[Phase] = []
        churn = Churn(stack, phases)
        worker_exits: list[int] = []

        async def end_phase() -> None:
            p = phases[-1]
            await asyncio.sleep(args.phase_s)
            p.ended = time.time()
            p.deleted = h.metric("ledger_deletion_deleted_total", result="deleted")
            p.settled = h.metric("ledger_deletion_deleted_total")
            orphans = await asyncio.to_thread(scan, h.config_path)
            p.orphans = len(orphans)
            print(
                f"  phase {p.name!r} ends: {len(p.dropped)} dropped by the churn, {p.orphans} orphans on the scan,"
                f" worker deleted {p.deleted:.0f} so far; perf {perf.alive()}",
                flush=True,
            )
            if h.proc is not None and h.proc.poll() is not None:
                worker_exits.append(h.proc.returncode)

        def begin(name: str) -> None:
            phases.append(Phase(name, time.time(), versions=versions()))
            print(f"phase {name!r}: {phases[-1].versions}", flush=True)

        begin(f"baseline, all on {OLD}")
        churn_task = asyncio.ensure_future(churn.run())
        await end_phase()

        begin(f"broker1 to {NEW}")
        await asyncio.to_thread(stack_sh, "restart", "broker1", NEW)
        phases[-1].versions = versions()
        await end_phase()

        begin(f"broker2 to {NEW}, broker1 killed with SIGKILL mid-way")
        await asyncio.to_thread(stack_sh, "restart", "broker2", NEW)
        await asyncio.sleep(min(20, args.phase_s / 3))
        await asyncio.to_thread(stack_sh, "kill9", "broker1")
        await asyncio.sleep(15)
        await asyncio.to_thread(stack_sh, "start", "broker1")
        phases[-1].versions = versions()
        await end_phase()

        for bookie in ("bookie1", "bookie2"):
            begin(f"{bookie} to {NEW}'s BookKeeper")
            await asyncio.to_thread(stack_sh, "restart", bookie, NEW)
            phases[-1].versions = versions()
            await end_phase()

        begin(f"broker1 rolled back to {OLD}")
        await asyncio.to_thread(stack_sh, "restart", "broker1", OLD)
        phases[-1].versions = versions()
        await end_phase()

        # The end: the load stops, the consumer catches up, the queue drains.
        begin("drain")
        churn.stopping.set()
        await asyncio.wait_for(churn_task, timeout=600)
        perf.stop("produce")
        sent = perf_total(perf.log("produce"), _SENT)
        await asyncio.sleep(30)  # the consumer reads the rest of the backlog
        async with owner_admin(stack) as (_, admin):
            for _ in range(60):
                st = await admin.partitioned_stats(TopicName.parse(PERF_TOPIC))
                backlog = sum(int(s.get("msgBacklog", 0)) for s in (st.get("subscriptions") or {}).values())
                if backlog == 0:
                    break
                await asyncio.sleep(5)
        perf.stop("consume")
        received = perf_total(perf.log("consume"), _RECEIVED)

        orphans = await drained(h, h.config_path, args.drain_s)
        # What is left was never queued by a broker: a ledger no metadata ever recorded (a broker killed between
        # creating a ledger and listing it, a lost race). Such is scan's to find: queued by it, then drained.
        after_drain = [{k: o.get(k) for k in ("ledger_id", "topic", "component", "why")} for o in orphans]
        if orphans:
            await asyncio.to_thread(scan, h.config_path, queue=True)
            orphans = await drained(h, h.config_path, args.drain_s)
        phases[-1].ended = time.time()
        phases[-1].deleted = h.metric("ledger_deletion_deleted_total", result="deleted")
        phases[-1].settled = h.metric("ledger_deletion_deleted_total")
        phases[-1].orphans = len(orphans)
        phases[-1].versions = versions()

        queued = audit_read(stack)
        decoded = decoded_by_writer(h)
        dlq = h.metric("ledger_deletion_dlq_total")
        listed = await listed_ledgers(stack)
        missing = await missing_in_bookkeeper(stack, listed)
        worker_alive = h.proc is not None and h.proc.poll() is None
        events = h.log_events()
        errors = [e for e in events if e.get("level") in ("error", "critical")]
        # A dead letter the worker held in use until its attempts ran out, its ledger still listed at the end: a
        # drop the broker queued that did not happen (a compaction that failed after marking its compacted ledger;
        # Pulsar compacts again later). Kept, never deleted: the nightly replay decides it again.
        dead = [e for e in events if "dead-letter" in str(e.get("event"))]
        held = sorted(
            int(e["ledger_id"]) for e in dead if e.get("reason") == "in_use" and int(e.get("ledger_id", -1)) in listed
        )

        # Per phase: queued by publish time and writer; the worker's deletes as deltas; p99 of the worst window.
        windows = perf_windows(perf.log("produce"))
        rows = []
        before = (0.0, 0.0)
        for p in phases:
            q = [w for (_, w, ms) in queued if p.started <= ms / 1000 < (p.ended or time.time())]
            p99s = [v for (at, v) in windows if p.started <= at < (p.ended or time.time())]
            rows.append(
                {
                    "phase": p.name,
                    "versions": p.versions,
                    "seconds": round((p.ended or time.time()) - p.started),
                    "dropped_by_churn": len(p.dropped - set(listed)),
                    "queued": len(q),
                    "queued_by_writer": dict(Counter(q)),
                    "deleted": int(p.deleted - before[0]),
                    "settled": int(p.settled - before[1]),
                    "orphans_at_end": p.orphans,
                    "publish_p99_worst_10s_ms": max(p99s) if p99s else None,
                    "churn_cycles": p.churn_cycles,
                    "churn_cycles_cut_short": p.churn_failures,
                }
            )
            before = (p.deleted, p.settled)
        # Staged by the churn and no longer named by any metadata at the end: what its drop paths dropped.
        dropped_all = set().union(*(p.dropped for p in phases)) - set(listed)
        queued_ids = {i for (i, w, _) in queued if w not in ("scanner", "unknown")}  # by the brokers
        by_writer = dict(Counter(w for (_, w, _) in queued))
        # A dropped ledger no broker queued is explained only by evidence: the metadata store never named it (the
        # broker's memory did: stock Pulsar's leak, scan's to find), or an extension's log names it among the empty
        # ledgers it let go (Pulsar deletes those itself). Anything else is a drop the extension missed.
        recorded_all = {i: t for p in phases for i, t in p.recorded.items()}
        logs = broker_logs(stack_dir)
        let_go = let_go_unqueued(logs)
        not_queued = sorted(dropped_all - queued_ids)
        still_there = await in_bookkeeper(stack, not_queued)
        # Or its topic was deleted while no broker had it loaded: Pulsar's managed-ledger factory deleted the ledgers
        # before the metadata, through the store the extension does not wrap (stock's order: a failed delete leaves
        # them listed). That delete forgets the topic's compacted ledger, a stock leak only scan finds.
        unloaded = deleted_unloaded(logs)
        of_unloaded = {i for i, t in recorded_all.items() if t in unloaded} - let_go
        with_unloaded_topic = [i for i in not_queued if i in of_unloaded]
        unexplained = [i for i in not_queued if i in recorded_all and i not in let_go and i not in of_unloaded]
        # An orphan after the drain is the run's failure if a broker had listed it, unless the extension let it go
        # (an empty ledger Pulsar did not delete after all) or its topic was deleted unloaded (above): stock's leaks,
        # scan's to find. Or if a broker queued it: the worker should have settled it.
        leftover = {int(str(o["ledger_id"])) for o in after_drain}
        checks: dict[str, Any] = {
            "brokers_internal_listener": not args.unprepared,
            "perf_sent": sent,
            "perf_received": received,
            "perf_every_published_message_consumed": bool(sent and received is not None and received >= sent),
            "listed_ledgers_checked": len(listed),
            "listed_ledgers_missing_in_bookkeeper": [(i, t, i in queued_ids) for i, t in missing[:40]],
            "orphans_after_the_drain": after_drain[:60],
            "orphans_after_the_drain_that_a_broker_had_listed_or_queued": sorted(
                leftover & (((dropped_all & recorded_all.keys()) - let_go - of_unloaded) | queued_ids)
            ),
            "orphans_after_the_drain_empty_and_let_go_by_the_extension": sorted(leftover & let_go - queued_ids),
            "orphans_after_the_drain_of_topics_deleted_unloaded": sorted(leftover & of_unloaded - queued_ids),
            "orphans_after_scan_queued_them_and_the_worker_drained": [
                {k: o.get(k) for k in ("ledger_id", "topic", "why")} for o in orphans[:50]
            ],
            "churn_dropped": len(dropped_all),
            "churn_dropped_not_queued": not_queued[:50],
            "churn_dropped_not_queued_never_in_the_metadata_store": [i for i in not_queued if i not in recorded_all],
            "churn_dropped_not_queued_empty_and_let_go_by_the_extension": [i for i in not_queued if i in let_go],
            "churn_dropped_not_queued_deleted_by_the_broker_with_their_unloaded_topic": with_unloaded_topic,
            "churn_dropped_not_queued_unexplained": unexplained,
            "churn_dropped_not_queued_still_in_bookkeeper_at_the_end": sorted(still_there),
            "churn_dropped_not_queued_broker_log_lines": {i: log_lines_naming(logs, i) for i in not_queued[:20]},
            "queued_by_writer": by_writer,
            "decoded_by_writer": decoded,
            "worker_dead_letters": dlq,
            "dead_letters_held_in_use_and_still_listed": held,
            "worker_exits": worker_exits,
            "worker_alive_at_end": worker_alive,
            "worker_errors_logged": len(errors),
            "worker_error_events": sorted({str(e.get("event")) for e in errors})[:20],
            "run_seconds": round(time.monotonic() - t_run),
        }
        ok = bool(
            checks["perf_every_published_message_consumed"]
            and not missing
            and not orphans
            and not checks["orphans_after_the_drain_that_a_broker_had_listed_or_queued"]
            and not unexplained
            and all(decoded.get(v, 0) >= 1 for v in (OLD, NEW))
            and all(decoded.get(w, 0) >= n for w, n in by_writer.items() if w not in ("scanner", "unknown"))
            and dlq == len(held)
            and not worker_exits
            and worker_alive
        )
        text = render(rows, checks, ok)
        print(text, flush=True)
        stamp = datetime.now(UTC).strftime("%Y-%m-%dT%H%M%S")
        RESULTS.mkdir(parents=True, exist_ok=True)
        (RESULTS / f"{stamp}-upgrade.txt").write_text(text + "\n")
        summary = {
            "rows": rows,
            "checks": checks,
            "ok": ok,
            "old": OLD,
            "new": NEW,
            "phase_s": args.phase_s,
            "rate": args.rate,
        }
        (RESULTS / f"{stamp}-upgrade.json").write_text(json.dumps(summary, indent=1, sort_keys=True, default=str))
        print(json.dumps(summary, sort_keys=True, default=str))
        return 0 if ok else 1
    finally:
        perf.kill()
        h.close()
        if not args.keep:
            stack_sh("down")


def render(rows: list[dict[str, Any]], checks: dict[str, Any], ok: bool) -> str:
    head = (
        f"{'phase':<44} {'dropped':>7} {'queued':>6} {'by writer':<26} {'settled':>7} {'deleted':>7} {'orphans':>7}"
        f" {'p99 ms':>7}"
    )
    lines = [head, "-" * len(head)]
    for r in rows:
        writers = " ".join(f"{w}:{n}" for w, n in sorted(r["queued_by_writer"].items()))
        p99 = r["publish_p99_worst_10s_ms"]
        lines.append(
            f"{r['phase'][:44]:<44} {r['dropped_by_churn']:>7} {r['queued']:>6} {writers[:26]:<26} {r['settled']:>7}"
            f" {r['deleted']:>7}"
            f" {r['orphans_at_end']:>7} {p99 if p99 is not None else '-':>7}"
        )
        lines.append(
            f"    {r['versions']}  ({r['seconds']} s; churn cycles {r['churn_cycles']},"
            f" cut short by a restart {r['churn_cycles_cut_short']})"
        )
    lines.append("")
    lines.append("dropped: ledgers the churn's drop paths staged and dropped (its own listing); queued: pending")
    lines.append("deletions published in the phase (the audit subscription), by the writer's pulsar_version;")
    lines.append("settled: pending deletions the worker settled in the phase (deleted, or found gone: a broker")
    lines.append("deletes what it drops itself outside defer mode), deleted: of them deleted by the worker;")
    lines.append("orphans: scan --dry-run at the phase's end (queued ones not yet settled included); p99:")
    lines.append("pulsar-perf's publish p99, its worst 10 s window.")
    lines.append("")
    for k, v in checks.items():
        lines.append(f"{k}: {v}")
    lines.append(f"\nresult: {'every check holds' if ok else 'FAILED'}")
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--phase-s", type=float, default=90, help="how long each phase runs after its move")
    ap.add_argument("--rate", type=int, default=40, help="pulsar-perf produce's rate, msg/s")
    ap.add_argument("--drain-s", type=float, default=600, help="how long the queue may take to drain at the end")
    ap.add_argument("--keep", action="store_true", help="leave the cluster up at the end")
    ap.add_argument(
        "--unprepared",
        action="store_true",
        help="brokers without their `internal` listener: what skipping the preparation does (5.0 brokers refuse"
        " lookups of 4.0 brokers' topics; the run fails)",
    )
    args = ap.parse_args()
    if args.unprepared:
        global broker_conf
        broker_conf = DEMO_BROKER_CONF
    with contextlib.suppress(KeyboardInterrupt):
        return asyncio.run(run(args))
    return 130


if __name__ == "__main__":
    raise SystemExit(main())
