"""Helpers shared by the integration tests, by concept: clients, topics and ledgers on the real stack; the
worker's config, CLI and queue; proxies that fault the network. Polling with deadlines and producers come
from testkit.topics. The offload helpers are in offload_helpers.py, the Prometheus ones in prometheus_helpers.py.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pulsar

from testkit.harness import WorkerHarness
from testkit.topics import eventually, ml_ledger_ids
from tests.conftest import REPO, Stack
from tests.integration.conftest import WorkerFactory
from worker.broker.admin import PulsarAdmin
from worker.formats.message import LedgerComponent, LedgerType, PendingDeleteLedgerInfo, decode
from worker.formats.topic_name import TopicName
from worker.settings import Settings, load_settings

# ---- clients, topics and ledgers on the real stack ------------------------------------------------------


def quiet_logger() -> Any:
    """The C++ client logs every connect at INFO; tests only want its warnings."""
    return pulsar.ConsoleLogger(pulsar.LoggerLevel.Warn)


async def fresh_namespace(admin: PulsarAdmin, name: str) -> str:
    """A namespace of one test, infinite retention (the broker must not trim what the test inspects)."""
    ns = f"public/{name}"
    await admin.ensure_namespace(ns)
    await admin.set_retention(ns, -1, -1)
    return ns


def count_messages(service_url: str, topic: str) -> int:
    """How many messages a reader from earliest gets on ``topic``."""
    client = pulsar.Client(service_url, operation_timeout_seconds=30, logger=quiet_logger())
    try:
        reader = client.create_reader(topic, pulsar.MessageId.earliest)
        n = 0
        while reader.has_message_available():
            reader.read_next(timeout_millis=10_000)
            n += 1
        reader.close()
        return n
    finally:
        client.close()


def produce_keyed(service_url: str, topic: TopicName, n: int) -> None:
    """``n`` messages over three keys, unbatched: something for a compaction to compact."""
    client = pulsar.Client(service_url, operation_timeout_seconds=30, logger=quiet_logger())
    try:
        producer = client.create_producer(str(topic), batching_enabled=False)
        for i in range(n):
            producer.send(f"v{i}".encode(), partition_key=f"k{i % 3}")
        producer.close()
    finally:
        client.close()


def live_topic_with_schema_and_cursor(service_url: str, topic: str, sub: str) -> None:
    """A topic with an Avro schema (a schema ledger) and a subscription whose acks live in a cursor ledger."""
    from pulsar.schema import AvroSchema, Record, String

    class Event(Record):
        name = String()

    client = pulsar.Client(service_url, operation_timeout_seconds=30, logger=quiet_logger())
    try:
        consumer = client.subscribe(topic, sub, schema=AvroSchema(Event), consumer_type=pulsar.ConsumerType.Shared)
        producer = client.create_producer(topic, schema=AvroSchema(Event), batching_enabled=False)
        for i in range(12):
            producer.send(Event(name=f"e{i}"))
        for _ in range(7):
            consumer.acknowledge(consumer.receive(timeout_millis=10_000))
        producer.close()
        consumer.close()
    finally:
        client.close()


def topic_with_schema(service_url: str, topic: TopicName) -> None:
    """A topic whose producer registered an Avro schema (one schema ledger)."""
    from pulsar.schema import AvroSchema, Record, String

    class Event(Record):
        name = String()

    client = pulsar.Client(service_url, operation_timeout_seconds=30, logger=quiet_logger())
    try:
        producer = client.create_producer(str(topic), schema=AvroSchema(Event), batching_enabled=False)
        producer.send(Event(name="e"))
        producer.close()
    finally:
        client.close()


def dead_letter(client: pulsar.Client, topic: str, payload: bytes, props: dict[str, str]) -> None:
    """A dead letter exactly as the worker's settler writes one: the original bytes plus properties."""
    p = client.create_producer(topic, batching_enabled=False)
    p.send(payload, properties=props)
    p.close()


async def live_ids(admin: PulsarAdmin, topic: TopicName) -> set[int]:
    """Every ledger the broker says ``topic`` uses: its data, cursor and schema ledgers."""
    stats = await admin.internal_stats(topic)
    ids = set(ml_ledger_ids(stats))
    ids |= {int(c["cursorLedger"]) for c in stats["cursors"].values() if int(c["cursorLedger"]) >= 0}
    ids |= {int(s["ledgerId"]) for s in stats["schemaLedgers"]}
    return ids


def bookie_length(stack: Stack, lid: int) -> int:
    """The ledger's ``length`` as the bookie's HTTP API reports it (raw JSON, not the worker's parser)."""
    url = f"{stack.bookie_http_url.rstrip('/')}/api/v1/ledger/metadata/?ledger_id={lid}"
    with urllib.request.urlopen(url, timeout=10) as r:
        md = json.loads(r.read())[str(lid)]
    assert md["state"] == "CLOSED", md["state"]
    return int(md["length"])


def admin_call(stack: Stack, method: str, topic: TopicName, suffix: str) -> Any:
    """An admin call PulsarAdmin has no method for (compaction, the ``__compaction`` subscription)."""
    path = f"/admin/v2/persistent/{topic.tenant}/{topic.namespace}/{topic.local_name}/{suffix}"
    req = urllib.request.Request(f"{stack.admin_url}{path}", method=method, data=b"" if method != "GET" else None)
    with urllib.request.urlopen(req, timeout=60) as r:
        body = r.read()
    return json.loads(body) if body else None


async def compact(stack: Stack, topic: TopicName) -> None:
    """Compact ``topic`` and wait until the broker says the compaction succeeded."""
    admin_call(stack, "PUT", topic, "compaction")

    async def done() -> str | None:
        status = admin_call(stack, "GET", topic, "compaction")["status"]
        return None if status == "RUNNING" else str(status)

    assert await eventually(done, timeout=60, what="compaction") == "SUCCESS"


# ---- the worker: its config, its CLI, its queue ---------------------------------------------------------


def worker_config(make_worker: WorkerFactory, name: str, **overrides: Any) -> WorkerHarness:
    """Unique deletion topics for one test, not started: ``.config_path`` serves the CLI, ``.start()`` the
    daemon (which sends after a second, ``worker.send_delay_s``)."""
    worker = {"send_delay_s": 1, **overrides.pop("worker", {})}
    return make_worker(name, start=False, worker=worker, **overrides)


def settings_of(h: WorkerHarness) -> Settings:
    """The harness's config as the worker loads it."""
    return load_settings(h.config_path)


def cli(config: Path | None, *args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    """``python -m worker.cli ARGS [--config CONFIG]`` from the repository, its output captured."""
    cmd = [sys.executable, "-m", "worker.cli", *args]
    if config is not None:
        cmd += ["--config", str(config)]
    return subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=timeout)


def last_json(stdout: str) -> dict[str, Any]:
    """The last line of a command's output (its JSON report), parsed."""
    return dict(json.loads(stdout.strip().splitlines()[-1]))


def read_pending(stack: Stack, settings: Settings) -> list[PendingDeleteLedgerInfo]:
    """Every message on the pending topic, read by non-durable readers (delays do not apply, nothing is
    consumed): one reader per partition. Nothing when the topic was never made (a dry run): Pulsar 5.0
    refuses a reader on a partition of a partitioned topic that does not exist (4.0 made it)."""
    base = TopicName.parse(settings.topics.pending)
    try:
        with urllib.request.urlopen(f"{stack.admin_url}/admin/v2/{base.rest_path}/partitions", timeout=30) as r:
            if json.load(r)["partitions"] == 0:
                return []
    except urllib.error.HTTPError as e:
        if e.code != 404:
            raise
        return []
    client = pulsar.Client(stack.service_url, operation_timeout_seconds=30, logger=quiet_logger())
    out: list[PendingDeleteLedgerInfo] = []
    try:
        for i in range(settings.topics.parallelism):
            reader = client.create_reader(str(base.partition(i)), pulsar.MessageId.earliest)
            while reader.has_message_available():
                out.append(decode(reader.read_next(timeout_millis=10_000).data()))
            reader.close()
    finally:
        client.close()
    return out


def ml_info(topic: str, ledger_id: int, **kw: Any) -> PendingDeleteLedgerInfo:
    """A message for a managed-ledger (data) ledger of ``topic``."""
    return PendingDeleteLedgerInfo(topic, LedgerComponent.MANAGED_LEDGER, LedgerType.LEDGER, ledger_id, **kw)


# ---- network faults -------------------------------------------------------------------------------------


class TcpProxy:
    """A loopback TCP proxy the test can cut and restore: a real network outage between the worker
    and a storage backend, without touching the backend itself."""

    def __init__(self, target_host: str, target_port: int) -> None:
        import socket
        import threading

        self.target = (target_host, target_port)
        # Added before every chunk the server sends back: a slow server, as its clients see it.
        self.delay_s = 0.0
        self._lsock = socket.socket()
        self._lsock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._lsock.bind(("127.0.0.1", 0))
        self.port = int(self._lsock.getsockname()[1])
        self._open = threading.Event()
        self._conns: list[socket.socket] = []
        self._lock = threading.Lock()
        self._stop = False
        self._thread = threading.Thread(target=self._accept_loop, daemon=True)
        self._lsock.listen(64)
        self._lsock.settimeout(0.2)
        self._thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def up(self) -> None:
        self._open.set()

    def down(self) -> None:
        """Refuse new connections and cut the live ones."""
        self._open.clear()
        with self._lock:
            for c in self._conns:
                try:
                    c.close()
                except OSError:
                    pass
            self._conns.clear()

    def close(self) -> None:
        self._stop = True
        self.down()
        self._thread.join(timeout=5)
        self._lsock.close()

    def _accept_loop(self) -> None:
        import socket
        import threading

        while not self._stop:
            try:
                client, _ = self._lsock.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            if not self._open.is_set():
                client.close()  # the outage: connection accepted, then dropped with nothing said
                continue
            try:
                upstream = socket.create_connection(self.target, timeout=5)
            except OSError:
                client.close()
                continue
            with self._lock:
                self._conns += [client, upstream]
            for a, b, answers in ((client, upstream, False), (upstream, client, True)):
                threading.Thread(target=self._pipe, args=(a, b, answers), daemon=True).start()

    def _pipe(self, src: Any, dst: Any, answers: bool) -> None:
        import time

        try:
            while data := src.recv(65536):
                if answers and self.delay_s:
                    time.sleep(self.delay_s)
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                try:
                    s.close()
                except OSError:
                    pass


class HttpProxy:
    """A loopback HTTP proxy in front of a real server (the broker's admin API, a bookie's HTTP API).

    It forwards every request unchanged, records what it forwarded, and answers instead of the server
    where a test installs a fault: ``proxy.fault(lambda method, path: (status, body) or None)``. The
    worker talks to the real server through it; only the answers a test names are replaced.
    """

    def __init__(self, upstream: str) -> None:
        import threading

        from aiohttp import ClientSession, web

        self.upstream = upstream.rstrip("/")
        self.requests: list[tuple[str, str]] = []
        self._faults: list[Callable[[str, str], tuple[int, str] | None]] = []
        self._stalls: list[Callable[[str, str], float | None]] = []
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self.port = 0

        async def handle(request: web.Request) -> web.StreamResponse:
            path_qs = request.path_qs
            self.requests.append((request.method, path_qs))
            for fault in list(self._faults):
                answer = fault(request.method, path_qs)
                if answer is not None:
                    status, body = answer
                    return web.Response(status=status, text=body, content_type="text/plain")
            for stall in list(self._stalls):
                seconds = stall(request.method, path_qs)
                if seconds:
                    await asyncio.sleep(seconds)
            assert self._session is not None
            async with self._session.request(
                request.method,
                f"{self.upstream}{path_qs}",
                data=await request.read(),
                headers={k: v for k, v in request.headers.items() if k.lower() not in ("host", "content-length")},
                allow_redirects=False,
            ) as r:
                body = await r.read()
                headers = {k: v for k, v in r.headers.items() if k.lower() in ("content-type", "location")}
                return web.Response(status=r.status, body=body, headers=headers)

        async def start() -> None:
            self._session = ClientSession()
            app = web.Application()
            app.router.add_route("*", "/{tail:.*}", handle)
            self._runner = web.AppRunner(app)
            await self._runner.setup()
            site = web.TCPSite(self._runner, "127.0.0.1", 0)
            await site.start()
            self.port = int(site._server.sockets[0].getsockname()[1])  # type: ignore[union-attr]
            self._ready.set()

        self._session: ClientSession | None = None

        def run() -> None:
            asyncio.set_event_loop(self._loop)
            self._loop.run_until_complete(start())
            self._loop.run_forever()

        self._thread = threading.Thread(target=run, daemon=True)
        self._thread.start()
        if not self._ready.wait(10):
            raise RuntimeError("HTTP proxy did not start")

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def fault(self, f: Callable[[str, str], tuple[int, str] | None]) -> None:
        self._faults.append(f)

    def stall(self, f: Callable[[str, str], float | None]) -> None:
        """Hold matching requests for the seconds ``f`` answers before forwarding them (a slow backend)."""
        self._stalls.append(f)

    def clear_faults(self) -> None:
        self._faults.clear()
        self._stalls.clear()

    def paths(self, contains: str) -> list[str]:
        return [p for _, p in self.requests if contains in p]

    def close(self) -> None:
        async def stop() -> None:
            await self._runner.cleanup()
            if self._session is not None:
                await self._session.close()

        asyncio.run_coroutine_threadsafe(stop(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(5)
