"""The broker keeps working when the queue is unavailable, and forgets nothing meanwhile.

The extension stack is restarted with the extension pointed at a port where nothing listens (and a 3 s
wait limit): the broker starts (no deadlock on a queue it cannot reach), produce and consume work, a trim's
metadata write waits, retries (counted, logged) and fails, so the trimmed ledgers stay listed; the
rollovers after it go ahead without waiting, keeping those ledgers listed. The stack is restarted normally
afterwards, and the next trim queues the ledgers and drops them. Runs last in this directory (it restarts
the session's instance).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from pathlib import Path

import pulsar
import pytest

from testkit.stack import process_log
from testkit.topics import eventually, ml_ledger_ids, produce
from tests.extension.conftest import ExtStack, restart_broker
from tests.extension.helpers import broker_metric, ml_path, queued_for, scan_orphans
from tests.integration.helpers import quiet_logger
from worker.broker.admin import PulsarAdmin
from worker.errors import BackendError
from worker.formats.topic_name import TopicName

UNREACHABLE = (
    "ledgerDeletionServiceUrl=pulsar://127.0.0.1:9 ledgerDeletionWebServiceUrl=http://127.0.0.1:9 "
    "ledgerDeletionMaxWaitSeconds=3"
)


@pytest.fixture
def queue_unreachable(ext_stack: ExtStack) -> Iterator[None]:
    restart_broker(UNREACHABLE)
    try:
        yield
    finally:
        # Normal again for whatever runs next (the test restores it itself on success).
        if "127.0.0.1:9" in (Path(ext_stack.stack_dir) / "run" / "standalone.conf").read_text():
            restart_broker()


async def test_queue_unavailable_metadata_writes_wait_fail_and_keep_their_ledgers(
    ext_stack: ExtStack, queue_unreachable: None, ext_admin: PulsarAdmin, unique: str, tmp_path: Path
) -> None:
    ns = f"public/ext-down-{unique}"
    await ext_admin.ensure_namespace(ns)
    await ext_admin.set_retention(ns, -1, -1)
    topic = f"persistent://{ns}/t"
    t = TopicName.parse(topic)

    # Produce and consume are unaffected.
    t0 = time.monotonic()
    client = pulsar.Client(ext_stack.service_url, logger=quiet_logger())
    try:
        consumer = client.subscribe(topic, "s")
        produce(ext_stack.service_url, topic, 21)
        for _ in range(21):
            consumer.acknowledge(consumer.receive(timeout_millis=10000))
        consumer.close()
    finally:
        client.close()
    assert time.monotonic() - t0 < 30
    listed = ml_ledger_ids(await ext_admin.internal_stats(t))
    assert len(listed) >= 4

    await ext_admin.set_retention(ns, 0, 0)
    failed_before = broker_metric(ext_stack, "ledger_deletion_broker_metadata_writes_failed_total")
    # The trim answers 500 once its metadata write gives up: that is the point.
    with contextlib.suppress(BackendError):
        await ext_admin.trim(t)

    async def write_failed() -> bool:
        return broker_metric(ext_stack, "ledger_deletion_broker_metadata_writes_failed_total") > failed_before

    await eventually(write_failed, timeout=30, what="the trim's metadata write to give up")
    assert broker_metric(ext_stack, "ledger_deletion_broker_send_failures_total") > 0
    # Nothing forgotten: the stored metadata still lists the ledgers. (The broker's memory no longer does:
    # it drops them before the write, as stock Pulsar does on any failed trim write, so the live view a
    # scan reads through internalStats shows them as orphans until the topic reloads or trims again.)
    assert set(listed) <= set(stored_ledgers(ext_stack, topic))
    # Producing on: each rollover's write would drop those ledgers (gone from the broker's memory); it goes
    # ahead at once (the queue is known down: no wait), keeping them listed, and no send fails.
    t1 = time.monotonic()
    produce(ext_stack.service_url, topic, 21)
    assert time.monotonic() - t1 < 20
    assert broker_metric(ext_stack, "ledger_deletion_broker_metadata_writes_kept_total") > 0
    assert set(listed) <= set(stored_ledgers(ext_stack, topic))
    log = process_log(ext_stack.stack_dir)
    assert "metadata write waits" in log and "they stay listed" in log

    # The queue back: the next trim queues them and drops them.
    restart_broker()

    async def trimmed_again() -> bool:
        # The admin session's pooled connection went with the old broker: the first call may fail.
        try:
            await ext_admin.trim(t)
        except BackendError:
            return False
        return True

    await eventually(trimmed_again, timeout=60, what="a trim on the restarted broker")

    async def dropped() -> bool:
        return not set(listed[:-1]) & set(stored_ledgers(ext_stack, topic))

    await eventually(dropped, timeout=60, what="the kept ledgers dropped once the queue is back")
    queued = queued_for(ext_stack.service_url, topic)
    assert {("LEDGER", lid) for lid in listed[:-1]} <= set(queued)
    assert scan_orphans(ext_stack, tmp_path, ns) == []


def stored_ledgers(stack: ExtStack, topic: str) -> list[int]:
    from kazoo.client import KazooClient

    from worker.formats.managed_ledger_metadata import parse_managed_ledger_info

    zk = KazooClient(hosts=stack.zookeeper_hosts)
    zk.start(timeout=15)
    try:
        data, _ = zk.get(ml_path(topic))
        return list(parse_managed_ledger_info(data).ledger_ids)
    finally:
        zk.stop()
        zk.close()
