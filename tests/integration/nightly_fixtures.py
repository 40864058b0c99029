"""What the nightly-job tests share: real dead letters made by a real worker, backlog and ledger checks."""

from __future__ import annotations

import subprocess
import time
import urllib.request
from pathlib import Path
from typing import Any

from testkit.harness import WorkerHarness
from testkit.topics import eventually
from tests.conftest import Stack
from tests.integration.conftest import WorkerFactory
from tests.integration.helpers import TcpProxy
from worker.backends.stores import Stores
from worker.broker.admin import PulsarAdmin
from worker.formats.message import REASON, RECONSUMETIMES
from worker.operations.queue_status import _backlog
from worker.settings import Settings, load_settings


def bookie_proxy(stack: Stack) -> TcpProxy:
    """A loopback proxy to the bookie HTTP API, down until ``up()``: storage unreachable for the worker."""
    host, port = stack.bookie_http_url.removeprefix("http://").split(":")
    return TcpProxy(host, int(port))


def dead_letter_worker(make_worker: WorkerFactory, name: str, proxy: TcpProxy, **worker: Any) -> WorkerHarness:
    """A real worker whose storage is unreachable once it has started: every decodable message ends in its
    DLQ after two attempts (undecodable ones at once)."""
    h = make_worker(
        name,
        start=False,
        bookkeeper={"http_url": proxy.url, "request_timeout_s": 2},
        worker={"max_attempts": 2, "backoff_initial_s": 0.3, "backoff_max_s": 0.5, **worker},
        logging={"level": "INFO", "format": "json"},
    )
    # Reachable while the worker proves its bookies at start, cut before any message arrives.
    proxy.up()
    try:
        h.start()
    finally:
        proxy.down()
    return h


async def wait_dlq(h: WorkerHarness, n: int, timeout: float = 120) -> None:
    async def full() -> bool:
        return len(h.read_dlq()) >= n

    await eventually(full, timeout=timeout, what=f"{n} dead letters")
    assert len(h.read_dlq()) == n


def replay_settings(h: WorkerHarness, stack: Stack, **worker: Any) -> Settings:
    """The harness's configuration with storage reachable again (what the nightly job runs with)."""
    cfg = {k: dict(v) for k, v in h.config.items()}
    cfg["bookkeeper"]["http_url"] = stack.bookie_http_url
    cfg["worker"].update(worker)
    cfg.pop("http", None)
    return load_settings(None, **cfg)


def publish_dead_letters(stack: Stack, settings: Settings, payloads: list[bytes]) -> list[str]:
    """Dead letters published straight to the DLQ, in this order, after the replay subscription was made
    at the earliest position (what ``topology`` does): their ids as the source prints them."""
    from testkit.topics import client_for

    t = settings.topics
    client = client_for(stack.service_url)
    try:
        client.subscribe(t.dlq, t.dlq_replay_subscription, initial_position=_earliest()).close()
        producer = client.create_producer(t.dlq, batching_enabled=False)
        ids = []
        for p in payloads:
            mid = producer.send(p, properties={REASON: "transient", RECONSUMETIMES: "2"})
            ids.append(f"{mid.ledger_id()}:{mid.entry_id()}:{mid.partition()}:{mid.batch_index()}")
        producer.close()
        return ids
    finally:
        client.close()


def _earliest() -> Any:
    import pulsar

    return pulsar.InitialPosition.Earliest


async def replay_backlog(admin: PulsarAdmin, settings: Settings) -> int:
    t = settings.topics
    return (await _backlog(admin, "dlq", t.dlq, t.dlq_replay_subscription, None)).backlog


async def existing(stack: Stack, ids: list[int]) -> set[int]:
    async with Stores(f"zk:{stack.zookeeper_hosts}") as zk:
        return {i for i in ids if await zk.bookkeeper.ledger_metadata_exists(i)}


def start_in_own_group(cmd: list[str], log_path: Path, cwd: Path) -> subprocess.Popen[bytes]:
    """A process in its own process group, so ``os.killpg`` kills it with every child (a driver's JVM)."""
    with open(log_path, "wb") as log:
        return subprocess.Popen(cmd, cwd=cwd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)


def pushed(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
        return str(r.read().decode())


def start_pushgateway(port: int, timeout: float = 30) -> subprocess.Popen[bytes]:
    """Debian's ``prometheus-pushgateway`` on loopback (no persistence: a test's pushes die with it)."""
    gw = subprocess.Popen(
        ["prometheus-pushgateway", f"--web.listen-address=127.0.0.1:{port}"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + timeout
    while True:
        try:
            pushed(port)
            return gw
        except OSError:
            if time.monotonic() > deadline or gw.poll() is not None:
                gw.kill()
                raise AssertionError("prometheus-pushgateway did not start") from None
            time.sleep(0.2)
