"""Orphans made on the real stack, and the ZooKeeper view of them: nothing here is mocked."""

from __future__ import annotations

import pulsar
import pytest

from testkit.orphans import (
    delete_topic_metadata_keep_ledgers,
    drop_ledgers_from_metadata,
    partition_count,
    quiesce,
)
from testkit.topics import eventually, ml_ledger_ids, produce
from tests.conftest import Stack
from tests.integration.helpers import quiet_logger
from worker.backends.bookie_http import BookieClient
from worker.backends.bookkeeper_store import LedgerMetadataChanged
from worker.backends.stores import Stores
from worker.broker.admin import PulsarAdmin, TopicNotFound
from worker.errors import BackendError
from worker.formats.metadata_paths import hierarchical_ledger_path
from worker.formats.topic_name import TopicName

pytestmark = pytest.mark.integration


def send(service_url: str, topic: TopicName, payloads: list[bytes]) -> dict[bytes, int]:
    """Send one entry per payload; returns payload -> the ledger that stored it."""
    client = pulsar.Client(service_url, operation_timeout_seconds=30, logger=quiet_logger())
    try:
        producer = client.create_producer(str(topic), batching_enabled=False)
        where = {p: producer.send(p).ledger_id() for p in payloads}
        producer.close()
        return where
    finally:
        client.close()


def read_all(service_url: str, topic: TopicName, until: bytes) -> list[bytes]:
    """Everything a reader from the earliest position gets, up to and including ``until``."""
    client = pulsar.Client(service_url, operation_timeout_seconds=30, logger=quiet_logger())
    try:
        reader = client.create_reader(str(topic), pulsar.MessageId.earliest)
        got: list[bytes] = []
        while not got or got[-1] != until:
            got.append(reader.read_next(timeout_millis=20_000).data())
        reader.close()
        return got
    finally:
        client.close()


def subscribe_and_ack(service_url: str, topic: TopicName, sub: str, n: int) -> None:
    """A subscription whose position lives in a cursor ledger (acks move the mark-delete position)."""
    client = pulsar.Client(service_url, operation_timeout_seconds=30, logger=quiet_logger())
    try:
        consumer = client.subscribe(str(topic), sub, consumer_type=pulsar.ConsumerType.Shared)
        produce(service_url, str(topic), n)
        for _ in range(n):
            consumer.acknowledge(consumer.receive(timeout_millis=10_000))
        consumer.close()
    finally:
        client.close()


async def cursor_ledger(admin: PulsarAdmin, topic: TopicName, sub: str) -> int:
    """The subscription's cursor ledger once acks stopped moving it (it rolls every 5 mark-deletes)."""
    await quiesce(admin, topic)
    lid = int((await admin.internal_stats(topic))["cursors"][sub]["cursorLedger"])
    assert lid >= 0, f"{sub} has no cursor ledger"
    return lid


async def assert_pulsar_ledger(
    bookie: BookieClient, ledger_id: int, topic: TopicName, cursor: str | None = None
) -> None:
    md = await bookie.get_metadata(ledger_id)
    assert md is not None, f"ledger {ledger_id} is gone from BookKeeper"
    assert md.custom_metadata["application"] == "pulsar"
    assert md.custom_metadata["component"] == "managed-ledger"
    assert md.custom_metadata["pulsar/managed-ledger"] == topic.managed_ledger_name
    if cursor is not None:
        assert md.custom_metadata["pulsar/cursor"] == cursor


# ---- (a) ledgers dropped from a live topic's metadata --------------------------------------------------


async def test_dropped_ledgers_are_orphans_and_the_topic_still_works(
    stack: Stack, test_namespace: str, unique: str, admin: PulsarAdmin, bookie: BookieClient
) -> None:
    topic = TopicName.parse(f"persistent://{test_namespace}/drop-{unique}")
    where = send(stack.service_url, topic, [f"m{i}".encode() for i in range(20)])  # 4 ledgers of 5
    stats = await admin.internal_stats(topic)
    ids = ml_ledger_ids(stats)
    # The current ledger may be empty, and the broker deletes an empty last ledger when it loads the topic.
    with_data = {int(ld["ledgerId"]) for ld in stats["ledgers"] if int(ld["entries"]) > 0}
    first, middle = ids[0], ids[1]
    assert {first, middle} <= set(where.values())

    orphaned = await drop_ledgers_from_metadata(admin, stack.zookeeper_hosts, topic, [first, middle])

    assert orphaned == sorted([first, middle])
    listed = ml_ledger_ids(await admin.internal_stats(topic))
    assert first not in listed and middle not in listed
    assert with_data - {first, middle} <= set(listed)  # nothing else was lost
    for lid in orphaned:
        await assert_pulsar_ledger(bookie, lid, topic)

    # Still a working topic: readers skip the ledgers it no longer lists.
    more = send(stack.service_url, topic, [b"after-0", b"after-1"])
    got = read_all(stack.service_url, topic, until=b"after-1")
    kept = [p for p, lid in where.items() if lid not in orphaned]
    assert got == kept + list(more)


async def test_drop_refuses_ids_the_topic_does_not_list(
    stack: Stack, test_namespace: str, unique: str, admin: PulsarAdmin
) -> None:
    topic = TopicName.parse(f"persistent://{test_namespace}/drop-bad-{unique}")
    produce(stack.service_url, str(topic), 6)
    with pytest.raises(ValueError, match="does not list"):
        await drop_ledgers_from_metadata(admin, stack.zookeeper_hosts, topic, [10**12])


# ---- (b) a topic deleted from the metadata, its ledgers kept ---------------------------------------------


async def test_deleted_topic_leaves_its_data_and_cursor_ledgers(
    stack: Stack, test_namespace: str, unique: str, admin: PulsarAdmin, bookie: BookieClient
) -> None:
    topic = TopicName.parse(f"persistent://{test_namespace}/gone-{unique}")
    sub = f"sub-{unique}"
    subscribe_and_ack(stack.service_url, topic, sub, 12)
    data_ids = ml_ledger_ids(await admin.internal_stats(topic))
    cursor_id = await cursor_ledger(admin, topic, sub)

    orphaned = await delete_topic_metadata_keep_ledgers(admin, stack.zookeeper_hosts, topic)

    assert set(data_ids) | {cursor_id} <= set(orphaned)
    with pytest.raises(TopicNotFound):
        await admin.internal_stats(topic)
    assert str(topic) not in await admin.list_topics(test_namespace)
    for lid in data_ids:
        await assert_pulsar_ledger(bookie, lid, topic)
    await assert_pulsar_ledger(bookie, cursor_id, topic, cursor=sub)


async def test_deleted_partitioned_topic_leaves_every_partitions_ledgers(
    stack: Stack, test_namespace: str, unique: str, admin: PulsarAdmin, bookie: BookieClient
) -> None:
    topic = TopicName.parse(f"persistent://{test_namespace}/gone-part-{unique}")
    await admin.create_partitioned_topic(topic, 2)
    produce(stack.service_url, str(topic), 20)
    per_partition = {p: ml_ledger_ids(await admin.internal_stats(p)) for p in (topic.partition(0), topic.partition(1))}

    orphaned = await delete_topic_metadata_keep_ledgers(admin, stack.zookeeper_hosts, topic)

    assert await partition_count(admin, topic) == 0
    listed = await admin.list_topics(test_namespace)
    for p, ids in per_partition.items():
        assert str(p) not in listed
        assert set(ids) <= set(orphaned)
        for lid in ids:
            await assert_pulsar_ledger(bookie, lid, p)


# ---- (c) deleting an orphan through ZooKeeper -------------------------------------------------------------


async def test_zookeeper_delete_removes_an_orphan_once(
    stack: Stack, test_namespace: str, unique: str, admin: PulsarAdmin, bookie: BookieClient
) -> None:
    topic = TopicName.parse(f"persistent://{test_namespace}/zkdel-{unique}")
    produce(stack.service_url, str(topic), 16)
    ids = ml_ledger_ids(await admin.internal_stats(topic))
    victim, neighbour = ids[0], ids[1]
    await drop_ledgers_from_metadata(admin, stack.zookeeper_hosts, topic, [victim])

    zk = Stores(f"zk:{stack.zookeeper_hosts}")
    await zk.start()
    deleter = zk.bookkeeper
    try:
        path = await zk.bookkeeper.ledger_path(victim)
        assert path == hierarchical_ledger_path(victim)
        assert await zk.kv.exists(path) is not None  # the layout we compute is where BookKeeper wrote it
        assert await zk.bookkeeper.ledger_metadata_exists(victim)

        got = await deleter.read(victim)
        assert got is not None
        md, version = got
        assert md.custom_metadata["pulsar/managed-ledger"] == topic.managed_ledger_name
        assert md.custom_metadata == (await bookie.get_metadata(victim)).custom_metadata  # type: ignore[union-attr]
        assert await deleter.delete(victim, version) is True
        assert not await zk.bookkeeper.ledger_metadata_exists(victim)

        async def bookie_forgot() -> bool:
            return await bookie.get_metadata(victim) is None

        await eventually(bookie_forgot, timeout=30, what=f"the bookie to forget ledger {victim}")
        assert victim not in await bookie.list_ledger_ids()

        assert await deleter.delete(victim) is False  # already gone: a no-op
        assert await bookie.get_metadata(neighbour) is not None
        assert neighbour in ml_ledger_ids(await admin.internal_stats(topic))
    finally:
        await zk.close()


async def test_versioned_delete_refuses_changed_metadata(
    stack: Stack, test_namespace: str, unique: str, admin: PulsarAdmin, bookie: BookieClient
) -> None:
    topic = TopicName.parse(f"persistent://{test_namespace}/zkver-{unique}")
    produce(stack.service_url, str(topic), 11)
    victim = ml_ledger_ids(await admin.internal_stats(topic))[0]
    await drop_ledgers_from_metadata(admin, stack.zookeeper_hosts, topic, [victim])

    async with Stores(f"zk:{stack.zookeeper_hosts}") as zk:
        version = await zk.bookkeeper.ledger_metadata_version(victim)
        assert version is not None
        with pytest.raises(LedgerMetadataChanged):
            await zk.bookkeeper.delete_ledger_metadata(victim, expected_version=version + 1)
        assert await zk.bookkeeper.ledger_metadata_exists(victim)
        assert await bookie.get_metadata(victim) is not None
        assert await zk.bookkeeper.delete_ledger_metadata(victim, expected_version=version) is True
        assert await zk.bookkeeper.delete_ledger_metadata(victim, expected_version=version) is False


# ---- the ZooKeeper reader against the broker's own view -------------------------------------------------


async def test_read_topic_matches_the_brokers_view(
    stack: Stack, test_namespace: str, unique: str, admin: PulsarAdmin
) -> None:
    topic = TopicName.parse(f"persistent://{test_namespace}/zkread-{unique}")
    sub = f"sub-{unique}"
    subscribe_and_ack(stack.service_url, topic, sub, 12)
    cursor_id = await cursor_ledger(admin, topic, sub)
    info = await admin.internal_info(topic)

    async with Stores(f"zk:{stack.zookeeper_hosts}") as zk:
        md = await zk.pulsar.stored_topic(topic)
        assert md is not None
        assert list(md.ledger_ids) == [int(ld["ledgerId"]) for ld in info["ledgers"]]
        for ours, theirs in zip(md.managed_ledger.ledgers, info["ledgers"], strict=True):
            assert ours.entries == theirs.get("entries") and ours.size == theirs.get("size")
            assert not ours.offloaded and not theirs.get("isOffloaded")
        assert md.cursor_ledger_ids == {sub: cursor_id}
        assert md.version == info["version"]

        assert await zk.pulsar.stored_topic(TopicName.parse(f"persistent://{test_namespace}/never-{unique}")) is None


async def test_unreachable_zookeeper_is_a_backend_error() -> None:
    zk = Stores("zk:127.0.0.1:1", timeout_s=1.0)  # nothing listens on port 1
    with pytest.raises(BackendError, match="zookeeper"):
        await zk.start()
