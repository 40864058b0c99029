"""Defer mode on a real broker: the BookKeeper copies the extension queued are deleted by the worker, not by the
broker, and switching the mode on or off on a running cluster loses nothing and leaks nothing.

One flow, both directions, the broker restarted with the switch flipped while deletions wait on the queue (no
worker runs until the end):

1. defer mode off (the session's broker): a topic's trims; the broker deletes what it drops, as always;
2. restarted with ``ledgerDeletionDeferBrokerDeletes=true`` (flipped on while 1's deletions are queued): another
   topic's trims and cursor-ledger switches, and a third topic's second compaction; each dropped ledger is on the
   queue before the metadata forgets it; a dropped data or compacted ledger's BookKeeper metadata is still there
   after the broker's delete (which the extension skipped), a dropped cursor ledger is gone (the broker deletes
   those as stock: Pulsar drops them open);
3. restarted with defer mode off again (flipped off while 2's deletions are queued, done by no one yet);
4. a worker drains the queue: 1's ledgers and 2's cursor ledgers are ``already_gone``, 2's data ledgers ``deleted``
   (by the worker); every ledger the topics still list exists, the topics still produce and consume, and
   ``scan --dry-run`` finds no orphan.

And defer mode with a worker that cannot recover open ledgers (``bookkeeper.recover_open_ledgers: false``): a
subscription's cursor switches ledgers and is then unsubscribed; every cursor ledger it dropped is gone after the
drain and none is dead-lettered, as with defer mode off.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pulsar

from testkit.harness import WorkerHarness
from testkit.stack import process_log
from testkit.topics import eventually, ml_ledger_ids, produce
from tests.extension.conftest import ExtStack, restart_broker, worker_on_extension_queue
from tests.extension.helpers import (
    MetadataWatch,
    assert_marked_before_forgotten,
    assert_signed_by_the_broker,
    broker_metric,
    compacted_ledgers_named,
    internal_stats,
    queued_for,
    rest,
    scan_orphans,
    wait_settled,
)
from tests.integration.helpers import compact, produce_keyed, quiet_logger
from worker.backends.bookie_http import BookieClient
from worker.broker.admin import PulsarAdmin
from worker.errors import BackendError
from worker.formats.message import LedgerComponent, decode
from worker.formats.topic_name import TopicName

DEFER = "ledgerDeletionDeferBrokerDeletes=true"


def pulsar_log(stack: ExtStack) -> str:
    return process_log(stack.stack_dir)


async def trim_until(admin: PulsarAdmin, t: TopicName, at_most: int) -> None:
    async def trimmed() -> bool:
        try:
            await admin.trim(t)  # the first call after a restart may meet the old broker's pooled connection
        except BackendError:
            return False
        return len(ml_ledger_ids(await admin.internal_stats(t))) <= at_most

    await eventually(trimmed, timeout=90, interval=1, what=f"{t} trimmed to {at_most} ledger(s)")


def produce_and_acknowledge(stack: ExtStack, topic: str, n: int, pause_s: float = 0.0) -> None:
    """``n`` messages, each acknowledged on its own: the subscription's cursor persists its position in a ledger
    of its own, which the broker switches after each persisted position here (config/standalone.conf: a cursor
    rollover time of 0), so it drops cursor ledgers. How often a position is persisted is rate-limited
    (``managedLedgerDefaultMarkDeleteRateLimit``, 0.1 a second here, or a namespace's persistence policy);
    ``pause_s`` after each acknowledgement spaces them out."""
    client = pulsar.Client(stack.service_url, logger=quiet_logger())
    try:
        consumer = client.subscribe(topic, "s", consumer_type=pulsar.ConsumerType.Shared)
        producer = client.create_producer(topic, batching_enabled=False)
        for i in range(n):
            producer.send(f"m{i}".encode())
            consumer.acknowledge(consumer.receive(timeout_millis=10000))
            time.sleep(pause_s)
        producer.close()
        consumer.close()
    finally:
        client.close()


async def test_defer_mode_switched_on_and_off_while_deletions_are_queued(
    ext_stack: ExtStack,
    ext_admin: PulsarAdmin,
    ext_bookie: BookieClient,
    unique: str,
    tmp_path: Path,
    ext_harnesses: list[WorkerHarness],
) -> None:
    ns = f"public/ext-defer-{unique}"
    await ext_admin.ensure_namespace(ns)
    # Infinite retention while the topic is written: with 0 the broker trims at each rollover, and the list
    # read below could already be down to the current ledger.
    await ext_admin.set_retention(ns, -1, -1)
    before, deferred = f"persistent://{ns}/before", f"persistent://{ns}/deferred"
    tb, td = TopicName.parse(before), TopicName.parse(deferred)

    # 1. Defer mode off: the broker deletes what its trims drop.
    produce(ext_stack.service_url, before, 26)
    listed_before = ml_ledger_ids(await ext_admin.internal_stats(tb))
    await ext_admin.set_retention(ns, 0, 0)
    await trim_until(ext_admin, tb, 1)
    dropped_before = [lid for lid in listed_before if lid not in ml_ledger_ids(await ext_admin.internal_stats(tb))]
    assert dropped_before

    async def deleted_by_the_broker() -> bool:
        return all([await ext_bookie.get_metadata(lid) is None for lid in dropped_before])

    await eventually(deleted_by_the_broker, timeout=30, what="the broker deleting the trimmed ledgers")

    # 2. Flipped on while those deletions wait on the queue.
    restart_broker(DEFER)
    assert "defer mode on (ledgerDeletionDeferBrokerDeletes=true)" in pulsar_log(ext_stack)
    skipped_before = broker_metric(ext_stack, "ledger_deletion_broker_deferred_total")
    produce(ext_stack.service_url, deferred, 1)
    with MetadataWatch(ext_stack.zookeeper_hosts, deferred) as watch:
        produce_and_acknowledge(ext_stack, deferred, 21)
        await trim_until(ext_admin, td, 1)

        async def cursor_switched() -> bool:
            return bool(set(watch.cursor_seen) & set(watch.gone_at_ms))

        await eventually(cursor_switched, timeout=30, what="a cursor ledger switched")
        await asyncio.sleep(0.3)
    queued = queued_for(ext_stack.service_url, deferred)
    assert_marked_before_forgotten(watch, queued)
    assert_signed_by_the_broker(ext_stack, deferred)
    dropped = sorted(watch.gone_at_ms)
    components = {info.ledger_component for info, _ in queued.values()}
    assert components == {LedgerComponent.MANAGED_LEDGER, LedgerComponent.MANAGED_CURSOR}, components
    cursor_ledgers = sorted(lid for lid in dropped if lid in watch.cursor_seen)
    data_ledgers = sorted(lid for lid in dropped if lid not in watch.cursor_seen)
    assert cursor_ledgers and data_ledgers, (cursor_ledgers, data_ledgers)
    # The broker's deletes of its data ledgers ran and were left to the worker: each is still in BookKeeper. Its
    # cursor ledgers (dropped open) the broker deleted itself, as a stock broker does.
    await asyncio.sleep(2)
    still_there = [lid for lid in dropped if await ext_bookie.get_metadata(lid) is not None]
    assert still_there == data_ledgers, f"in BookKeeper after the broker's deletes: {still_there}"
    # A compaction in defer mode: the compacted ledger it replaces is queued first and left to the worker.
    keyed = TopicName.parse(f"persistent://{ns}/keyed")
    produce_keyed(ext_stack.service_url, keyed, 12)
    await compact(ext_stack, keyed)
    [compacted] = compacted_ledgers_named(internal_stats(ext_stack, keyed))
    produce_keyed(ext_stack.service_url, keyed, 12)
    await compact(ext_stack, keyed)
    assert compacted not in compacted_ledgers_named(internal_stats(ext_stack, keyed))
    assert ("LEDGER", compacted) in queued_for(ext_stack.service_url, str(keyed))
    await asyncio.sleep(2)
    assert await ext_bookie.get_metadata(compacted) is not None, "the replaced compacted ledger, left to the worker"
    assert broker_metric(ext_stack, "ledger_deletion_broker_deferred_total") - skipped_before >= len(dropped) + 1

    # 3. Flipped off while the deferred deletions wait on the queue (done by no one so far).
    restart_broker()
    assert "defer mode on" not in pulsar_log(ext_stack)  # the log since this start

    # 4. The worker drains the queue.
    w = worker_on_extension_queue(ext_stack, tmp_path, "defer")
    ext_harnesses.append(w)
    w.start()
    keys_before = {("LEDGER", lid) for lid in dropped_before}
    outcomes_before = await wait_settled(w, before, keys_before)
    keys_deferred = set(queued)
    outcomes = await wait_settled(w, deferred, keys_deferred)
    print(f"defer mode off: {before}: {outcomes_before}; on: {deferred}: dropped {dropped}, settled {outcomes}")
    assert {outcomes_before[k] for k in keys_before} == {"already_gone"}
    assert {outcomes[("LEDGER", lid)] for lid in data_ledgers} == {"deleted"}, "defer mode: the worker deletes them"
    assert {outcomes[("LEDGER", lid)] for lid in cursor_ledgers} == {"already_gone"}, "the broker deleted them"
    compaction_outcome = await wait_settled(w, str(keyed), {("LEDGER", compacted)})
    assert compaction_outcome[("LEDGER", compacted)] == "deleted"
    assert all([await ext_bookie.get_metadata(lid) is None for lid in [*dropped, compacted]])

    # Nothing lost: every ledger the topics list (their cursors' too) exists, and they still produce and consume.
    for t in (tb, td):
        stats = await ext_admin.internal_stats(t)
        live = ml_ledger_ids(stats) + [
            int(c["cursorLedger"]) for c in stats["cursors"].values() if int(c.get("cursorLedger", -1)) >= 0
        ]
        assert all([await ext_bookie.get_metadata(lid) is not None for lid in live]), (t, live)
    produce_and_acknowledge(ext_stack, deferred, 6)
    assert scan_orphans(ext_stack, tmp_path, ns) == []


async def test_defer_mode_leaves_no_cursor_ledger_to_a_worker_that_cannot_recover_open_ledgers(
    ext_stack: ExtStack,
    ext_admin: PulsarAdmin,
    ext_bookie: BookieClient,
    unique: str,
    tmp_path: Path,
    ext_harnesses: list[WorkerHarness],
) -> None:
    ns = f"public/ext-defer-cursors-{unique}"
    await ext_admin.ensure_namespace(ns)
    # A position persisted at most once a second rather than the stack's once in ten: 8 acknowledgements 1.1 s
    # apart then persist up to 8 positions, each in a cursor ledger of its own, not two or three by the clock.
    persistence = {"bookkeeperEnsemble": 1, "bookkeeperWriteQuorum": 1, "bookkeeperAckQuorum": 1}
    rest(
        ext_stack,
        "POST",
        f"/admin/v2/namespaces/{ns}/persistence",
        {**persistence, "managedLedgerMaxMarkDeleteRate": 1.0},
    )
    topic = f"persistent://{ns}/acked"
    t = TopicName.parse(topic)
    restart_broker(DEFER)
    try:
        with MetadataWatch(ext_stack.zookeeper_hosts, topic) as watch:
            # Up to 8 positions persisted, each switching the cursor's ledger; then the subscription deleted.
            produce_and_acknowledge(ext_stack, topic, 8, pause_s=1.1)
            rest(ext_stack, "DELETE", f"/admin/v2/{t.rest_path}/subscription/s")

            async def unsubscribed() -> bool:
                return bool(watch.cursor_seen) and set(watch.cursor_seen) <= set(watch.gone_at_ms)

            await eventually(unsubscribed, timeout=30, what="every cursor ledger of s dropped")
        cursor_ledgers = sorted(watch.cursor_seen)
        assert len(cursor_ledgers) >= 3, f"the cursor switched ledgers too few times: {cursor_ledgers}"
        queued = queued_for(ext_stack.service_url, topic)
        keys = {("LEDGER", lid) for lid in cursor_ledgers}
        assert keys <= set(queued), f"queued: {sorted(queued)}; cursor ledgers dropped: {cursor_ledgers}"

        # A worker that cannot recover (fence and close) an open ledger drains the queue, defer mode still on.
        w = worker_on_extension_queue(
            ext_stack, tmp_path, "defer-no-recovery", bookkeeper={"recover_open_ledgers": False}
        )
        ext_harnesses.append(w)
        w.start()
        outcomes = await wait_settled(w, topic, keys)
        print(f"defer mode, recovery off: cursor ledgers {cursor_ledgers}, settled {outcomes}")
        assert all([await ext_bookie.get_metadata(lid) is None for lid in cursor_ledgers]), "left in BookKeeper"
        dead = [m for m in w.read_dlq() if decode(m.data()).topic_name == topic]
        assert dead == [], f"dead-lettered: {[(decode(m.data()).ledger_id, m.properties()) for m in dead]}"
    finally:
        restart_broker()
