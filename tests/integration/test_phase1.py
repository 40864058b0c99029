"""Phase 1 against the real stack: the producer side of the queue and PIP-186's batch helper."""

from __future__ import annotations

import time

import pulsar
import pytest

from testkit.orphans import drop_ledgers_from_metadata
from testkit.topics import ml_ledger_ids, produce
from tests.conftest import Stack
from tests.integration.conftest import WorkerFactory
from tests.integration.helpers import ml_info, quiet_logger, read_pending, settings_of, worker_config
from worker.broker.admin import PulsarAdmin
from worker.formats.message import decode
from worker.formats.topic_name import TopicName
from worker.metrics import Metrics
from worker.operations.phase1 import MetadataUpdateFailed, PendingDeleteSender

pytestmark = pytest.mark.integration

# A property this large makes the broker-side limit (5 MB, maxMessageSize) refuse the message for real.
TOO_BIG = {"pad": "x" * (6 * 1024 * 1024)}


async def test_send_creates_topics_and_subscription_then_delivers_after_the_delay(
    stack: Stack, test_namespace: str, unique: str, admin: PulsarAdmin, make_worker: WorkerFactory
) -> None:
    h = worker_config(make_worker, f"p1-send-{unique}", worker={"send_delay_s": 3})
    s = settings_of(h)
    pending = TopicName.parse(s.topics.pending)
    assert await admin.partitions(pending) == 0  # nothing exists before the first send

    info = ml_info(f"persistent://{test_namespace}/t-{unique}", 10**12 + 1, properties={"k": "v"})
    metrics = Metrics()
    async with PendingDeleteSender(s, admin=admin, metrics=metrics) as sender:
        sent_at = time.time()
        await sender.send_pending_delete(info)

    assert metrics.registry.get_sample_value("ledger_deletion_sent_total") == 1.0
    assert await admin.partitions(pending) == s.topics.parallelism
    assert s.topics.subscription in await admin.subscriptions(pending.partition(0))
    assert s.topics.subscription in await admin.subscriptions(TopicName.parse(s.topics.retry))
    assert s.topics.dlq_replay_subscription in await admin.subscriptions(TopicName.parse(s.topics.dlq))

    client = pulsar.Client(stack.service_url, logger=quiet_logger())
    try:
        consumer = client.subscribe(s.topics.pending, s.topics.subscription, consumer_type=pulsar.ConsumerType.Shared)
        msg = consumer.receive(timeout_millis=30_000)
        waited = time.time() - sent_at
        consumer.acknowledge(msg)
        consumer.close()
    finally:
        client.close()
    assert decode(msg.data()) == info
    assert waited >= 3.0, f"delivered after {waited:.2f}s, before send_delay_s"


async def test_batch_keeps_the_ledger_whose_send_failed(
    stack: Stack, test_namespace: str, unique: str, admin: PulsarAdmin, make_worker: WorkerFactory
) -> None:
    topic = TopicName.parse(f"persistent://{test_namespace}/batch-{unique}")
    produce(stack.service_url, str(topic), 20)
    ids = ml_ledger_ids(await admin.internal_stats(topic))
    first, second, third = ids[0], ids[1], ids[2]
    infos = [
        ml_info(str(topic), first),
        ml_info(str(topic), second, properties=TOO_BIG),  # the broker refuses this one
        ml_info(str(topic), third),
    ]
    s = settings_of(worker_config(make_worker, f"p1-batch-{unique}"))
    calls: list[list[int]] = []

    async def update_metadata(remaining: list[int]) -> None:
        # The real metadata write: the topic's managed-ledger list in ZooKeeper loses what was sent.
        calls.append(remaining)
        await drop_ledgers_from_metadata(admin, stack.zookeeper_hosts, topic, set(ids) - set(remaining))

    metrics = Metrics()
    async with PendingDeleteSender(s, admin=admin, metrics=metrics) as sender:
        result = await sender.send_batch(ids, infos, update_metadata)

    assert calls == [[lid for lid in ids if lid not in (first, third)]]
    assert result.removed == (first, third)
    assert result.kept == (second,)
    assert [f.info.ledger_id for f in result.failed] == [second]
    assert "MessageTooBig" in str(result.failed[0].cause)
    assert result.metadata_updated
    assert metrics.registry.get_sample_value("ledger_deletion_sent_total") == 2.0

    listed = ml_ledger_ids(await admin.internal_stats(topic))
    assert second in listed, "the ledger whose send failed must stay in the topic's metadata"
    assert first not in listed and third not in listed
    queued = {i.ledger_id for i in read_pending(stack, s)}
    assert queued == {first, third}


async def test_batch_with_no_successful_send_writes_nothing(
    test_namespace: str, unique: str, admin: PulsarAdmin, make_worker: WorkerFactory
) -> None:
    s = settings_of(worker_config(make_worker, f"p1-none-{unique}"))
    calls: list[list[int]] = []
    topic = f"persistent://{test_namespace}/none-{unique}"
    async with PendingDeleteSender(s, admin=admin, metrics=Metrics()) as sender:
        result = await sender.send_batch([1, 2], [ml_info(topic, 1, properties=TOO_BIG)], calls.append)
    assert calls == []
    assert result.kept == (1,) and result.remaining == (1, 2) and not result.metadata_updated


async def test_a_failing_metadata_write_is_reported_with_what_was_sent(
    stack: Stack, test_namespace: str, unique: str, admin: PulsarAdmin, make_worker: WorkerFactory
) -> None:
    s = settings_of(worker_config(make_worker, f"p1-cbfail-{unique}"))
    topic = f"persistent://{test_namespace}/cbfail-{unique}"

    def update_metadata(remaining: list[int]) -> None:
        raise RuntimeError("metadata store unavailable")

    async with PendingDeleteSender(s, admin=admin, metrics=Metrics()) as sender:
        with pytest.raises(MetadataUpdateFailed) as err:
            await sender.send_batch([5, 6, 7], [ml_info(topic, 5), ml_info(topic, 6)], update_metadata)
    assert err.value.result.removed == (5, 6)
    assert err.value.result.remaining == (7,)
    assert not err.value.result.metadata_updated
    # The messages are durable anyway: the worker will find the ledgers still listed and retry.
    assert {i.ledger_id for i in read_pending(stack, s)} == {5, 6}
