"""The broker extension on a real broker: every ledger the broker drops is on the queue before its
metadata forgets it, the worker settles each, and the scanner then finds no orphan.

What "before" means here: a poller reads the topic's metadata (ZooKeeper) every 50 ms; for each ledger it
notes the modification time of the first version that no longer lists it. The ledger's queue message must
have been published no later than that. Without the extension there is no message at all.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pulsar
import pytest

from testkit.harness import WorkerHarness
from testkit.topics import eventually, ml_ledger_ids, produce
from tests.extension.conftest import ExtStack, worker_on_extension_queue
from tests.extension.helpers import (
    SETTLED,
    MetadataWatch,
    assert_marked_before_forgotten,
    assert_signed_by_the_broker,
    queued_for,
    rest,
    scan_orphans,
    wait_settled,
)
from tests.integration.helpers import quiet_logger
from tests.integration.offload_helpers import offload_topic
from worker.broker.admin import PulsarAdmin
from worker.formats.message import LedgerComponent, LedgerType
from worker.formats.topic_name import TopicName


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
        assert info.properties.get("pulsar_version") == ext_stack.pulsar_version
    assert assert_signed_by_the_broker(ext_stack, topic) >= len(queued)

    outcomes = await wait_settled(worker, topic, set(queued))
    print(f"{topic}: dropped {sorted(watch.gone_at_ms)}, queued {sorted(queued)}, settled {outcomes}")
    assert set(outcomes.values()) <= SETTLED
    # The worker says whose deletions it decoded: this broker's Pulsar line. At least these (the queue may hold
    # other topics' deletions too, and ones an older jar wrote without a version: writer="unknown").
    decoded = {"source": "broker-extension", "writer": ext_stack.pulsar_version}

    async def counted() -> float:
        n = worker.metric("ledger_deletion_decoded_total", **decoded)
        return n if n >= len(queued) else 0

    await eventually(counted, timeout=10, what=f"ledger_deletion_decoded_total{decoded} >= {len(queued)}")
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
