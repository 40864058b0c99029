"""Pulsar's metadata store read directly, for what a broker would otherwise have to load a topic to say.

Every admin read of a persistent topic's state (``internalStats``, ``stats``, ``subscriptions``, ...) goes
through ``BrokerService.getTopicIfExists`` on Pulsar 4.0.8, which *loads* a topic that is not loaded:
ownership of its bundle, a new current ledger, a managed-ledger znode write, maybe a retention trim. What a
topic no broker has loaded uses is exactly what the metadata store records for it, and no broker writes
those records while the topic is not loaded, so they are read here instead:

- ``/managed-ledgers/<managed-ledger name>``: the ledger list with each ledger's offload state;
- one child znode per cursor: its ledger (``cursorsLedgerId``), its properties (delayed-delivery buckets)
  and its mark-delete position's properties (the ``__compaction`` cursor's compacted ledger);
- ``/schemas/<schema id>``: the schema registry's locator.

The pure rule that turns them into a live set is ``worker.core.live_set.LiveSet.from_stored`` (why it is safe
even when a broker loads the topic meanwhile: docs/design.md). The same reader gives the brokers that serve
(``/loadbalance/brokers``) and who owns a bundle (``/namespace/...``), which ``worker.broker.loaded_topics``
needs to ask only the broker that has a topic loaded. Paths are Pulsar 4.0.8's with its default
(modular) load manager; with the extensible one, bundle ownership is not kept there and every topic is read
from its records.

Used by ``scan``, the audit, ``purge-topic`` and the worker's owner route (``worker.broker.live_state_reader``).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Mapping
from dataclasses import dataclass

from worker.backends.group_commit import GroupCommit
from worker.backends.pulsar_store import managed_ledger_of, schema_locator_ledgers
from worker.backends.zookeeper_session import Znode, ZooKeeperSession
from worker.errors import BackendError
from worker.formats.managed_ledger_metadata import (
    ManagedCursorInfo,
    ManagedLedgerInfo,
    parse_managed_cursor_info,
)
from worker.formats.metadata_paths import managed_ledger_path
from worker.formats.protobuf_wire import MetadataFormatError
from worker.formats.topic_name import TopicName

# ModularLoadManagerImpl.LOADBALANCE_BROKERS_ROOT: one znode per live broker, its LocalBrokerData as JSON.
BROKERS_ROOT = "/loadbalance/brokers"
# OwnershipCache: one ephemeral znode per owned bundle, ``/namespace/<namespace>/<bundle range>``.
OWNERSHIP_ROOT = "/namespace"


@dataclass(frozen=True, slots=True)
class StoredTopic:
    """A topic's records in Pulsar's metadata store, read one after the other (not atomically)."""

    topic: TopicName
    version: int
    managed_ledger: ManagedLedgerInfo
    cursors: Mapping[str, ManagedCursorInfo]
    schema_ledgers: frozenset[int]


@dataclass(frozen=True, slots=True)
class BrokerUrls:
    """A live broker's admin endpoints as it registered them."""

    name: str
    http: str | None
    https: str | None

    def url(self, tls: bool) -> str | None:
        return self.https if tls else self.http


# Znodes per multiRead: a topic's records are a few hundred bytes, far below ZooKeeper's 1 MB jute.maxbuffer.
MULTI_READ_MAX = 128


class PulsarMetadata:
    """Reads of Pulsar's metadata store (``store``: the ZooKeeper session of ``zookeeper.hosts``).

    The znode reads of topics read at the same time go out together as ZooKeeper ``multiRead``s (a group
    commit of reads, ``worker.backends.group_commit``): each is still sent after it was asked for, so it is as
    fresh as a read of its own, and a scan of many topics costs a request per batch instead of per znode."""

    def __init__(self, store: ZooKeeperSession) -> None:
        self.store = store
        self._reads: GroupCommit[str, Znode | None] = GroupCommit(store.read_many, max_batch=MULTI_READ_MAX)

    async def _get(self, path: str) -> Znode | None:
        return await self._reads.submit(path)

    async def stored_topic(self, topic: TopicName) -> StoredTopic | None:
        """The topic's records, or None when it has no managed-ledger znode (an absence confirmed after a
        sync, as every absence the worker acts on). Raises BackendError when one is unreadable."""
        path = managed_ledger_path(topic)
        ml_read = asyncio.ensure_future(self._get(path))
        schema_read = asyncio.ensure_future(self._schema_ledgers(topic.schema_name))
        try:
            got = await ml_read
            if got is None and await self.store.exists_confirmed(path) is not None:
                got = await self.store.get(path)
            if got is None:
                return None
            data, stat = got
            managed_ledger = managed_ledger_of(topic, data)
            cursors = await self._cursors(topic, path)
            schema = await schema_read
        finally:
            for task in (ml_read, schema_read):
                if not task.done():
                    task.cancel()
                elif not task.cancelled():
                    task.exception()  # a failure already reported (or not needed) is not left unretrieved
        return StoredTopic(topic, int(stat.version), managed_ledger, cursors, schema or frozenset())

    async def _cursors(self, topic: TopicName, path: str) -> dict[str, ManagedCursorInfo]:
        names = sorted(await self.store.children(path) or [])
        reads = await asyncio.gather(*(self._get(f"{path}/{name}") for name in names))
        cursors: dict[str, ManagedCursorInfo] = {}
        for name, got in zip(names, reads, strict=True):
            if got is None:
                continue  # the subscription was deleted between the listing and the read
            try:
                cursors[name] = parse_managed_cursor_info(got[0])
            except MetadataFormatError as e:
                raise BackendError("zookeeper", f"cursor {name} of {topic}: {e}") from e
        return cursors

    async def _schema_ledgers(self, schema_id: str) -> frozenset[int] | None:
        """The schema registry locator's ledgers (``ZooKeeperPulsarStore.schema_ledgers``'s rule), read in a batch."""
        return schema_locator_ledgers(schema_id, await self._get(f"/schemas/{schema_id}"))

    async def brokers(self) -> list[BrokerUrls]:
        """The brokers registered as live, with the admin URLs they advertise."""
        out = []
        for name in sorted(await self.store.children(BROKERS_ROOT) or []):
            got = await self.store.get(f"{BROKERS_ROOT}/{name}")
            if got is None:
                continue  # gone since the listing
            data = _json_object(got[0])
            out.append(BrokerUrls(name, _url(data.get("webServiceUrl")), _url(data.get("webServiceUrlTls"))))
        return out

    async def bundle_owner(self, namespace: str, bundle: str) -> BrokerUrls | None:
        """Which broker owns a bundle (its ownership znode), or None when none does."""
        got = await self.store.get(f"{OWNERSHIP_ROOT}/{namespace}/{bundle}")
        if got is None:
            return None
        data = _json_object(got[0])
        if data.get("disabled") is True:
            return None  # being unloaded: its topics are closing
        return BrokerUrls(bundle, _url(data.get("httpUrl")), _url(data.get("httpUrlTls")))


def _json_object(data: bytes) -> dict[str, object]:
    try:
        d = json.loads(data or b"{}")
    except ValueError:
        return {}
    return d if isinstance(d, dict) else {}


def _url(value: object) -> str | None:
    return value.rstrip("/") if isinstance(value, str) and value.startswith(("http://", "https://")) else None
