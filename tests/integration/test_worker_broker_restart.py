"""Fault test: the broker (the whole Pulsar standalone) restarts while the worker drains its queue.

Invariants: nothing queued is lost, nothing is deleted that should not be, the worker reconnects by
itself and the queue drains to zero.
"""

from __future__ import annotations

import subprocess

import pytest

from testkit.harness import WorkerHarness, create_ledgers, pulsar_ml_metadata
from testkit.topics import eventually
from tests.conftest import STACK, Stack
from tests.integration.conftest import WorkerFactory
from worker.backends.bookie_http import BookieClient
from worker.broker.admin import PulsarAdmin
from worker.formats.message import LedgerComponent, LedgerType, PendingDeleteLedgerInfo
from worker.formats.topic_name import TopicName

pytestmark = [pytest.mark.integration, pytest.mark.serial]


def restart_pulsar() -> None:
    subprocess.run(["bash", str(STACK), "restart-pulsar"], check=True, timeout=300)


async def backlog(admin: PulsarAdmin, h: WorkerHarness) -> float:
    t = h.topics
    pending = await admin.partitioned_stats(TopicName.parse(t["pending"]))
    retry = await admin.stats(TopicName.parse(t["retry"]))
    sub = h.config["topics"].get("subscription", "ledger-deletion-worker")
    return float(
        (pending["subscriptions"].get(sub) or {}).get("msgBacklog", 0)
        + (retry["subscriptions"].get(sub) or {}).get("msgBacklog", 0)
    )


async def test_broker_restart_mid_drain_loses_nothing(
    stack: Stack, test_namespace: str, unique: str, admin: PulsarAdmin, bookie: BookieClient, make_worker: WorkerFactory
) -> None:
    ghost = f"persistent://{test_namespace}/ghost-{unique}"
    ids = create_ledgers(stack, 12, pulsar_ml_metadata(ghost))
    w = make_worker(
        f"restart-{unique}",
        worker={"deletes_per_second": 1, "delete_burst": 1, "max_attempts": 50, "backoff_initial_s": 2},
    )
    for lid in ids:
        w.send(PendingDeleteLedgerInfo(ghost, LedgerComponent.MANAGED_LEDGER, LedgerType.LEDGER, lid))

    async def started() -> bool:
        return w.metric("ledger_deletion_deleted_total") >= 2

    await eventually(started, timeout=60, what="the first deletions")
    w.close_client()  # the test's own producer must not hold the restart up
    restart_pulsar()

    async def all_gone() -> bool:
        return all([await bookie.get_metadata(i) is None for i in ids])

    await eventually(all_gone, timeout=240, interval=2, what="every ledger deleted after the broker restart")

    async def drained() -> bool:
        return await backlog(admin, w) == 0

    await eventually(drained, timeout=120, interval=2, what="the queue drained to zero")
    assert w.proc is not None and w.proc.poll() is None, "the worker must survive a broker restart"
    assert w.metric("ledger_deletion_dlq_total") == 0
