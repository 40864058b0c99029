"""A live topic's compacted ledger is never called an orphan because ``internalStats`` does not name it.

What Pulsar 4.0.8 does, observed on the local stack:
- a compaction writes a new ledger (custom metadata ``component=compacted-ledger``,
  ``pulsar/compactedTopic=<topic>``), closes it, then acknowledges on the ``__compaction`` cursor with the
  property ``CompactedTopicLedger=<id>`` (``Compactor.COMPACTED_TOPIC_LEDGER_PROPERTY``): that cursor
  property is where the broker persists which ledger is the compacted one. ``internalStats`` shows it twice:
  ``compactedLedger.ledgerId`` (the compacted-topic context the broker has loaded) and
  ``cursors.__compaction.properties``;
- ``compactedLedger.ledgerId`` is -1 whenever no context is loaded. Clearing the backlog of the
  ``__compaction`` subscription (``skip_all``) marks it deleted without that property; after an unload the
  topic loads with a ``__compaction`` cursor, no property and ``compactedLedger.ledgerId = -1``, while its
  last compacted ledger is still in BookKeeper, CLOSED. Nothing proves it unreferenced: the scanner must not
  call it an orphan and the worker must not delete it;
- a compacted ledger older than the one the topic names is a leftover of an earlier compaction: an orphan.
"""

from __future__ import annotations

import asyncio
import time

import pytest

from testkit.harness import WorkerHarness, create_ledgers
from tests.conftest import Stack
from tests.integration.conftest import WorkerFactory
from tests.integration.helpers import (
    admin_call,
    compact,
    fresh_namespace,
    produce_keyed,
    settings_of,
    worker_config,
)
from worker.backends.bookie_http import BookieClient
from worker.backends.stores import Stores
from worker.broker.admin import PulsarAdmin
from worker.broker.snapshot_cache import snapshot_cache
from worker.core.decision import Outcome
from worker.daemon.decider import open_decider
from worker.formats.message import LedgerComponent, LedgerType, PendingDeleteLedgerInfo
from worker.formats.topic_name import TopicName
from worker.operations.scanner import Decision, Scanner, Verdict
from worker.settings import WorkerSettings

pytestmark = pytest.mark.integration


def compacted_metadata(topic: TopicName) -> dict[str, str]:
    """Custom metadata exactly as Pulsar's compactor writes it."""
    return {"application": "pulsar", "component": "compacted-ledger", "pulsar/compactedTopic": str(topic)}


async def scan(stack: Stack, admin: PulsarAdmin, bookie: BookieClient, ns: str) -> dict[int, Decision]:
    """The scanner of ``scan`` / ``audit``, on this namespace only (other tests make orphans elsewhere)."""
    async with Stores(f"zk:{stack.zookeeper_hosts}") as zk:
        snapshots = snapshot_cache(admin, WorkerSettings(), zk, ttl_s=0.5)
        report = await Scanner(bookie, snapshots, zk.pulsar, min_age_s=0, namespaces=[ns]).scan()
    return {d.ledger_id: d for d in report.decisions}


async def worker_outcomes(h: WorkerHarness, topic: TopicName, ledgers: list[int]) -> dict[int, Outcome]:
    async with open_decider(settings_of(h), dry_run=True) as decider:
        out = {}
        for lid in ledgers:
            info = PendingDeleteLedgerInfo(str(topic), LedgerComponent.COMPACTED_LEDGER, LedgerType.LEDGER, lid)
            out[lid] = (await decider.decide_info(info)).outcome
        return out


async def test_a_compacted_ledger_internal_stats_stops_naming_is_not_an_orphan(
    stack: Stack, unique: str, admin: PulsarAdmin, bookie: BookieClient, make_worker: WorkerFactory
) -> None:
    ns = await fresh_namespace(admin, f"ldw-compacted-{unique}")
    topic = TopicName.parse(f"persistent://{ns}/compacted-{unique}")
    produce_keyed(stack.service_url, topic, 20)
    # A leftover of an earlier compaction: created (and closed) before the compaction below.
    [leftover] = create_ledgers(stack, 1, compacted_metadata(topic))
    await compact(stack, topic)
    stats = await admin.internal_stats(topic)
    compacted = int(stats["compactedLedger"]["ledgerId"])
    assert compacted > leftover
    assert stats["cursors"]["__compaction"]["properties"] == {"CompactedTopicLedger": compacted}

    h = worker_config(make_worker, f"compacted-{unique}")
    await asyncio.sleep(max(0.0, settings_of(h).worker.min_ledger_age_s + 0.5))
    # While the topic names its compacted ledger: that one is in use, the older one an orphan.
    scanned = await scan(stack, admin, bookie, ns)
    assert {lid: scanned[lid].verdict for lid in (compacted, leftover)} == {
        compacted: Verdict.IN_USE,
        leftover: Verdict.ORPHAN,
    }
    assert await worker_outcomes(h, topic, [compacted, leftover]) == {
        compacted: Outcome.IN_USE,
        leftover: Outcome.WOULD_DELETE,
    }

    # The state to guard against: a __compaction cursor, no compacted ledger named anywhere.
    produce_keyed(stack.service_url, topic, 5)
    admin_call(stack, "POST", topic, "subscription/__compaction/skip_all")
    await admin.unload(topic)
    deadline = time.monotonic() + 30
    while True:
        stats = await admin.internal_stats(topic)
        if int(stats["compactedLedger"]["ledgerId"]) == -1 or time.monotonic() > deadline:
            break
        await asyncio.sleep(0.5)
    assert int(stats["compactedLedger"]["ledgerId"]) == -1
    assert "CompactedTopicLedger" not in (stats["cursors"]["__compaction"].get("properties") or {})
    md = await bookie.get_metadata(compacted)
    assert md is not None and md.state.upper() == "CLOSED"

    outcomes = await worker_outcomes(h, topic, [compacted, leftover])
    assert outcomes == {compacted: Outcome.IN_USE, leftover: Outcome.IN_USE}
    scanned = await scan(stack, admin, bookie, ns)
    assert {lid: scanned[lid].verdict for lid in (compacted, leftover)} == {
        compacted: Verdict.SKIPPED,
        leftover: Verdict.SKIPPED,
    }, scanned
    assert await bookie.get_metadata(compacted) is not None
