"""The crash matrix (``make leak-demo``): every drop path, the broker killed with SIGKILL at several points around
its metadata writes, stock brokers against brokers with the extension (and in defer mode).

Each round, on a standalone stack instance of its own (broker, bookie and ZooKeeper in one JVM; ports and data
apart from the shared stacks), one namespace per drop path is staged with ``--topics`` topics, then every path's
drop operations are fired (at once, or spread evenly over ``--spread-ms``), and the JVM is killed with SIGKILL
``delay`` ms after the first of them; the kill points span the time the drops take on the machine, from before any
metadata write to after the last (each row says how many of the path's drops had answered before the kill):

    trim                 retention cut to 0, then a trim of each topic (the trim's ledger-list write, then deletes)
    rollover-cleanup     topics unloaded with an empty current ledger, then loaded: the load's write drops it
    cursor-switch        a consumer acknowledging one by one: its cursor ledger switches every 5 positions
    unsubscribe          each topic's subscription (with its cursor ledger) deleted
    topic-deletion       each topic (ledgers, a subscription with its cursor ledger, a compacted ledger) deleted
    namespace-deletion   the whole namespace deleted
    offload              ledgers offloaded (deletion lag 0), then a trim: the BookKeeper copies are released
    compaction           a second compaction of each keyed topic: the first compacted ledger is replaced
    schema-deletion      each topic's schema (two versions, two ledgers) deleted with force
    delayed-buckets      a subscription holding sealed delayed-delivery buckets deleted while delayed delivery is off

Then: restart; ``scan --dry-run`` over the round's namespaces counts the orphans before any worker runs (each
classified: a ledger the metadata named when the round was staged, which a drop path forgot, or one created during
the round that no metadata ever listed, such as a compaction's output or a new ledger whose write never happened);
what the broker or an operator does next is done again (trims, compaction, the deletions retried); a worker drains
the queue (extension modes); ``scan --dry-run`` counts again. Printed: one table, one row per path and mode, each
kill point as ``before/on the queue/after the drain`` for the dropped ledgers, and a JSON summary as the last line.

    python -m tools.leak_demo [--modes stock,extension,defer] [--delays-ms 250,500,1000,2000,4000] [--spread-ms 0]
                              [--topics 12] [--paths trim,...] [--json-out FILE]

The stack instance's ports, directory and heap come from ``LDW_DEMO_<VAR>`` (defaults in ``DEMO``).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

import aiohttp
import pulsar
import yaml

from testkit.admin import StagingAdmin
from testkit.harness import WorkerHarness, quiet_logger
from testkit.stack import REPO, Profile, Stack, admin_for, stack_of
from testkit.topics import eventually, ml_ledger_ids, produce
from worker.formats.message import InvalidMessage, decode
from worker.formats.topic_name import TopicName

PENDING = "persistent://pulsar/system/__ledger_deletion"
ENTRIES_PER_LEDGER = 5  # config/standalone.conf: managedLedgerMaxEntriesPerLedger
SUBSCRIPTION = "s"

DEMO = {
    "STACK_DIR": str(REPO / "deploy" / "local" / ".data-leak-demo"),
    "WEB_PORT": "28080",
    "BROKER_PORT": "26650",
    "BOOKIE_PORT": "23181",
    "BOOKIE_HTTP_PORT": "28000",
    "ZK_PORT": "22181",
    "S3_PORT": "25000",
    "BROKER_EXTENSION_SEND_DELAY_S": "1",
    "PULSAR_MEM": "-Xms256m -Xmx768m -XX:MaxDirectMemorySize=512m",
}
# Every broker of the demo, stock or not: a cursor persists every acknowledgement (its ledger then switches every 5
# positions, the stack's managedLedgerCursorMaxEntriesPerLedger), an offloaded ledger's BookKeeper copy is released
# by the next trim, and the bucket delayed-delivery tracker seals a bucket (a snapshot ledger) every 5 messages.
DEMO_BROKER_CONF = (
    "managedLedgerDefaultMarkDeleteRateLimit=0 managedLedgerOffloadDeletionLagMs=0"
    " delayedDeliveryTrackerFactoryClassName=org.apache.pulsar.broker.delayed.BucketDelayedDeliveryTrackerFactory"
    " delayedDeliveryMinIndexCountPerBucket=5"
)
MODES = ("stock", "extension", "defer")
PATHS = (
    "trim",
    "rollover-cleanup",
    "cursor-switch",
    "unsubscribe",
    "topic-deletion",
    "namespace-deletion",
    "offload",
    "compaction",
    "schema-deletion",
    "delayed-buckets",
)
AVRO_V1 = json.dumps({"type": "record", "name": "Event", "fields": [{"name": "name", "type": "string"}]})
AVRO_V2 = json.dumps(
    {
        "type": "record",
        "name": "Event",
        "fields": [{"name": "name", "type": "string"}, {"name": "extra", "type": ["null", "string"], "default": None}],
    }
)


# The demo's own instance: LDW_DEMO_<VAR> sets its <VAR>.
INSTANCE = Profile("standalone", DEMO, prefix="LDW_DEMO_")


def mode_conf(mode: str) -> dict[str, str]:
    """What sets a mode apart: stock brokers, the extension, or the extension in defer mode."""
    return {
        "BROKER_EXTENSION": "0" if mode == "stock" else "1",
        "BROKER_EXTENSION_DEFER": "1" if mode == "defer" else "0",
        "BROKER_CONF": f"{DEMO_BROKER_CONF} {os.environ.get('BROKER_CONF', '')}".strip(),
    }


def env_for(mode: str) -> dict[str, str]:
    return INSTANCE.environ(**mode_conf(mode))


def stack_sh(mode: str, *args: str) -> str:
    r = INSTANCE.run(*args, timeout=900, **mode_conf(mode))
    if r.returncode != 0:
        raise SystemExit(f"stack.sh {' '.join(args)} failed:\n{r.stderr[-3000:]}")
    return r.stdout


def stack_for(mode: str) -> Stack:
    return stack_of(INSTANCE.addresses())


def kill9_broker(mode: str) -> None:
    pid_file = Path(env_for(mode)["STACK_DIR"]) / "run" / "pulsar.pid"
    pid = int(pid_file.read_text())
    os.killpg(pid, signal.SIGKILL)
    for _ in range(100):
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            break
        time.sleep(0.1)
    pid_file.unlink(missing_ok=True)


# ---------------------------------------------------------------------------------------------------------------
# Admin calls PulsarAdmin has no method for, answered with their status (a retried deletion may find nothing).


async def call(session: aiohttp.ClientSession, stack: Stack, method: str, path: str, body: object = None) -> int:
    data = json.dumps(body).encode() if body is not None else None
    headers = {"Content-Type": "application/json"}
    try:
        async with session.request(method, f"{stack.admin_url}{path}", data=data, headers=headers) as r:
            await r.read()
            return r.status
    except (TimeoutError, aiohttp.ClientError):
        return 0


def rest_path(t: TopicName) -> str:
    return f"/admin/v2/{t.rest_path}"


async def until(check: Callable[[], Awaitable[Any]], what: str, timeout: float = 120) -> Any:
    return await eventually(check, timeout=timeout, interval=0.5, what=what)


def consume_and_acknowledge(stack: Stack, topics: list[str], n: int) -> None:
    """Receive and acknowledge ``n`` messages of each topic one by one on subscription ``s``."""
    client = pulsar.Client(stack.service_url, operation_timeout_seconds=30, logger=quiet_logger())
    try:
        for t in topics:
            consumer = client.subscribe(t, SUBSCRIPTION, consumer_type=pulsar.ConsumerType.Shared)
            for _ in range(n):
                consumer.acknowledge(consumer.receive(timeout_millis=20000))
            consumer.close()
    finally:
        client.close()


# ---------------------------------------------------------------------------------------------------------------
# The drop paths: how each is staged, fired (the drop the kill interrupts) and done again after the restart.


@dataclass
class DropPath:
    name: str
    namespace: str
    topics: list[TopicName]
    # Every ledger the metadata named for these topics once staged (the rollover's: before their unload).
    known: set[int] = field(default_factory=set)
    stop: threading.Event = field(default_factory=threading.Event)


class Round:
    def __init__(
        self, stack: Stack, admin: StagingAdmin, session: aiohttp.ClientSession, paths: list[DropPath]
    ) -> None:
        self.stack = stack
        self.admin = admin
        self.session = session
        self.paths = paths

    async def stage(self, p: DropPath) -> None:
        a, s = self.admin, self.stack
        await a.ensure_namespace(p.namespace)
        await a.set_retention(p.namespace, -1, -1)
        names = [str(t) for t in p.topics]
        if p.name in ("trim", "rollover-cleanup", "offload"):
            await asyncio.gather(*(asyncio.to_thread(produce, s.service_url, n, 6 * ENTRIES_PER_LEDGER) for n in names))
        if p.name == "rollover-cleanup":
            # The current ledger of each is empty now (full at 30, rolled over): unloaded, it is dropped on load.
            p.known = await self.known_ledgers(p)
            for t in p.topics:
                await a.unload(t)
        if p.name in ("cursor-switch", "unsubscribe", "topic-deletion", "namespace-deletion"):
            for t in p.topics:
                await a.create_subscription(t, SUBSCRIPTION)
            await asyncio.gather(*(asyncio.to_thread(produce, s.service_url, n, 60) for n in names))
            if p.name != "cursor-switch":
                # Acknowledged one by one: each subscription persists its position in a cursor ledger.
                await asyncio.to_thread(consume_and_acknowledge, s, names, 12)
            if p.name == "topic-deletion":
                # And compacted once: a deleted topic's compacted ledger goes with its __compaction cursor.
                await asyncio.gather(*(asyncio.to_thread(produce_keyed, s.service_url, n, 6) for n in names))
                await asyncio.gather(*(self.compact(t) for t in p.topics))
        if p.name == "offload":
            for t in p.topics:
                current = max(ml_ledger_ids(await a.internal_stats(t)))
                await a.trigger_offload(t, current, 0)

            async def offloaded() -> bool:
                return all([(await a.offload_status(t)).get("status") == "SUCCESS" for t in p.topics])

            await until(offloaded, f"{p.name}: offloads", timeout=300)
        if p.name == "compaction":
            await asyncio.gather(*(asyncio.to_thread(produce_keyed, s.service_url, n, 12) for n in names))
            await asyncio.gather(*(self.compact(t) for t in p.topics))
            await asyncio.gather(*(asyncio.to_thread(produce_keyed, s.service_url, n, 12) for n in names))
        if p.name == "schema-deletion":
            for t in p.topics:
                await a.upload_schema(t, "AVRO", AVRO_V1)
                await a.upload_schema(t, "AVRO", AVRO_V2)
                await a.create_topic(t)
        if p.name == "delayed-buckets":
            await asyncio.to_thread(produce_delayed_with_subscription, s, names)
            await a.set_namespace_policy(p.namespace, "delayedDelivery", {"active": False, "tickTime": 1000})

            async def off() -> bool:
                got = [await a.topic_policy(t, "delayedDelivery", applied=True) for t in p.topics]
                return all(isinstance(g, dict) and g.get("active") is False for g in got)

            await until(off, f"{p.name}: delayed delivery off")
        if p.name == "trim":
            await a.set_retention(p.namespace, 0, 0)
        await asyncio.sleep(1)  # the policies reach the topics
        if p.name != "rollover-cleanup":
            p.known = await self.known_ledgers(p)

    async def compact(self, t: TopicName) -> None:
        await call(self.session, self.stack, "PUT", f"{rest_path(t)}/compaction")

        async def done() -> bool:
            async with self.session.get(f"{self.stack.admin_url}{rest_path(t)}/compaction") as r:
                return r.status == 200 and (await r.json()).get("status") != "RUNNING"

        await until(done, f"compaction of {t}")

    def fire(self, p: DropPath) -> list[Awaitable[Any]]:
        """The drop operations of ``p``, started now (the kill interrupts them)."""
        s, a = self.stack, self.admin
        match p.name:
            case "trim" | "offload":
                return [call(self.session, s, "POST", f"{rest_path(t)}/trim") for t in p.topics]
            case "rollover-cleanup":
                return [a.internal_stats(t) for t in p.topics]
            case "cursor-switch":
                return [asyncio.to_thread(acknowledge_until, s, [str(t) for t in p.topics], p.stop)]
            case "unsubscribe" | "delayed-buckets":
                return [
                    call(self.session, s, "DELETE", f"{rest_path(t)}/subscription/{SUBSCRIPTION}?force=true")
                    for t in p.topics
                ]
            case "topic-deletion":
                return [call(self.session, s, "DELETE", f"{rest_path(t)}?force=true") for t in p.topics]
            case "namespace-deletion":
                return [call(self.session, s, "DELETE", f"/admin/v2/namespaces/{p.namespace}?force=true")]
            case "compaction":
                return [call(self.session, s, "PUT", f"{rest_path(t)}/compaction") for t in p.topics]
            case "schema-deletion":
                return [
                    call(
                        self.session,
                        s,
                        "DELETE",
                        f"/admin/v2/schemas/{t.tenant}/{t.namespace}/{t.local_name}/schema?force=true",
                    )
                    for t in p.topics
                ]
        raise AssertionError(p.name)

    async def again(self, p: DropPath) -> None:
        """What the broker or an operator does next, once it is back: the same drop, retried."""
        s = self.stack
        match p.name:
            case "trim" | "offload":
                await asyncio.gather(*(call(self.session, s, "POST", f"{rest_path(t)}/trim") for t in p.topics))
            case "rollover-cleanup":
                await asyncio.gather(*(self.admin.internal_stats(t) for t in p.topics), return_exceptions=True)
            case "compaction":
                await asyncio.gather(*(self.compact(t) for t in p.topics), return_exceptions=True)
            case "cursor-switch":
                pass
            case _:
                await asyncio.gather(*self.fire(p), return_exceptions=True)

    async def known_ledgers(self, p: DropPath) -> set[int]:
        """Every ledger the metadata names for ``p``'s topics now (ledgers, cursors, schema, compacted)."""
        out: set[int] = set()
        for t in p.topics:
            try:
                st = await self.admin.internal_stats(t)
            except Exception:
                continue
            out |= set(ml_ledger_ids(st))
            out |= {int(c.get("cursorLedger", -1)) for c in (st.get("cursors") or {}).values()}
            out |= {int(x["ledgerId"]) for x in st.get("schemaLedgers") or []}
            out.add(int((st.get("compactedLedger") or {}).get("ledgerId", -1)))
            for c in (st.get("cursors") or {}).values():
                for k, v in (c.get("properties") or {}).items():
                    if k.startswith("#pulsar.internal.delayed.bucket") or k == "CompactedTopicLedger":
                        with contextlib.suppress(ValueError):
                            out.add(int(v))
        out.discard(-1)
        return out


async def staggered(after_s: float, op: Awaitable[Any], done: list[float]) -> Any:
    """``op`` started ``after_s`` from now; the time it ended well (a 2xx answer, or any result but a status) is
    added to ``done``."""
    await asyncio.sleep(after_s)
    result = await op
    if not isinstance(result, int) or 200 <= result < 300:
        done.append(time.monotonic())
    return result


def produce_keyed(service_url: str, topic: str, n: int) -> None:
    client = pulsar.Client(service_url, operation_timeout_seconds=30, logger=quiet_logger())
    try:
        producer = client.create_producer(topic, batching_enabled=False)
        for i in range(n):
            producer.send(f"v{i}".encode(), partition_key=f"k{i % 3}")
        producer.close()
    finally:
        client.close()


def produce_delayed_with_subscription(stack: Stack, topics: list[str]) -> None:
    """30 messages due in 10 minutes on each topic's subscription ``s``: sealed buckets (snapshot ledgers)."""
    client = pulsar.Client(stack.service_url, operation_timeout_seconds=30, logger=quiet_logger())
    try:
        consumers = [client.subscribe(t, SUBSCRIPTION, consumer_type=pulsar.ConsumerType.Shared) for t in topics]
        for t in topics:
            producer = client.create_producer(t, batching_enabled=False)
            for i in range(30):
                producer.send(f"d{i}".encode(), deliver_after=timedelta(seconds=600))
            producer.close()
        time.sleep(3)  # buckets seal as the ledgers roll
        for c in consumers:
            c.close()
    finally:
        client.close()


def acknowledge_until(stack: Stack, topics: list[str], stop: threading.Event) -> None:
    """Acknowledge the subscription's messages one by one, round robin over ``topics``, until stopped or killed."""
    client = pulsar.Client(stack.service_url, operation_timeout_seconds=5, logger=quiet_logger())
    try:
        consumers = [client.subscribe(t, SUBSCRIPTION, consumer_type=pulsar.ConsumerType.Shared) for t in topics]
        while not stop.is_set():
            for c in consumers:
                with contextlib.suppress(Exception):
                    c.acknowledge(c.receive(timeout_millis=200))
    except Exception:
        pass  # the broker was killed under it
    finally:
        with contextlib.suppress(Exception):
            client.close()


# ---------------------------------------------------------------------------------------------------------------


def scan(config: Path, namespaces: list[str]) -> list[dict[str, Any]]:
    args = [
        sys.executable,
        "-m",
        "worker.cli",
        "scan",
        "--dry-run",
        "--json",
        "--min-age",
        "0s",
        "--config",
        str(config),
    ]
    for ns in namespaces:
        args += ["--namespace", ns]
    r = subprocess.run(args, capture_output=True, text=True, timeout=900, cwd=REPO)
    if r.returncode != 0:
        raise SystemExit(f"scan failed (exit {r.returncode}):\n{r.stderr[-3000:]}")
    return list(json.loads(r.stdout.strip().splitlines()[-1])["orphans"])


def queued_ledgers(stack: Stack) -> set[int]:
    client = pulsar.Client(stack.service_url, logger=quiet_logger())
    out: set[int] = set()
    try:
        for p in range(4):
            reader = client.create_reader(f"{PENDING}-partition-{p}", pulsar.MessageId.earliest)
            while reader.has_message_available():
                try:
                    out.add(decode(reader.read_next(timeout_millis=5000).data()).ledger_id)
                except InvalidMessage:
                    continue
            reader.close()
    except pulsar.PulsarException:
        pass  # stock brokers: the queue may not exist
    finally:
        client.close()
    return out


async def settle_loads(admin: StagingAdmin, paths: list[DropPath]) -> None:
    """Every topic of the round loaded (and its namespace's system topic), then a few seconds: a topic drops its
    empty current ledger when it loads and deletes it right after, which a scan racing the load would count."""
    for p in paths:
        for t in [*p.topics, TopicName.parse(f"persistent://{p.namespace}/__change_events")]:
            with contextlib.suppress(Exception):
                await admin.internal_stats(t)
    await asyncio.sleep(5)


def by_path(orphans: list[dict[str, Any]], paths: list[DropPath]) -> dict[str, set[int]]:
    out: dict[str, set[int]] = {p.name: set() for p in paths}
    for o in orphans:
        topic = str(o.get("topic") or "")
        for p in paths:
            if f"/{p.namespace}/" in topic.replace("persistent://", "/"):
                out[p.name].add(int(o["ledger_id"]))
    return out


async def one_round(
    mode: str, delay_ms: float, spread_ms: float, n_topics: int, names: list[str], workdir: Path
) -> list[dict[str, Any]]:
    stack = stack_for(mode)
    tag = uuid.uuid4().hex[:6]
    paths = [DropPath(name, f"public/crash-{mode[:3]}-{name[:8]}-{tag}", []) for name in names]
    for p in paths:
        p.topics = [TopicName.parse(f"persistent://{p.namespace}/t{i}") for i in range(n_topics)]
    timeout = aiohttp.ClientTimeout(total=120)
    async with admin_for(stack) as admin, aiohttp.ClientSession(timeout=timeout) as session:
        rnd = Round(stack, admin, session, paths)
        for _ in range(60):  # just after a start the standalone may not have made its "public" tenant yet
            if await admin.healthy():
                break
            await asyncio.sleep(1)
        await asyncio.gather(*(rnd.stage(p) for p in paths))
        staged_max = max((max(p.known, default=0) for p in paths), default=0)
        # The cursor switches are continuous: their acknowledgements start a few seconds before the others' drops.
        cursor = [p for p in paths if p.name == "cursor-switch"]
        ops = [asyncio.ensure_future(op) for p in cursor for op in rnd.fire(p)]
        if cursor:
            await asyncio.sleep(3)
        # Each path's drops are spread over spread_ms, so at the kill they stand at every point from not yet sent to
        # long done: the kill lands before, during and after their metadata writes alike.
        done: dict[str, list[float]] = {p.name: [] for p in paths}
        for p in paths:
            if p in cursor:
                continue
            fired = rnd.fire(p)
            for i, op in enumerate(fired):
                ops.append(asyncio.ensure_future(staggered(i * spread_ms / 1000 / len(fired), op, done[p.name])))
        await asyncio.sleep(delay_ms / 1000)
        killed_at = time.monotonic()
        kill9_broker(mode)
        for p in cursor:
            p.stop.set()
        await asyncio.gather(*ops, return_exceptions=True)
    stack_sh(mode, "up")

    queue = {"pending": PENDING, "retry": f"{PENDING}-RETRY", "dlq": f"{PENDING}-DLQ", "parallelism": 4}
    h = WorkerHarness(
        stack,
        workdir,
        f"demo-{tag}",
        topics=queue,
        worker={"min_ledger_age_s": 2, "in_use_retry_s": 2, "max_attempts": 50},
    )
    config = workdir / f"demo-{tag}.yaml"
    config.write_text(yaml.safe_dump(h.config))
    namespaces = [p.namespace for p in paths]
    async with admin_for(stack) as admin:
        await settle_loads(admin, paths)
    before = by_path(scan(config, namespaces), paths)
    on_queue_before = queued_ledgers(stack) if mode != "stock" else set()
    async with admin_for(stack) as admin, aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=300)) as session:
        rnd = Round(stack, admin, session, paths)
        await asyncio.gather(*(rnd.again(p) for p in paths), return_exceptions=True)
    drain_s = 0.0
    if mode != "stock":
        queued = queued_ledgers(stack)
        t0 = time.monotonic()
        h.start()
        try:
            deadline = time.monotonic() + 300
            while time.monotonic() < deadline:
                await asyncio.sleep(10)
                left = by_path(scan(config, namespaces), paths)
                if not any(ids & queued for ids in left.values()):
                    break
        finally:
            h.close()
        drain_s = time.monotonic() - t0
    after = by_path(scan(config, namespaces), paths)
    rows = []
    for p in paths:
        dropped = {i for i in before[p.name] if i <= staged_max}
        fresh = before[p.name] - dropped
        rows.append(
            {
                "mode": mode,
                "path": p.name,
                "delay_ms": delay_ms,
                "spread_ms": spread_ms,
                "topics": n_topics,
                "drops_done_before_kill": sum(1 for t in done[p.name] if t < killed_at),
                "dropped_before_worker": len(dropped),
                "dropped_on_queue": len(dropped & on_queue_before),
                "dropped_after_drain": len({i for i in after[p.name] if i <= staged_max}),
                "never_listed_before_worker": len(fresh),
                "never_listed_after_drain": len({i for i in after[p.name] if i > staged_max}),
                "drain_s": round(drain_s, 1),
                "dropped_ids": sorted(dropped),
            }
        )
    return rows


def table(rows: list[dict[str, Any]], delays: list[float], modes: list[str], names: list[str]) -> str:
    """One row per path and mode; each kill point's cell is ``before/on the queue/after [answered]``: orphans of
    dropped ledgers before the worker, of them on the queue, after the drain, and how many of the path's drops had
    answered before the kill (where the kill landed: 0, before their writes; all, after)."""
    head = ["path", "brokers"] + [f"kill +{d:g} ms" for d in delays] + ["total", "never listed"]
    lines = [head]
    for name in names:
        for mode in modes:
            cells = [name, mode]
            tb = tq = ta = nl = nla = 0
            for d in delays:
                rs = [r for r in rows if r["path"] == name and r["mode"] == mode and r["delay_ms"] == d]
                b = sum(r["dropped_before_worker"] for r in rs)
                q = sum(r["dropped_on_queue"] for r in rs)
                a = sum(r["dropped_after_drain"] for r in rs)
                tb, tq, ta = tb + b, tq + q, ta + a
                nl += sum(r["never_listed_before_worker"] for r in rs)
                nla += sum(r["never_listed_after_drain"] for r in rs)
                answered = (
                    "" if name == "cursor-switch" else f" [{sum(r.get('drops_done_before_kill', 0) for r in rs)}]"
                )
                cells.append(f"{b}/{q}/{a}{answered}" if rs else "-")
            cells += [f"{tb}/{tq}/{ta}", f"{nl}->{nla}"]
            lines.append(cells)
    widths = [max(len(str(r[i])) for r in lines) for i in range(len(head))]
    out = ["  ".join(str(c).ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in lines]
    out.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(out)


def in_order(rows: list[dict[str, Any]], key: str) -> list[Any]:
    """The distinct values of ``key`` in the rows, in their first-seen order."""
    return list(dict.fromkeys(r[key] for r in rows))


LEGEND = (
    "cells: orphans of dropped ledgers before the worker / of them on the queue / after the drain [drops answered"
    " before the kill]\nnever listed: orphans created during the round that no metadata ever listed, before -> after"
    " the drain (scan's to find)"
)


async def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=1, help="rounds per kill point and mode")
    ap.add_argument("--topics", type=int, default=12, help="topics per drop path")
    ap.add_argument(
        "--delays-ms", default="250,500,1000,2000,4000", help="kill points: ms after each path's first drop is fired"
    )
    ap.add_argument("--spread-ms", type=float, default=0, help="each path's drops are fired over this long")
    ap.add_argument("--modes", default=",".join(MODES), help=f"any of {', '.join(MODES)}")
    ap.add_argument("--paths", default=",".join(PATHS), help=f"any of {', '.join(PATHS)}")
    ap.add_argument("--json-out", type=Path, help="also write the rows here")
    ap.add_argument("--keep", action="store_true", help="leave the demo stack up at the end")
    ap.add_argument("--table-from", type=Path, help="print the table of a saved --json-out run, run nothing")
    args = ap.parse_args()
    if args.table_from:
        saved: list[dict[str, Any]] = json.loads(args.table_from.read_text())["rows"]
        print(LEGEND)
        print(table(saved, in_order(saved, "delay_ms"), in_order(saved, "mode"), in_order(saved, "path")))
        return 0
    modes = [m for m in args.modes.split(",") if m]
    names = [p for p in args.paths.split(",") if p]
    for m in modes:
        if m not in MODES:
            ap.error(f"--modes: unknown mode {m!r}")
    for n in names:
        if n not in PATHS:
            ap.error(f"--paths: unknown path {n!r}")
    delays = [float(d) for d in args.delays_ms.split(",")]
    rows: list[dict[str, Any]] = []
    workdir = Path(tempfile.mkdtemp(prefix="crash-matrix-"))
    t0 = time.monotonic()
    try:
        for mode in modes:
            stack_sh(mode, "down")  # the mode is a start-up choice: a fresh start in this mode
            stack_sh(mode, "up")
            for delay in delays:
                for _ in range(args.rounds):
                    got = await one_round(mode, delay, args.spread_ms, args.topics, names, workdir)
                    rows += got
                    for r in got:
                        print(
                            f"{r['mode']:<9} {r['path']:<18} kill +{r['delay_ms']:>6g} ms:"
                            f" {r['dropped_before_worker']:>3} dropped-ledger orphans before the worker,"
                            f" {r['dropped_on_queue']:>3} on the queue, {r['dropped_after_drain']:>3} after the drain;"
                            f" {r['never_listed_before_worker']} never listed ({r['never_listed_after_drain']} after);"
                            f" {r['drops_done_before_kill']} of {r['topics']} drops done before the kill",
                            flush=True,
                        )
    finally:
        if not args.keep and modes:
            stack_sh(modes[-1], "down")
    print()
    print(LEGEND)
    print(table(rows, delays, modes, names))
    print(f"\n{len(rows)} rows in {time.monotonic() - t0:.0f} s")
    if args.json_out:
        args.json_out.write_text(json.dumps({"rows": rows, "delays_ms": delays}, indent=1, sort_keys=True))
    print(json.dumps({"rows": rows}, sort_keys=True))
    return 0


if __name__ == "__main__":
    raise SystemExit(asyncio.run(main()))
