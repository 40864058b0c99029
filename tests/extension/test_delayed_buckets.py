"""Delayed-delivery bucket ledgers on a real broker with the extension and the bucket tracker (this
instance's ``EXT_BROKER_CONF``): every bucket snapshot ledger whose cursor property goes is on the queue
before the cursor's znode forgets it, the worker settles each, and the scanner then finds no orphan.

Pulsar 4.0.8 deletes a delivered bucket's ledger before it removes the property (the worker finds those
already gone), but a subscription deleted while delayed delivery is off for its topic takes its bucket
properties with it and never deletes the ledgers: a leak, which the scanner sees and the extension queues.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path

import pulsar
import pytest
from kazoo.client import KazooClient
from kazoo.exceptions import NoNodeError

from testkit.harness import WorkerHarness
from testkit.topics import eventually
from tests.extension.conftest import ExtStack, worker_on_extension_queue
from tests.extension.helpers import SETTLED, Queued, ml_path, queued_for, rest, scan_orphans, wait_settled
from tests.integration.helpers import quiet_logger
from worker.backends.bookie_http import BookieClient
from worker.broker.admin import PulsarAdmin
from worker.core.bucket_in_use import bucket_ledgers, cursor_znode_name
from worker.formats.managed_ledger_metadata import parse_managed_cursor_info
from worker.formats.message import LedgerComponent, LedgerType
from worker.formats.topic_name import TopicName

SUBSCRIPTION = "b sub"  # a name Pulsar encodes: the cursor's znode is "b+sub", the bucket ledgers say "b sub"


@dataclass
class BucketWatch:
    """Polls one cursor's znode every 50 ms: each bucket ledger its properties named, and when it went
    (the mtime of the first version without it; the poll time once the znode is gone)."""

    zk_hosts: str
    topic: str
    subscription: str
    seen: set[int] = field(default_factory=set)
    gone_at_ms: dict[int, float] = field(default_factory=dict)
    _stop: threading.Event = field(default_factory=threading.Event)

    def __post_init__(self) -> None:
        self.path = f"{ml_path(self.topic)}/{cursor_znode_name(self.subscription)}"
        self.zk = KazooClient(hosts=self.zk_hosts)
        self.zk.start(timeout=15)
        self.thread = threading.Thread(target=self._run, daemon=True)

    @property
    def present(self) -> set[int]:
        return self.seen - set(self.gone_at_ms)

    def _poll(self) -> None:
        try:
            data, stat = self.zk.get(self.path)
        except NoNodeError:
            now = time.time() * 1000
            for lid in self.present:
                self.gone_at_ms[lid] = now
            return
        named = bucket_ledgers(parse_managed_cursor_info(data).cursor_properties)
        for lid in self.present - named:
            self.gone_at_ms[lid] = float(stat.mtime)
        self.seen |= named

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self._poll()
            except Exception:  # a znode replaced between reads: poll again
                pass
            self._stop.wait(0.05)

    def __enter__(self) -> BucketWatch:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self.thread.join(5)
        self.zk.stop()
        self.zk.close()


@pytest.fixture
async def namespace(ext_stack: ExtStack, ext_admin: PulsarAdmin, unique: str) -> str:
    ns = f"public/ext-bucket-{unique}"
    await ext_admin.ensure_namespace(ns)
    return ns


@pytest.fixture
def client(ext_stack: ExtStack) -> Iterator[pulsar.Client]:
    c = pulsar.Client(ext_stack.service_url, logger=quiet_logger())
    yield c
    c.close()


def produce_delayed(client: pulsar.Client, topic: str, n: int, delay_s: float) -> None:
    # One entry per message (no batching): 5 entries a ledger, so a bucket is sealed every ledger or so.
    producer = client.create_producer(topic, batching_enabled=False)
    for i in range(n):
        producer.send(f"m{i}".encode(), deliver_after=timedelta(seconds=delay_s))
    producer.close()


async def buckets_made(watch: BucketWatch, at_least: int) -> None:
    async def enough() -> bool:
        return len(watch.present) >= at_least

    await eventually(enough, timeout=60, what=f"{at_least} bucket snapshot ledgers named by the cursor")


def assert_buckets_queued_first(watch: BucketWatch, topic: str, queued: Queued) -> None:
    for lid, gone in sorted(watch.gone_at_ms.items()):
        entry = queued.get((LedgerType.LEDGER.value, lid))
        assert entry is not None, f"bucket ledger {lid} left its cursor but is not on the queue: {sorted(queued)}"
        info, published = entry
        assert info.ledger_component is LedgerComponent.DELAYED_INDEX_BUCKET
        assert info.cursor_name == SUBSCRIPTION and info.topic_name == topic
        assert info.properties.get("source") == "broker-extension"
        assert published <= gone, f"bucket ledger {lid}: queued at {published}, its cursor forgot it at {gone}"


async def test_delivered_buckets_are_queued_before_their_cursor_forgets_them(
    ext_stack: ExtStack, namespace: str, client: pulsar.Client, tmp_path: Path, ext_harnesses: list[WorkerHarness]
) -> None:
    topic = f"persistent://{namespace}/delayed"
    consumer = client.subscribe(topic, SUBSCRIPTION, consumer_type=pulsar.ConsumerType.Shared)
    worker = worker_on_extension_queue(ext_stack, tmp_path, "buckets")
    ext_harnesses.append(worker)
    worker.start()
    n = 40
    with BucketWatch(ext_stack.zookeeper_hosts, topic, SUBSCRIPTION) as watch:
        produce_delayed(client, topic, n, delay_s=10)
        await buckets_made(watch, 2)
        # Delivered: each bucket whose messages all went is deleted, ledger first, then its property.
        for _ in range(n):
            consumer.acknowledge(await asyncio.to_thread(consumer.receive, 60_000))

        async def all_gone() -> bool:
            return not watch.present

        await eventually(all_gone, timeout=60, what="every bucket property removed")
        await asyncio.sleep(0.3)
    consumer.close()
    assert len(watch.gone_at_ms) >= 2, f"buckets seen {sorted(watch.seen)}"
    queued = queued_for(ext_stack.service_url, topic)
    assert_buckets_queued_first(watch, topic, queued)
    keys = {(LedgerType.LEDGER.value, lid) for lid in watch.gone_at_ms}
    outcomes = await wait_settled(worker, topic, keys)
    print(f"{topic}: buckets {sorted(watch.gone_at_ms)}, settled {outcomes}")
    assert {outcomes[k] for k in keys} <= SETTLED
    assert scan_orphans(ext_stack, tmp_path, namespace) == []


async def test_buckets_of_a_subscription_deleted_with_delayed_delivery_off_are_queued_and_deleted(
    ext_stack: ExtStack,
    ext_admin: PulsarAdmin,
    ext_bookie: BookieClient,
    namespace: str,
    client: pulsar.Client,
    tmp_path: Path,
    ext_harnesses: list[WorkerHarness],
) -> None:
    topic = f"persistent://{namespace}/leaky"
    t = TopicName.parse(topic)
    consumer = client.subscribe(topic, SUBSCRIPTION, consumer_type=pulsar.ConsumerType.Shared)
    with BucketWatch(ext_stack.zookeeper_hosts, topic, SUBSCRIPTION) as watch:
        produce_delayed(client, topic, 30, delay_s=600)
        await buckets_made(watch, 2)
        consumer.close()
        # Delayed delivery off for the namespace: Pulsar then deletes a subscription without clearing its
        # buckets (PersistentTopic.asyncDeleteCursorWithClearDelayedMessage), so their ledgers leak.
        await ext_admin.set_namespace_policy(namespace, "delayedDelivery", {"active": False, "tickTime": 1000})

        async def off() -> bool:
            got = await ext_admin.topic_policy(t, "delayedDelivery", applied=True)
            return isinstance(got, dict) and got.get("active") is False

        await eventually(off, timeout=30, what="delayed delivery off for the topic")
        buckets = set(watch.present)
        rest(ext_stack, "DELETE", f"/admin/v2/{t.rest_path}/subscription/{cursor_znode_name(SUBSCRIPTION)}?force=true")

        async def dropped() -> bool:
            return buckets <= set(watch.gone_at_ms)

        await eventually(dropped, timeout=30, what="the cursor and its bucket properties removed")
    queued = queued_for(ext_stack.service_url, topic)
    assert_buckets_queued_first(watch, topic, queued)
    # The leak, as the backstop sees it: the scanner finds each bucket ledger an orphan by its own metadata.
    orphans = {int(str(o["ledger_id"])): o for o in scan_orphans(ext_stack, tmp_path, namespace)}
    assert buckets <= set(orphans), f"buckets {sorted(buckets)}, orphans {sorted(orphans)}"
    assert {orphans[lid]["component"] for lid in buckets} == {LedgerComponent.DELAYED_INDEX_BUCKET.value}

    worker = worker_on_extension_queue(ext_stack, tmp_path, "leaky")
    ext_harnesses.append(worker)
    worker.start()
    keys = {(LedgerType.LEDGER.value, lid) for lid in buckets}
    outcomes = await wait_settled(worker, topic, keys)
    print(f"{topic}: buckets {sorted(buckets)}, settled {outcomes}")
    assert {outcomes[k] for k in keys} == {"deleted"}, "Pulsar itself deleted none of them: the worker must"
    for lid in buckets:
        assert await ext_bookie.get_metadata(lid) is None
    assert scan_orphans(ext_stack, tmp_path, namespace) == []
