"""The worker on orphans made the way production makes them: Pulsar's own ledgers whose topic metadata
forgot them (testkit/orphans.py), not ledgers we forged."""

from __future__ import annotations

import pulsar
import pytest
from kazoo.client import KazooClient

from testkit.harness import ml_info as ml
from testkit.orphans import delete_topic_metadata_keep_ledgers, drop_ledgers_from_metadata, quiesce
from testkit.topics import count_from_earliest, eventually, ml_ledger_ids, produce
from tests.conftest import Stack
from tests.integration.conftest import WorkerFactory
from tests.integration.helpers import quiet_logger
from worker.backends.bookie_http import BookieClient
from worker.broker.admin import PulsarAdmin
from worker.formats.message import LedgerComponent, LedgerType, PendingDeleteLedgerInfo
from worker.formats.topic_name import TopicName

pytestmark = pytest.mark.integration


async def test_orphans_of_a_deleted_topic_go_by_the_direct_route(
    stack: Stack, test_namespace: str, unique: str, admin: PulsarAdmin, bookie: BookieClient, make_worker: WorkerFactory
) -> None:
    topic = f"persistent://{test_namespace}/dead-{unique}"
    produce(stack.service_url, topic, 16)
    data_ids = ml_ledger_ids(await admin.internal_stats(TopicName.parse(topic)))
    orphaned = await delete_topic_metadata_keep_ledgers(admin, stack.zookeeper_hosts, topic)
    assert set(data_ids) <= set(orphaned)
    for lid in data_ids:
        assert await bookie.get_metadata(lid) is not None

    w = make_worker(f"dead-{unique}")
    for lid in data_ids:
        w.send(ml(topic, lid))

    async def all_gone() -> bool:
        return all([await bookie.get_metadata(i) is None for i in data_ids])

    await eventually(all_gone, timeout=60, what="the dead topic's ledgers deleted")

    async def counted() -> bool:
        return w.metric("ledger_deletion_acked_total") >= len(data_ids)

    await eventually(counted, timeout=30, what="acks")
    # An empty current ledger may have been cleaned by the broker itself; every one was settled.
    assert w.metric("ledger_deletion_deleted_total", route="direct", ledger_type="LEDGER") == len(data_ids)
    assert w.metric("ledger_deletion_deleted_total", result="deleted") >= len(data_ids) - 1
    assert w.metric("ledger_deletion_rejected_total") == 0


async def test_in_use_ledger_is_retried_until_its_topic_drops_it(
    stack: Stack, test_namespace: str, unique: str, admin: PulsarAdmin, bookie: BookieClient, make_worker: WorkerFactory
) -> None:
    topic = f"persistent://{test_namespace}/inuse-{unique}"
    produce(stack.service_url, topic, 16)
    t = TopicName.parse(topic)
    ids = ml_ledger_ids(await admin.internal_stats(t))
    victim = ids[0]
    w = make_worker(f"inuse-{unique}", worker={"in_use_retry_s": 3, "max_attempts": 100})
    w.send(ml(topic, victim))

    async def retried_twice() -> bool:
        return w.metric("ledger_deletion_in_use_total") >= 2 and w.metric("ledger_deletion_retried_total") >= 2

    await eventually(retried_twice, timeout=60, what="in-use retries")
    assert await bookie.get_metadata(victim) is not None, "an in-use ledger was deleted"
    assert w.metric("ledger_deletion_deleted_total") == 0

    # Phase 1 completes: the topic's metadata drops the ledger (and the storage step is left to us).
    await drop_ledgers_from_metadata(admin, stack.zookeeper_hosts, topic, [victim])

    async def deleted() -> bool:
        return await bookie.get_metadata(victim) is None

    await eventually(deleted, timeout=60, what="deletion once the topic dropped it")
    assert w.metric("ledger_deletion_deleted_total", route="owner", result="deleted") == 1
    # The topic's remaining data is intact: 16 messages minus the victim's 5.
    assert count_from_earliest(stack.service_url, topic) == 11


async def test_cursor_and_schema_ledgers_are_matched_and_deleted(
    stack: Stack, test_namespace: str, unique: str, admin: PulsarAdmin, bookie: BookieClient, make_worker: WorkerFactory
) -> None:
    topic = f"persistent://{test_namespace}/cs-{unique}"
    t = TopicName.parse(topic)
    sub = f"sub-{unique}"
    client = pulsar.Client(stack.service_url, logger=quiet_logger())
    try:
        consumer = client.subscribe(
            topic, sub, consumer_type=pulsar.ConsumerType.Shared, schema=pulsar.schema.StringSchema()
        )
        producer = client.create_producer(topic, schema=pulsar.schema.StringSchema(), batching_enabled=False)
        for i in range(7):
            producer.send(f"m{i}")
        for _ in range(7):
            consumer.acknowledge(consumer.receive(timeout_millis=10_000))
        producer.close()
        consumer.close()
    finally:
        client.close()
    await quiesce(admin, t)
    stats = await admin.internal_stats(t)
    cursor_ledger = int(stats["cursors"][sub]["cursorLedger"])
    schema_ledgers = [int(s["ledgerId"]) for s in stats["schemaLedgers"]]
    assert cursor_ledger >= 0 and schema_ledgers
    schema_id = t.schema_name
    md = await bookie.get_metadata(schema_ledgers[0])
    assert md is not None and md.custom_metadata["pulsar/schemaId"] == schema_id

    w = make_worker(f"cs-{unique}", worker={"in_use_retry_s": 3, "max_attempts": 100})
    cursor_msg = PendingDeleteLedgerInfo(
        topic, LedgerComponent.MANAGED_CURSOR, LedgerType.LEDGER, cursor_ledger, cursor_name=sub
    )
    schema_msgs = [
        PendingDeleteLedgerInfo(topic, LedgerComponent.SCHEMA_STORAGE, LedgerType.LEDGER, lid, schema_id=schema_id)
        for lid in schema_ledgers
    ]
    # While the topic lives, both are in use.
    w.send(cursor_msg)
    for m in schema_msgs:
        w.send(m)

    async def in_use() -> bool:
        return w.metric("ledger_deletion_in_use_total") >= 1 + len(schema_msgs)

    await eventually(in_use, timeout=60, what="in-use verdicts")
    assert await bookie.get_metadata(cursor_ledger) is not None

    # The topic's metadata goes, its cursor ledger stays: an orphan cursor ledger, matched on
    # pulsar/cursor. The schema is still registered, so its ledgers stay in use...
    orphaned = await delete_topic_metadata_keep_ledgers(admin, stack.zookeeper_hosts, topic)
    assert cursor_ledger in orphaned

    async def cursor_gone() -> bool:
        return await bookie.get_metadata(cursor_ledger) is None

    await eventually(cursor_gone, timeout=60, what="the orphan cursor ledger deleted")
    for lid in schema_ledgers:
        assert await bookie.get_metadata(lid) is not None, "a registered schema's ledger was deleted"

    # ...until the registry forgets the schema (its storage step lost): then they are orphans too.
    zk = KazooClient(hosts=stack.zookeeper_hosts)
    zk.start(timeout=15)
    try:
        zk.delete(f"/schemas/{t.schema_name}", recursive=True)
    finally:
        zk.stop()
        zk.close()

    async def schemas_gone() -> bool:
        return all([await bookie.get_metadata(i) is None for i in schema_ledgers])

    await eventually(schemas_gone, timeout=60, what="the orphan schema ledgers deleted")
    assert w.metric("ledger_deletion_rejected_total") == 0
    assert w.metric("ledger_deletion_deleted_total", result="deleted") == 1 + len(schema_ledgers)


async def test_zookeeper_delete_path(
    stack: Stack, test_namespace: str, unique: str, admin: PulsarAdmin, bookie: BookieClient, make_worker: WorkerFactory
) -> None:
    topic = f"persistent://{test_namespace}/zk-{unique}"
    produce(stack.service_url, topic, 11)
    ids = ml_ledger_ids(await admin.internal_stats(TopicName.parse(topic)))
    victims = ids[:2]
    await drop_ledgers_from_metadata(admin, stack.zookeeper_hosts, topic, victims)
    w = make_worker(f"zk-{unique}", bookkeeper={"delete_via": "zookeeper"})
    for lid in victims:
        w.send(ml(topic, lid))

    async def deleted() -> bool:
        return all([await bookie.get_metadata(i) is None for i in victims])

    await eventually(deleted, timeout=60, what="deletion through ZooKeeper")
    assert w.metric("ledger_deletion_deleted_total", result="deleted") == 2
    assert count_from_earliest(stack.service_url, topic) == 1


async def test_partitioned_topic_owner_and_direct_routes(
    stack: Stack, test_namespace: str, unique: str, admin: PulsarAdmin, bookie: BookieClient, make_worker: WorkerFactory
) -> None:
    base = TopicName.parse(f"persistent://{test_namespace}/parted-{unique}")
    await admin.create_partitioned_topic(base, 2)
    produce(stack.service_url, str(base), 24)  # round-robin: both partitions roll ledgers
    p0, p1 = base.partition(0), base.partition(1)
    ids0 = ml_ledger_ids(await admin.internal_stats(p0))
    ids1 = ml_ledger_ids(await admin.internal_stats(p1))
    # Partition 0 forgets its first ledger (owner route); in partition 1 the first ledger is live.
    await drop_ledgers_from_metadata(admin, stack.zookeeper_hosts, p0, [ids0[0]])
    w = make_worker(f"parted-{unique}", worker={"in_use_retry_s": 1, "max_attempts": 3})
    w.send(ml(str(p0), ids0[0]))
    w.send(ml(str(p1), ids1[0]))
    # Announced under the partitioned base name, a partition's ledger does not prove its identity (its
    # metadata names the partition's managed ledger): rejected at once, identity being judged before use.
    w.send(ml(str(base), ids1[0]))

    async def settled() -> bool:
        return w.metric("ledger_deletion_deleted_total") >= 1 and w.metric("ledger_deletion_dlq_total") >= 2

    await eventually(settled, timeout=90, what="one deletion, one in-use and one rejected dead letter")
    assert await bookie.get_metadata(ids0[0]) is None
    assert await bookie.get_metadata(ids1[0]) is not None
    assert w.metric("ledger_deletion_deleted_total", route="owner", result="deleted") == 1
    assert w.metric("ledger_deletion_dlq_total", reason="in_use") == 1
    assert w.metric("ledger_deletion_rejected_total", reason="topic_mismatch") == 1
