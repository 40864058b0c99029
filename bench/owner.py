"""Owner-route orphans: ledgers a LIVE topic dropped from its metadata while BookKeeper kept them."""

from __future__ import annotations

import asyncio

from testkit.admin import StagingAdmin
from testkit.orphans import drop_ledgers_from_metadata, quiesce
from testkit.stack import Stack
from testkit.topics import ml_ledger_ids, produce
from worker.formats.topic_name import TopicName

NAMESPACE = "public/ldw-bench"
ENTRIES_PER_LEDGER = 5  # managedLedgerMaxEntriesPerLedger of the local stack


async def make(stack: Stack, admin: StagingAdmin, run_id: str, count: int) -> tuple[str, list[int]]:
    """A live topic with ``count`` (or a few fewer) of its ledgers orphaned; returns (topic, ids)."""
    await admin.ensure_namespace(NAMESPACE)
    # Infinite retention: with no subscription the broker would otherwise trim the ledgers by itself.
    await admin.set_retention(NAMESPACE, -1, -1)
    topic = f"persistent://{NAMESPACE}/owner-{run_id}"
    await asyncio.to_thread(produce, stack.service_url, topic, ENTRIES_PER_LEDGER * (count + 1))
    t = TopicName.parse(topic)
    await quiesce(admin, t)
    listed = sorted(ml_ledger_ids(await admin.internal_stats(t)))
    victims = listed[:-1][:count]  # never the current ledger
    return topic, await drop_ledgers_from_metadata(admin, stack.zookeeper_hosts, topic, victims)


async def remove(admin: StagingAdmin, topic: str) -> None:
    """Delete the topic (and, through the broker, the ledgers it still lists)."""
    await admin.delete_topic(TopicName.parse(topic), force=True)
