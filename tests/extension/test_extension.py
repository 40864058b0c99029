"""The broker extension on a real broker: every ledger the broker drops is on the queue before its
metadata forgets it, the worker settles each, and the scanner then finds no orphan.

What "before" means here: a poller reads the topic's metadata (ZooKeeper) every 50 ms; for each ledger it
notes the modification time of the first version that no longer lists it. The ledger's queue message must
have been published no later than that. Without the extension there is no message at all.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import threading
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pulsar
import pytest
from kazoo.client import KazooClient
from kazoo.exceptions import NoNodeError

from testkit.stack import scan_dry_run
from tests.extension.conftest import (
    PENDING,
    ExtStack,
    worker_config_file,
    worker_on_extension_queue,
)
from tests.integration.helpers import eventually, ml_ledger_ids, produce, quiet_logger
from tests.integration.worker_harness import WorkerHarness
from worker.broker.admin import PulsarAdmin
from worker.formats.managed_ledger_metadata import parse_managed_cursor_info, parse_managed_ledger_info
from worker.formats.message import LedgerComponent, LedgerType, PendingDeleteLedgerInfo, decode
from worker.formats.topic_name import TopicName

SETTLED = {"deleted", "already_gone"}


def rest(stack: ExtStack, method: str, path: str, body: object | None = None) -> None:
    req = urllib.request.Request(
        f"{stack.admin_url}{path}",
        method=method,
        data=None if body is None else json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
    )
    urllib.request.urlopen(req, timeout=60).close()


def ml_path(topic: str) -> str:
    t = TopicName.parse(topic)
    return f"/managed-ledgers/{t.tenant}/{t.namespace}/persistent/{t.local_name}"


@dataclass
class MetadataWatch:
    """Polls a topic's ledger list and cursors in ZooKeeper; records when each ledger left them."""

    zk_hosts: str
    topic: str
    gone_at_ms: dict[int, float] = field(default_factory=dict)  # ledger id -> mtime of the version without it
    seen: set[int] = field(default_factory=set)
    cursor_seen: dict[int, str] = field(default_factory=dict)
    _stop: threading.Event = field(default_factory=threading.Event)

    def __post_init__(self) -> None:
        self.zk = KazooClient(hosts=self.zk_hosts)
        self.zk.start(timeout=15)
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _poll(self) -> None:
        path = ml_path(self.topic)
        try:
            data, stat = self.zk.get(path)
        except NoNodeError:
            # The whole topic's metadata went: every ledger seen is gone (no mtime: the poll time).
            now = time.time() * 1000
            for lid in self.seen - set(self.gone_at_ms):
                self.gone_at_ms[lid] = now
            return
        listed = set(parse_managed_ledger_info(data).ledger_ids)
        cursors: dict[int, float] = {}
        for c in self.zk.get_children(path):
            try:
                cdata, cstat = self.zk.get(f"{path}/{c}")
            except NoNodeError:
                continue
            lid = parse_managed_cursor_info(cdata).cursors_ledger_id
            if lid >= 0:
                cursors[lid] = cstat.mtime
                self.cursor_seen[lid] = c
        live = listed | set(cursors)
        for lid in self.seen - live - set(self.gone_at_ms):
            self.gone_at_ms[lid] = float(stat.mtime) if lid not in self.cursor_seen else time.time() * 1000
        self.seen |= live

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self._poll()
            except Exception:  # a znode half-written or replaced between reads: poll again
                pass
            self._stop.wait(0.05)

    def __enter__(self) -> MetadataWatch:
        self._poll()
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self.thread.join(5)
        self.zk.stop()
        self.zk.close()


def read_queue(service_url: str) -> list[tuple[PendingDeleteLedgerInfo, int]]:
    """Every message on the extension's queue (all partitions), with its publish time (ms)."""
    client = pulsar.Client(service_url, logger=quiet_logger())
    out: list[tuple[PendingDeleteLedgerInfo, int]] = []
    try:
        for p in range(4):
            reader = client.create_reader(f"{PENDING}-partition-{p}", pulsar.MessageId.earliest)
            while reader.has_message_available():
                m = reader.read_next(timeout_millis=5000)
                out.append((decode(m.data()), m.publish_timestamp()))
            reader.close()
    finally:
        client.close()
    return out


def assert_signed_by_the_broker(stack: ExtStack, topic: str) -> int:
    """Every message the broker queued for ``topic`` carries its mark: the message property ``ledger-deletion-mark``
    = ``hmac-sha256:`` + HMAC-SHA256 of the payload under the stack's key (stack.sh's BROKER_MARK_KEY_FILE)."""
    key = Path(stack.mark_key_file).read_bytes().rstrip()
    client = pulsar.Client(stack.service_url, logger=quiet_logger())
    n = 0
    try:
        for p in range(4):
            reader = client.create_reader(f"{PENDING}-partition-{p}", pulsar.MessageId.earliest)
            while reader.has_message_available():
                m = reader.read_next(timeout_millis=5000)
                if decode(m.data()).topic_name != topic:
                    continue
                expected = "hmac-sha256:" + hmac.new(key, m.data(), hashlib.sha256).hexdigest()
                assert m.properties().get("ledger-deletion-mark") == expected, m.properties()
                n += 1
            reader.close()
    finally:
        client.close()
    assert n > 0, f"nothing queued for {topic}"
    return n


def queued_for(service_url: str, topic: str) -> dict[tuple[str, int], tuple[PendingDeleteLedgerInfo, int]]:
    return {(i.ledger_type.value, i.ledger_id): (i, ts) for i, ts in read_queue(service_url) if i.topic_name == topic}


Queued = dict[tuple[str, int], tuple[PendingDeleteLedgerInfo, int]]


def assert_marked_before_forgotten(watch: MetadataWatch, queued: Queued) -> None:
    assert watch.gone_at_ms, "the broker dropped no ledger: nothing was tested"
    for lid, gone in sorted(watch.gone_at_ms.items()):
        entry = queued.get((LedgerType.LEDGER.value, lid))
        assert entry is not None, f"ledger {lid} left the metadata but is not on the queue: {sorted(queued)}"
        _, published = entry
        assert published <= gone, f"ledger {lid}: queued at {published}, metadata forgot it at {gone}"


def scan_orphans(stack: ExtStack, tmp_path: Path, namespace: str) -> list[dict[str, object]]:
    return list(scan_dry_run(worker_config_file(stack, tmp_path), namespace, timeout=300)["orphans"])


def settled(w: WorkerHarness, topic: str) -> dict[tuple[str, int], str]:
    out: dict[tuple[str, int], str] = {}
    for e in w.log_events():
        if e.get("topic") == topic and e.get("outcome") and e.get("ledger_id") is not None:
            out[(str(e.get("ledger_type")), int(e["ledger_id"]))] = str(e["outcome"])
    return out


async def wait_settled(w: WorkerHarness, topic: str, keys: set[tuple[str, int]]) -> dict[tuple[str, int], str]:
    async def check() -> dict[tuple[str, int], str]:
        s = settled(w, topic)
        return s if all(s.get(k) in SETTLED for k in keys) else {}

    return await eventually(check, timeout=90, interval=1, what=f"worker settling {sorted(keys)}")


@pytest.fixture
async def namespace(ext_stack: ExtStack, ext_admin: PulsarAdmin, unique: str) -> str:
    ns = f"public/ext-{unique}"
    await ext_admin.ensure_namespace(ns)
    await ext_admin.set_retention(ns, 0, 0)  # the broker trims whatever no cursor needs
    return ns


@pytest.fixture
def worker(ext_stack: ExtStack, tmp_path: Path, ext_harnesses: list[WorkerHarness]) -> Iterator[WorkerHarness]:
    w = worker_on_extension_queue(ext_stack, tmp_path, "ext")
    ext_harnesses.append(w)
    yield w.start()


async def test_trims_and_rollovers_are_queued_before_the_metadata_forgets(
    ext_stack: ExtStack, ext_admin: PulsarAdmin, namespace: str, worker: WorkerHarness, tmp_path: Path
) -> None:
    topic = f"persistent://{namespace}/trim"
    t = TopicName.parse(topic)
    produce(ext_stack.service_url, topic, 1)
    with MetadataWatch(ext_stack.zookeeper_hosts, topic) as watch:
        # 5 entries a ledger: rollovers, each followed by the broker's own trim (retention 0, no cursor).
        produce(ext_stack.service_url, topic, 26)
        await ext_admin.trim(t)

        async def trimmed() -> bool:
            return len(ml_ledger_ids(await ext_admin.internal_stats(t))) <= 1 and len(watch.gone_at_ms) >= 4

        await eventually(trimmed, timeout=60, what="the topic trimmed to its current ledger")
        await asyncio.sleep(0.3)
    queued = queued_for(ext_stack.service_url, topic)
    assert_marked_before_forgotten(watch, queued)
    for info, _ in queued.values():
        assert info.ledger_component is LedgerComponent.MANAGED_LEDGER
        assert info.properties.get("source") == "broker-extension"
    assert assert_signed_by_the_broker(ext_stack, topic) >= len(queued)

    outcomes = await wait_settled(worker, topic, set(queued))
    print(f"{topic}: dropped {sorted(watch.gone_at_ms)}, queued {sorted(queued)}, settled {outcomes}")
    assert set(outcomes.values()) <= SETTLED
    assert scan_orphans(ext_stack, tmp_path, namespace) == []


async def test_unsubscribe_and_topic_deletion_are_queued_before_the_metadata_forgets(
    ext_stack: ExtStack, ext_admin: PulsarAdmin, namespace: str, worker: WorkerHarness, tmp_path: Path
) -> None:
    topic = f"persistent://{namespace}/subs"
    t = TopicName.parse(topic)
    client = pulsar.Client(ext_stack.service_url, logger=quiet_logger())
    try:
        consumer = client.subscribe(topic, "sub", consumer_type=pulsar.ConsumerType.Shared)
        produce(ext_stack.service_url, topic, 17)
        for _ in range(17):
            consumer.acknowledge(consumer.receive(timeout_millis=10000))

        # Acknowledged one by one: the cursor persists its position in a ledger of its own.
        async def cursor_ledger() -> int:
            c = (await ext_admin.internal_stats(t))["cursors"]["sub"]
            return int(c.get("cursorLedger", -1)) if int(c.get("cursorLedger", -1)) > 0 else 0

        cursor_lid = await eventually(cursor_ledger, timeout=30, what="a cursor ledger")
        consumer.close()
    finally:
        client.close()

    with MetadataWatch(ext_stack.zookeeper_hosts, topic) as watch:
        rest(ext_stack, "DELETE", f"/admin/v2/{t.rest_path}/subscription/sub?force=true")
        await eventually(lambda: _gone(watch, cursor_lid), timeout=30, what="the cursor ledger dropped")
        data_ids = ml_ledger_ids(await ext_admin.internal_stats(t))
        await ext_admin.delete_topic(t)
        await eventually(lambda: _gone(watch, *data_ids), timeout=30, what="the topic's metadata removed")
        await asyncio.sleep(0.3)
    queued = queued_for(ext_stack.service_url, topic)
    assert_marked_before_forgotten(watch, queued)
    info, _ = queued[(LedgerType.LEDGER.value, cursor_lid)]
    assert info.ledger_component is LedgerComponent.MANAGED_CURSOR
    assert info.cursor_name == "sub"

    outcomes = await wait_settled(worker, topic, set(queued))
    print(f"{topic}: dropped {sorted(watch.gone_at_ms)}, queued {sorted(queued)}, settled {outcomes}")
    assert set(outcomes.values()) <= SETTLED
    assert scan_orphans(ext_stack, tmp_path, namespace) == []


async def _gone(watch: MetadataWatch, *ids: int) -> bool:
    return all(i in watch.gone_at_ms for i in ids)


async def test_offloaded_ledgers_queue_both_copies_before_the_metadata_forgets(
    ext_stack: ExtStack, ext_admin: PulsarAdmin, namespace: str, worker: WorkerHarness, tmp_path: Path
) -> None:
    from tests.integration.test_worker_offload import offload_topic

    topic = f"persistent://{namespace}/offl"
    t = TopicName.parse(topic)
    # A subscription at the start holds every ledger (retention 0) until it goes.
    await ext_admin.create_topic(t)
    await ext_admin.create_subscription(t, "hold")
    produce(ext_stack.service_url, topic, 16)
    offloaded = await offload_topic(ext_admin, t)
    assert offloaded, "nothing offloaded"
    with MetadataWatch(ext_stack.zookeeper_hosts, topic) as watch:
        rest(ext_stack, "DELETE", f"/admin/v2/{t.rest_path}/subscription/hold?force=true")
        await ext_admin.trim(t)
        await eventually(lambda: _gone(watch, *offloaded), timeout=60, what="the offloaded ledgers dropped")
        await asyncio.sleep(0.3)
    queued = queued_for(ext_stack.service_url, topic)
    assert_marked_before_forgotten(watch, queued)
    for lid in offloaded:
        info, _ = queued[(LedgerType.OFFLOAD_LEDGER.value, lid)]
        assert info.offload_context is not None and info.offload_context.driver_name == "aws-s3"

    outcomes = await wait_settled(worker, topic, set(queued))
    print(f"{topic}: dropped {sorted(watch.gone_at_ms)}, queued {sorted(queued)}, settled {outcomes}")
    assert set(outcomes.values()) <= SETTLED
    assert scan_orphans(ext_stack, tmp_path, namespace) == []
