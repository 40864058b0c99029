"""The proof that a topic is gone, and the one rule that makes it: the admin API says the topic does not
exist, *and* Pulsar's metadata store has no managed ledger for it. A topic that cannot be loaded (a broker
error, a bundle being moved) answers "not found" too; only the store's absence tells the two apart. Shared by
the worker's pipeline, ``scan``, the audit and ``purge-topic``.
"""

from __future__ import annotations

from typing import Protocol

from worker.errors import BackendError
from worker.formats.topic_name import TopicName


class GoneUnconfirmed(BackendError):
    """Half of the proof that a topic is gone is missing: the admin API says the topic does not exist
    while the metadata store still has its managed ledger (a topic that cannot be loaded is not a gone
    topic), or the other way round, or no metadata store is configured to ask. Transient: nothing is
    deleted on half a proof."""

    def __init__(self, topic: TopicName, why: str) -> None:
        super().__init__("admin", f"{topic} not proven gone: {why}")
        self.topic = topic


class ManagedLedgerRecords(Protocol):
    """Pulsar's metadata store's half of the proof (``worker.core.metadata_stores.PulsarMetadataStore``)."""

    async def managed_ledger_exists(self, ml_name: str, *, since: float | None = None) -> bool: ...


async def confirm_gone(topic: TopicName, store: ManagedLedgerRecords | None, *, since: float | None = None) -> None:
    """After the admin API said "not found": the topic is gone only if ``store`` has no managed ledger for it.
    ``since``: the asking message's dispatch (``worker.core.dispatch``). Raises :class:`GoneUnconfirmed`."""
    if store is None:
        raise GoneUnconfirmed(
            topic,
            "not found by the admin API, but no metadata store is configured to confirm it "
            "(zookeeper.metadata_store_url)",
        )
    if await store.managed_ledger_exists(topic.managed_ledger_name, since=since):
        raise GoneUnconfirmed(
            topic, "not found by the admin API, but its managed ledger still exists in the metadata store"
        )
