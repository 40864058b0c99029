"""Open ledgers on the real stack: the worker recovers and deletes an open cursor or data ledger its live
topic does not name, and never touches a live cursor's current ledger nor the topic's current ledger (the
topic keeps writing and reading afterwards)."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

import pulsar
import pytest

from testkit.harness import LedgerWriter, WorkerHarness, create_ledgers, ml_info, pulsar_ml_metadata, quiet_logger
from testkit.topics import eventually, ml_ledger_ids
from tests.conftest import Stack
from tests.integration.conftest import WorkerFactory
from worker.backends.stores import Stores
from worker.broker.admin import PulsarAdmin
from worker.formats import ledger_metadata_record as record
from worker.formats.message import LedgerComponent, LedgerType, PendingDeleteLedgerInfo
from worker.formats.topic_name import TopicName

pytestmark = pytest.mark.integration


def consume_and_ack(consumer: pulsar.Consumer, n: int) -> None:
    for _ in range(n):
        consumer.acknowledge(consumer.receive(timeout_millis=30_000))


def consume_and_ack_once(consumer: pulsar.Consumer, n: int) -> None:
    """Reads n messages and acknowledges them with one cumulative ack: a single mark-delete, persisted at once."""
    last = None
    for _ in range(n):
        last = consumer.receive(timeout_millis=30_000)
    assert last is not None
    consumer.acknowledge_cumulative(last)


def produce(stack: Stack, topic: str, n: int) -> None:
    client = pulsar.Client(stack.service_url, logger=quiet_logger(), operation_timeout_seconds=30)
    try:
        producer = client.create_producer(topic, batching_enabled=False)
        for i in range(n):
            producer.send(f"m-{i}".encode())
        producer.close()
    finally:
        client.close()


async def record_of(zk: Stores, ledger_id: int) -> tuple[int, int] | None:
    """The ledger's state and its record's version; None when it is gone."""
    got = await zk.kv.get(await zk.bookkeeper.ledger_path(ledger_id))
    return None if got is None else (record.decode(got[0]).state, int(got[1].version))


def cursor_info(topic: str, cursor: str, ledger_id: int) -> PendingDeleteLedgerInfo:
    return PendingDeleteLedgerInfo(topic, LedgerComponent.MANAGED_CURSOR, LedgerType.LEDGER, ledger_id, cursor)


async def test_open_ledgers_nothing_names_are_recovered_and_deleted_and_the_live_ones_never_fenced(
    stack: Stack, unique: str, test_namespace: str, admin: PulsarAdmin, make_worker: WorkerFactory
) -> None:
    topic = f"persistent://{test_namespace}/open-ledgers-{unique}"
    sub = f"sub-{unique}"
    t = TopicName.parse(topic)
    # A live topic with a live cursor, its consumer connected throughout: the acknowledgement gives the cursor
    # a ledger of its own.
    client = pulsar.Client(stack.service_url, logger=quiet_logger(), operation_timeout_seconds=30)
    try:
        consumer = client.subscribe(topic, sub, initial_position=pulsar.InitialPosition.Earliest)
        await asyncio.to_thread(produce, stack, topic, 12)
        await asyncio.to_thread(consume_and_ack_once, consumer, 12)
        # The broker itself switches every cursor's ledger at its consumed-ledgers check (every
        # retentionCheckIntervalInSeconds, 120 s) when the cursor rollover time is 0, as on this stack. A switch
        # inside a round replaces the live cursor's ledger under the test: that round proves nothing, and the
        # next one starts just after the switch, with the whole interval ahead of it.
        for attempt in range(3):
            live_cursor = await _settled_cursor_ledger(admin, t, sub)
            round_ = await _open_ledgers_nothing_names(
                stack, admin, f"{unique}-{attempt}", make_worker, t, sub, live_cursor
            )
            if await _cursor_ledger(admin, t, sub) == live_cursor:
                try:
                    await round_.check()
                    break
                except AssertionError:
                    if await _cursor_ledger(admin, t, sub) == live_cursor:
                        raise
            print(f"round {attempt}: the broker switched the cursor's ledger {live_cursor} inside it; again")
            round_.worker.stop()
        else:
            raise AssertionError("the broker switched the cursor's ledger inside each of 3 rounds")

        # The topic writes to its current ledger and its cursor persists to its own after the worker ran.
        await asyncio.to_thread(produce, stack, topic, 3)
        await asyncio.to_thread(consume_and_ack, consumer, 3)
        await eventually(
            lambda: _caught_up(admin, t, sub, round_.current), what="the topic written and read after the worker ran"
        )
    finally:
        client.close()


async def _cursor_ledger(admin: PulsarAdmin, t: TopicName, sub: str) -> int:
    return int((await admin.internal_stats(t))["cursors"][sub]["cursorLedger"])


async def _settled_cursor_ledger(admin: PulsarAdmin, t: TopicName, sub: str) -> int:
    """The cursor's ledger once it has stayed the same for three looks a second apart."""
    seen: list[int] = []

    async def settled() -> int | None:
        seen.append(await _cursor_ledger(admin, t, sub))
        return seen[-1] if seen[-1] >= 0 and seen[-3:] == [seen[-1]] * 3 else None

    lid = await eventually(settled, interval=1, what="the cursor's ledger settles")
    assert lid is not None
    return lid


def _position(s: str) -> tuple[int, int]:
    ledger, entry = s.split(":")
    return int(ledger), int(entry)


async def _caught_up(admin: PulsarAdmin, t: TopicName, sub: str, current: int) -> bool:
    stats = await admin.internal_stats(t)
    cursor = stats["cursors"][sub]
    # Everything read is acknowledged: the mark-delete position at the last entry (Pulsar 4.0), or past it at the
    # start of an empty current ledger (5.0: "<id>:-1").
    acked = _position(cursor["markDeletePosition"]) >= _position(stats["lastConfirmedEntry"])
    return current in ml_ledger_ids(stats) and acked


@dataclass
class _Round:
    """One worker run over two orphans and the topic's two live ledgers, with what it must have left."""

    worker: WorkerHarness
    zookeeper_hosts: str
    before: dict[int, tuple[int, int] | None]
    live_cursor: int
    current: int

    async def check(self) -> None:
        w = self.worker
        assert w.metric("ledger_deletion_dlq_total", reason="in_use") == 2
        assert w.metric("ledger_deletion_recovered_total", component="MANAGED_CURSOR") == 1
        assert w.metric("ledger_deletion_recovered_total", component="MANAGED_LEDGER") == 1
        assert w.metric("ledger_deletion_deleted_total", route="owner", result="deleted") == 2
        # The live cursor's ledger and the topic's current ledger: still OPEN, their records never written.
        for lid in (self.live_cursor, self.current):
            was = self.before[lid]
            assert was is not None and was[0] == record.OPEN, (lid, was)
        async with Stores(f"zk:{self.zookeeper_hosts}") as zk:
            assert await record_of(zk, self.live_cursor) == self.before[self.live_cursor]
            assert await record_of(zk, self.current) == self.before[self.current]
        for dead in w.read_dlq():
            assert "referenced by its topic" in dead.properties()["last_error"]


async def _open_ledgers_nothing_names(
    stack: Stack,
    admin: PulsarAdmin,
    name: str,
    make_worker: WorkerFactory,
    t: TopicName,
    sub: str,
    live_cursor: int,
) -> _Round:
    """Runs the worker over the live cursor's ledger, the topic's current ledger and two OPEN ledgers of the topic
    that nothing names, until it has settled all four; the caller checks the outcome."""
    topic = str(t)
    current = max(ml_ledger_ids(await admin.internal_stats(t)))

    # What Pulsar 4.0 leaves when a broker dies right after a cursor switch: an OPEN ledger of that cursor
    # nothing names (it is deleted without being closed). And an open data ledger the topic never listed.
    custom = pulsar_ml_metadata(topic)
    [orphan_cursor] = await asyncio.to_thread(
        create_ledgers, stack, 1, {**custom, "pulsar/cursor": sub}, 2, leave_open=True
    )
    [orphan_data] = await asyncio.to_thread(create_ledgers, stack, 1, custom, 3, leave_open=True)

    async with Stores(f"zk:{stack.zookeeper_hosts}") as zk:
        before = {lid: await record_of(zk, lid) for lid in (live_cursor, current, orphan_cursor, orphan_data)}
    # (The live cursor's record is checked with the outcome: a switch by the broker may have removed it already.)
    assert {lid: r[0] if r else None for lid, r in before.items() if lid != live_cursor} == dict.fromkeys(
        (current, orphan_cursor, orphan_data), record.OPEN
    )

    w = make_worker(f"open-{name}", worker={"max_attempts": 3, "in_use_retry_s": 0.5, "min_ledger_age_s": 2})
    w.send(cursor_info(topic, sub, orphan_cursor))
    w.send(ml_info(topic, orphan_data))
    w.send(cursor_info(topic, sub, live_cursor))
    w.send(ml_info(topic, current))

    async def settled() -> bool:
        if w.metric("ledger_deletion_dlq_total") + w.metric("ledger_deletion_deleted_total") < 4:
            return False
        async with Stores(f"zk:{stack.zookeeper_hosts}") as zk:
            return await record_of(zk, orphan_cursor) is None and await record_of(zk, orphan_data) is None

    await eventually(settled, timeout=90, what="the four messages settled and the orphans deleted")
    return _Round(w, stack.zookeeper_hosts, before, live_cursor, current)


async def test_a_live_writer_of_a_ledger_its_topic_names_is_never_fenced(
    stack: Stack, unique: str, test_namespace: str, admin: PulsarAdmin, make_worker: WorkerFactory
) -> None:
    # A writer that is alive and adding (a cursor ledger being created is the only such one a topic does
    # not name, and the minimum age covers it): while the message's ledger is young, it stays untouched.
    # Two looks, the second half the minimum age after the first (too young is retried after min_age / 2).
    topic = f"persistent://{test_namespace}/young-writer-{unique}"
    await asyncio.to_thread(produce, stack, topic, 1)
    sub = f"sub-{unique}"
    writer = await asyncio.to_thread(LedgerWriter, stack, {**pulsar_ml_metadata(topic), "pulsar/cursor": sub})
    try:
        w = make_worker(f"young-{unique}", worker={"min_ledger_age_s": 60, "snapshot_ttl_s": 1, "max_attempts": 2})
        w.send(cursor_info(topic, sub, writer.ledger_id))

        async def parked() -> bool:
            return w.metric("ledger_deletion_dlq_total", reason="too_young") == 1

        await eventually(parked, timeout=90, what="the young open ledger parked")
        n = len(writer.added())
        await asyncio.to_thread(writer.wait_until_added, n + 3)  # still writing
    finally:
        await asyncio.to_thread(writer.close)
    assert w.metric("ledger_deletion_recovered_total") == 0
    [dead] = w.read_dlq()
    assert "younger than the minimum age" in dead.properties()["last_error"]
