"""One broker moved to Pulsar's 5.0 line and back on its own data, with the broker extension, a backlog of pending
deletions queued before each move and drained after it.

The instance starts on the default line (4.0.8): a topic's trims are queued by its extension, no worker running.
It moves to 5.0.0-M1 on the same data (as Pulsar's guide for standalone says it may): another topic's trims are
queued by the 5.0 broker; a worker drains both, each decoded by the writer's line. More trims are queued on 5.0, the
worker stopped; the instance is rolled back to 4.0.8 on the same data; a worker drains what 5.0 queued. A topic
whose backlog a subscription holds keeps every ledger and message throughout, and the scanner finds no orphan.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pulsar
import pytest

from testkit.admin import StagingAdmin
from testkit.harness import WorkerHarness, quiet_logger
from testkit.stack import Stack, admin_for, broker_version, stack_of
from testkit.topics import eventually, ml_ledger_ids, produce
from tests.extension.helpers import SETTLED, queued_for, scan_orphans, wait_settled
from tests.upgrade.conftest import NEW, OLD, move_to
from worker.formats.message import PendingDeleteLedgerInfo
from worker.formats.topic_name import TopicName

PENDING = "persistent://pulsar/system/__ledger_deletion"
QUEUE = {"pending": PENDING, "retry": f"{PENDING}-RETRY", "dlq": f"{PENDING}-DLQ", "parallelism": 4}


@pytest.fixture
def stack(upgrade_addresses: dict[str, str]) -> Stack:
    return stack_of(upgrade_addresses)


@pytest.fixture
async def admin(stack: Stack) -> AsyncIterator[StagingAdmin]:
    async with admin_for(stack) as a:
        yield a


async def trimmed_and_queued(stack: Stack, admin: StagingAdmin, topic: str, writer: str) -> set[tuple[str, int]]:
    """``topic`` filled past four ledgers and trimmed (retention 0): the ledgers its broker queued, each written by
    ``writer``'s extension."""
    t = TopicName.parse(topic)
    produce(stack.service_url, topic, 26)  # 5 entries a ledger: rollovers, then the trim drops the closed ones
    await admin.trim(t)

    async def queued() -> dict[tuple[str, int], tuple[PendingDeleteLedgerInfo, int]]:
        got = queued_for(stack.service_url, topic)
        return got if len(got) >= 4 else {}

    got = await eventually(queued, timeout=60, what=f"{topic}'s trims on the queue")
    for info, _ in got.values():
        assert info.properties.get("pulsar_version") == writer, info.properties
    assert len(ml_ledger_ids(await admin.internal_stats(t))) <= 2
    return set(got)


def worker(stack: Stack, tmp_path: Path, name: str) -> WorkerHarness:
    return WorkerHarness(stack, tmp_path, name, topics=QUEUE).start(timeout=120)


async def drained(w: WorkerHarness, backlog: dict[str, set[tuple[str, int]]], writer: str) -> None:
    """Every ledger of ``backlog`` (topic -> keys) settled by ``w``, and counted as decoded from ``writer``."""
    for topic, keys in backlog.items():
        outcomes = await wait_settled(w, topic, keys)
        assert {outcomes[k] for k in keys} <= SETTLED
    n = sum(len(k) for k in backlog.values())
    labels = {"source": "broker-extension", "writer": writer}

    async def decoded() -> float:
        v = w.metric("ledger_deletion_decoded_total", **labels)
        return v if v >= n else 0

    await eventually(decoded, timeout=15, what=f"ledger_deletion_decoded_total{labels} >= {n}")


def consume_all(stack: Stack, topic: str, subscription: str) -> int:
    client = pulsar.Client(stack.service_url, logger=quiet_logger())
    try:
        c = client.subscribe(topic, subscription)
        n = 0
        while True:
            try:
                c.acknowledge(c.receive(timeout_millis=3000))
                n += 1
            except pulsar.Timeout:
                return n
    finally:
        client.close()


async def test_a_broker_moved_to_5_0_and_back_drains_what_either_line_queued(
    stack: Stack, admin: StagingAdmin, tmp_path: Path, unique: str
) -> None:
    ns = f"public/upg-{unique}"
    await admin.ensure_namespace(ns)
    await admin.set_retention(ns, 0, 0)
    # A topic whose subscription holds its backlog: every one of its ledgers is in use from start to end.
    held = f"persistent://{ns}/held"
    await admin.create_subscription(TopicName.parse(held), "keep")
    produce(stack.service_url, held, 23)
    held_ledgers = set(ml_ledger_ids(await admin.internal_stats(TopicName.parse(held))))

    assert broker_version(stack) == OLD
    on_old = {f"persistent://{ns}/old": await trimmed_and_queued(stack, admin, f"persistent://{ns}/old", OLD)}

    move_to(NEW)
    assert broker_version(stack) == NEW
    on_new = {f"persistent://{ns}/new": await trimmed_and_queued(stack, admin, f"persistent://{ns}/new", NEW)}
    w = worker(stack, tmp_path, "upgrade-new")
    try:
        await drained(w, on_old, OLD)
        await drained(w, on_new, NEW)
    finally:
        assert w.stop() == 0, w.log_tail()

    # Queued on 5.0 and left there: the rollback's backlog.
    before_rollback = {
        f"persistent://{ns}/back": await trimmed_and_queued(stack, admin, f"persistent://{ns}/back", NEW)
    }
    move_to(OLD)
    assert broker_version(stack) == OLD
    w = worker(stack, tmp_path, "upgrade-old")
    try:
        await drained(w, before_rollback, NEW)
        assert w.metric("ledger_deletion_dlq_total") == 0
    finally:
        assert w.stop() == 0, w.log_tail()

    stats = await admin.internal_stats(TopicName.parse(held))
    assert held_ledgers <= set(ml_ledger_ids(stats)), "a ledger the held topic lists was dropped"
    assert consume_all(stack, held, "keep") == 23, "the held topic lost messages across the moves"
    assert scan_orphans(stack, tmp_path, ns) == []  # type: ignore[arg-type]
