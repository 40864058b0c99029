"""The leak, side by side: stock brokers vs brokers with the broker extension (``make leak-demo``).

Each round, on a standalone stack instance of its own (ports and data apart from the shared stacks):
``--topics`` topics of ``--ledgers`` closed ledgers each, retention set to 0, a trim fired at every topic
and the broker (standalone: broker, bookie and ZooKeeper in one JVM) killed with SIGKILL ``delay`` ms
later; then restart, ``scan --dry-run`` counts the orphans before any worker runs; every topic is trimmed
again (what the broker's retention would do), a worker drains the queue, and ``scan --dry-run`` counts
again. Stock brokers leak (nothing is queued); with the extension every orphan must be on the queue and
gone after the drain. Prints one row per round and a JSON summary as the last line.

    python -m tools.leak_demo [--rounds 3] [--topics 60] [--ledgers 6] [--delays-ms 0,5,10] [--modes stock,extension]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import subprocess
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import aiohttp
import pulsar
import yaml

from testkit.harness import WorkerHarness, quiet_logger
from testkit.stack import REPO, STACK, Stack, parse_env, scan_dry_run, stack_of

PENDING = "persistent://pulsar/system/__ledger_deletion"
ENTRIES_PER_LEDGER = 5  # config/standalone.conf: managedLedgerMaxEntriesPerLedger

DEMO_ENV = {
    "PROFILE": "standalone",
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


def env_for(mode: str) -> dict[str, str]:
    env = {**os.environ}
    for k, v in DEMO_ENV.items():
        env[k] = os.environ.get(f"LDW_DEMO_{k}", v)
    env["BROKER_EXTENSION"] = "1" if mode == "extension" else "0"
    return env


def stack_sh(mode: str, *args: str) -> str:
    r = subprocess.run(["bash", str(STACK), *args], env=env_for(mode), capture_output=True, text=True, timeout=600)
    if r.returncode != 0:
        raise SystemExit(f"stack.sh {' '.join(args)} failed:\n{r.stderr[-3000:]}")
    return r.stdout


def stack_for(mode: str) -> Stack:
    return stack_of(parse_env(stack_sh(mode, "env")))


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


async def admin(session: aiohttp.ClientSession, url: str, method: str, path: str, body: object = None) -> int:
    data = json.dumps(body).encode() if body is not None else b""
    headers = {"Content-Type": "application/json"}
    async with session.request(method, f"{url}{path}", data=data, headers=headers) as r:
        await r.read()
        return r.status


def produce(stack: Stack, topics: list[str], per_topic: int) -> None:
    client = pulsar.Client(stack.service_url, logger=quiet_logger())
    try:
        producers = [client.create_producer(t, batching_enabled=False) for t in topics]
        for i in range(per_topic):
            for p in producers:
                p.send_async(b"x" * 100 + str(i).encode(), None)
        for p in producers:
            p.flush()
            p.close()
    finally:
        client.close()


def scan(stack: Stack, config: Path, namespace: str) -> list[int]:
    try:
        report = scan_dry_run(config, namespace)
    except RuntimeError as e:
        raise SystemExit(str(e)) from e
    return sorted(int(o["ledger_id"]) for o in report["orphans"])


def queued_ledgers(stack: Stack, namespace: str) -> set[int]:
    from worker.formats.message import InvalidMessage, decode

    client = pulsar.Client(stack.service_url, logger=quiet_logger())
    out: set[int] = set()
    try:
        for p in range(4):
            reader = client.create_reader(f"{PENDING}-partition-{p}", pulsar.MessageId.earliest)
            while reader.has_message_available():
                try:
                    info = decode(reader.read_next(timeout_millis=5000).data())
                except InvalidMessage:
                    continue  # not this round's (the worker dead-letters it)
                if info.topic_name.startswith(f"persistent://{namespace}/"):
                    out.add(info.ledger_id)
            reader.close()
    except pulsar.PulsarException:
        pass  # stock brokers: the queue may not exist
    finally:
        client.close()
    return out


async def one_round(mode: str, delay_ms: float, n_topics: int, n_ledgers: int, workdir: Path) -> dict[str, Any]:
    stack = stack_for(mode)
    ns = f"public/leak-{mode[:3]}-{uuid.uuid4().hex[:6]}"
    topics = [f"persistent://{ns}/t{i}" for i in range(n_topics)]
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=60)) as s:
        # Just after a start the standalone may not have made its "public" tenant yet.
        for _ in range(60):
            if await admin(s, stack.admin_url, "PUT", f"/admin/v2/namespaces/{ns}") in (204, 409):
                break
            await asyncio.sleep(1)
        else:
            raise SystemExit(f"could not create namespace {ns}")
        await admin(
            s,
            stack.admin_url,
            "POST",
            f"/admin/v2/namespaces/{ns}/retention",
            {"retentionTimeInMinutes": -1, "retentionSizeInMB": -1},
        )
    await asyncio.to_thread(produce, stack, topics, n_ledgers * ENTRIES_PER_LEDGER)
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=60)) as s:
        await admin(
            s,
            stack.admin_url,
            "POST",
            f"/admin/v2/namespaces/{ns}/retention",
            {"retentionTimeInMinutes": 0, "retentionSizeInMB": 0},
        )
        await asyncio.sleep(1)  # the policy reaches the topics
        trims = [
            asyncio.create_task(admin(s, stack.admin_url, "POST", f"/admin/v2/persistent/{t[13:]}/trim"))
            for t in topics
        ]
        await asyncio.sleep(delay_ms / 1000)
        kill9_broker(mode)
        await asyncio.gather(*trims, return_exceptions=True)
    stack_sh(mode, "up")
    queue = {"pending": PENDING, "retry": f"{PENDING}-RETRY", "dlq": f"{PENDING}-DLQ", "parallelism": 4}
    h = WorkerHarness(
        stack,
        workdir,
        f"demo-{uuid.uuid4().hex[:6]}",
        topics=queue,
        worker={"min_ledger_age_s": 2, "in_use_retry_s": 2, "max_attempts": 50},
    )
    config = workdir / "demo.yaml"
    config.write_text(yaml.safe_dump(h.config))
    before = scan(stack, config, ns)
    on_queue = queued_ledgers(stack, ns) if mode == "extension" else set()
    # What the broker's retention does on its own once the topics load again: trim (and, with the
    # extension, queue) whatever the crash left listed.
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=120)) as s:
        await asyncio.gather(
            *(admin(s, stack.admin_url, "POST", f"/admin/v2/persistent/{t[13:]}/trim") for t in topics)
        )
    drained_s = 0.0
    if mode == "extension":
        t0 = time.monotonic()
        h.start()
        try:
            deadline = time.monotonic() + 180
            while time.monotonic() < deadline and scan(stack, config, ns):  # noqa: ASYNC110 (polls a scan)
                await asyncio.sleep(3)
        finally:
            h.close()
        drained_s = time.monotonic() - t0
    after = scan(stack, config, ns)
    return {
        "mode": mode,
        "delay_ms": delay_ms,
        "topics": n_topics,
        "orphans_before_worker": len(before),
        "orphans_on_queue": len(set(before) & on_queue),
        "orphans_after_drain": len(after),
        "drain_s": round(drained_s, 1),
        "orphan_ids": before,
    }


async def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3, help="rounds per delay and mode")
    ap.add_argument("--topics", type=int, default=60)
    ap.add_argument("--ledgers", type=int, default=6, help="closed ledgers per topic")
    ap.add_argument("--delays-ms", default="0", help="comma-separated kill delays after the trims are fired")
    ap.add_argument("--modes", default="stock,extension")
    ap.add_argument("--keep", action="store_true", help="leave the demo stack up at the end")
    args = ap.parse_args()
    rows: list[dict[str, Any]] = []
    workdir = Path(tempfile.mkdtemp(prefix="leak-demo-"))
    modes = [m for m in args.modes.split(",") if m]
    try:
        for mode in modes:
            stack_sh(mode, "down")  # the mode is a start-up choice: a fresh start in this mode
            stack_sh(mode, "up")
            for delay in (float(d) for d in args.delays_ms.split(",")):
                for _ in range(args.rounds):
                    row = await one_round(mode, delay, args.topics, args.ledgers, workdir)
                    rows.append(row)
                    print(
                        f"{row['mode']:<9} kill after {row['delay_ms']:>4} ms:"
                        f" {row['orphans_before_worker']:>3} orphans before the worker,"
                        f" {row['orphans_on_queue']:>3} of them on the queue,"
                        f" {row['orphans_after_drain']:>3} after the drain ({row['drain_s']} s)",
                        flush=True,
                    )
    finally:
        if not args.keep and modes:
            stack_sh(modes[-1], "down")
    print(json.dumps({"rounds": rows}, sort_keys=True))
    return 0


if __name__ == "__main__":
    raise SystemExit(asyncio.run(main()))
