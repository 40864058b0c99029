"""The batched hot path on the real stack: the messages of one received batch share their metadata reads
and go to storage together (one ZooKeeper multi), yet each is decided on its own and settles correctly.

Its batch sweep settles what is already gone before any route is read, and hands the others the ledger
reads it made. One batch mixes everything the queue can hold: a live topic's current ledger, an orphan of that live
topic, orphans of a gone topic (two, so the deletes go out together), a duplicate, a ledger that no
longer exists, and a forged claim (a gone topic's name on another topic's ledger)."""

from __future__ import annotations

import asyncio
import random

import pytest

from testkit.harness import create_ledgers, pulsar_ml_metadata
from testkit.harness import ml_info as ml
from testkit.topics import eventually, ml_ledger_ids, produce
from tests.conftest import Stack
from tests.integration.conftest import WorkerFactory
from worker.backends.bookie_http import BookieClient
from worker.broker.admin import PulsarAdmin
from worker.broker.topology import ensure_topology
from worker.formats.message import REASON
from worker.formats.topic_name import TopicName
from worker.settings import load_settings

pytestmark = pytest.mark.integration


async def test_one_batch_of_live_orphaned_forged_and_gone_ledgers_settles_each_correctly(
    stack: Stack, test_namespace: str, unique: str, admin: PulsarAdmin, bookie: BookieClient, make_worker: WorkerFactory
) -> None:
    live = f"persistent://{test_namespace}/live-{unique}"
    gone = f"persistent://{test_namespace}/gone-{unique}"
    produce(stack.service_url, live, 5)
    [live_ledger] = ml_ledger_ids(await admin.internal_stats(TopicName.parse(live)))[-1:]
    [live_orphan] = create_ledgers(stack, 1, pulsar_ml_metadata(live))
    gone_orphans = create_ledgers(stack, 2, pulsar_ml_metadata(gone))
    [forged_target] = create_ledgers(stack, 1, pulsar_ml_metadata(live))
    never = 10**12 + random.randrange(10**9)

    w = make_worker(
        f"batch-{unique}",
        bookkeeper={"delete_via": "zookeeper"},
        topics={"parallelism": 1},
        worker={
            "max_inflight": 16,
            "min_ledger_age_s": 2,
            "snapshot_ttl_s": 1.5,
            "in_use_retry_s": 1,
            "batch_wait_ms": 1000,
        },
        start=False,
    )
    # The whole batch is queued before the worker starts, so its first batch receive takes it at once.
    await ensure_topology(admin, load_settings(w.config_path).topics)
    batch = [
        ml(live, live_ledger),  # in use: the live topic's current ledger
        ml(live, live_orphan),  # an orphan of a live topic: owner route, deleted
        ml(gone, gone_orphans[0]),  # orphans of a gone topic: direct route, deleted together
        ml(gone, gone_orphans[1]),
        ml(gone, gone_orphans[0]),  # a duplicate: exactly one copy deletes it
        ml(gone, never),  # never existed: already gone
        ml(gone, forged_target),  # forged: the ledger's metadata names the live topic
    ]
    await asyncio.sleep(2.5)  # every ledger past the minimum age
    for info in batch:
        w.send(info)
    w.start()

    async def settled() -> bool:
        done = w.metric("ledger_deletion_deleted_total") + w.metric("ledger_deletion_rejected_total")
        return done >= 6 and w.metric("ledger_deletion_in_use_total") >= 1

    await eventually(settled, timeout=90, what="the batch settled")
    assert w.metric("ledger_deletion_deleted_total", result="deleted", route="owner") == 1
    assert w.metric("ledger_deletion_deleted_total", result="deleted", route="direct") == 2
    assert w.metric("ledger_deletion_deleted_total", result="already_gone") == 2
    # The ledger that never existed was settled by its batch's sweep, before any route was read (the
    # duplicate too, when it came in a later part of the batch than the delete it duplicates).
    assert w.metric("ledger_deletion_deleted_total", result="already_gone", route="none") >= 1
    never_lines = [e for e in w.log_events() if e.get("ledger_id") == never]
    assert [(e.get("outcome"), e.get("route")) for e in never_lines] == [("already_gone", "none")]
    assert w.metric("ledger_deletion_rejected_total") == 1
    assert w.metric("ledger_deletion_failed_total") == 0
    # Storage agrees: what was deleted is gone, the live ledger and the forged claim's target are not.
    assert [await bookie.get_metadata(x) for x in (live_orphan, *gone_orphans)] == [None] * 3
    assert await bookie.get_metadata(live_ledger) is not None
    assert await bookie.get_metadata(forged_target) is not None
    # They came together: the batch histogram saw a batch of more than two messages. (A batch receive's
    # timer may still close between two of the dispatch's messages; either part of seven then holds four.)
    big = w.metric("ledger_deletion_batch_messages_count") - w.metric("ledger_deletion_batch_messages_bucket", le="2.0")
    assert big >= 1
    # The forged claim is in the DLQ with its reason; the live ledger waits on the retry topic.
    reasons = [m.properties().get(REASON) for m in w.read_dlq()]
    assert reasons.count("rejected") == 1
