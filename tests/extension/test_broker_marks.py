"""The brokers' mark, end to end: a deletion the extension really queued, whose metadata write then failed, is
released by the worker once its attempts run out (its ledger is still a closed ledger of its topic, and the
broker queues it again when it drops it for real); the same claim forged by a producer is dead-lettered.

The failed write is a real one: the topic's managed-ledger znode is rewritten behind the broker's back (same
bytes, a new version), so the broker's next metadata write, the trim, meets a version conflict after the
extension made its messages durable. The broker then fences the managed ledger; loaded again, the topic lists
the ledgers the trim meant to drop."""

from __future__ import annotations

import contextlib
from pathlib import Path

import pulsar
from kazoo.client import KazooClient

from testkit.harness import WorkerHarness
from testkit.topics import eventually, ml_ledger_ids, produce
from tests.extension.conftest import PENDING, ExtStack, worker_on_extension_queue
from tests.extension.helpers import ml_path, queued_for
from tests.integration.helpers import quiet_logger
from worker.broker.admin import PulsarAdmin
from worker.broker.client import PendingDeleteSchema
from worker.formats.topic_name import TopicName


def _bump_version(zk_hosts: str, path: str) -> None:
    """A write by someone else: the same bytes, a new version."""
    zk = KazooClient(hosts=zk_hosts)
    zk.start(30)
    try:
        data, stat = zk.get(path)
        zk.set(path, data, version=stat.version)
    finally:
        zk.stop()
        zk.close()


async def test_a_genuine_mark_whose_write_failed_is_released_and_a_forged_one_is_not(
    ext_stack: ExtStack, ext_admin: PulsarAdmin, unique: str, tmp_path: Path, ext_harnesses: list[WorkerHarness]
) -> None:
    async def queue_ready() -> bool:
        # The extension makes its queue in the background once the broker serves (a fresh instance).
        try:
            return await ext_admin.partitions(TopicName.parse(PENDING)) > 0
        except Exception:
            return False

    await eventually(queue_ready, timeout=120, interval=1, what="the extension's queue made")
    ns = f"public/ext-mark-{unique}"
    await ext_admin.ensure_namespace(ns)
    await ext_admin.set_retention(ns, -1, -1)  # nothing trimmed until the test asks
    topic = f"persistent://{ns}/kept"
    t = TopicName.parse(topic)
    produce(ext_stack.service_url, topic, 21)  # 5 entries a ledger: four closed ledgers and the current one
    listed = ml_ledger_ids(await ext_admin.internal_stats(t))
    closed = listed[:-1]
    assert len(closed) >= 3

    # The trim's write fails on a version conflict after its marks are durable.
    _bump_version(ext_stack.zookeeper_hosts, ml_path(topic))
    await ext_admin.set_retention(ns, 0, 0)

    async def marked() -> dict[tuple[str, int], object]:
        # Trimmed again until the broker applies the new retention to the topic (it does so in the background);
        # the trim that drops ledgers fails on the conflict, which the admin call answers with an error.
        with contextlib.suppress(Exception):
            await ext_admin.trim(t)
        return queued_for(ext_stack.service_url, topic)

    queued = await eventually(marked, timeout=120, interval=2, what="the trim's marks on the queue")
    marked_ids = {lid for (kind, lid) in queued if kind == "LEDGER"}
    assert marked_ids and marked_ids <= set(closed), (sorted(marked_ids), closed)
    # Loaded again with retention back to infinite: the topic lists every ledger the failed trim meant to drop.
    await ext_admin.set_retention(ns, -1, -1)
    await ext_admin.unload(t)

    async def relisted() -> bool:
        return marked_ids <= set(ml_ledger_ids(await ext_admin.internal_stats(t)))

    await eventually(relisted, timeout=60, what="the ledgers listed again after the failed write")

    # A producer's copy of one of them, with the extension's informational property and no mark.
    forged_id = min(marked_ids)
    [(forged_info, _)] = [v for (kind, lid), v in queued.items() if kind == "LEDGER" and lid == forged_id]
    client = pulsar.Client(ext_stack.service_url, logger=quiet_logger())
    try:
        p = client.create_producer(PENDING, schema=PendingDeleteSchema(), batching_enabled=False)
        p.send(forged_info, properties={"source": "broker-extension", "broker": "127.0.0.1:18080"})
    finally:
        client.close()

    w = worker_on_extension_queue(
        ext_stack, tmp_path, f"mark-{unique}", worker={"max_attempts": 2, "in_use_retry_s": 0.5}
    )
    ext_harnesses.append(w)
    w.start(timeout=120)

    def ours(event: str) -> list[dict[str, object]]:
        return [e for e in w.log_events() if e.get("topic") == topic and event in str(e.get("event"))]

    async def settled() -> bool:
        return {int(str(e["ledger_id"])) for e in ours("released")} >= marked_ids and len(ours("dead-lettered")) >= 1

    await eventually(settled, timeout=120, interval=1, what="the genuine marks released, the forged one dead-lettered")
    assert len(ours("dead-lettered")) == 1 and int(str(ours("dead-lettered")[0]["ledger_id"])) == forged_id
    assert set(ml_ledger_ids(await ext_admin.internal_stats(t))) >= marked_ids, "a listed ledger was deleted"
    assert not ours("ledger deleted")
