"""Pulsar's metadata store (``zookeeper.metadata_store_url``), written once over any
:class:`~worker.core.metadata_stores.KeyValueStore` (``worker.core.metadata_stores.PulsarMetadataStore``): the
managed ledgers (``/managed-ledgers/<name>``, one child per cursor: ``worker.formats.metadata_paths``), the
schema registry's locators (``/schemas/<id>``), namespace policies (``/admin/policies/<ns>``), the live brokers
(``/loadbalance/brokers``) and bundle owners (``/namespace/<ns>/<bundle>``, with Pulsar 4.0.8's default load
manager). What a topic no broker has loaded uses is exactly what these records say, read here without loading
it (``LiveSet.from_stored``, docs/design.md). Reads of topics read at the same time go out together
(``worker.backends.group_commit``), each still sent after it was asked for.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Mapping, Sequence

from worker.backends.group_commit import GroupCommit
from worker.backends.single_flight_reads import SingleFlightReads
from worker.core.metadata_stores import (
    BrokerUrls,
    KeyValueStore,
    StoredRecord,
    StoredTopic,
    UnreadableManagedLedger,
    WrongMetadataStore,
)
from worker.core.store_anchor import Anchor
from worker.errors import BackendError
from worker.formats.managed_ledger_metadata import (
    ManagedCursorInfo,
    ManagedLedgerInfo,
    parse_managed_cursor_info,
    parse_managed_ledger_info,
    parse_schema_locator,
)
from worker.formats.metadata_paths import MANAGED_LEDGERS_ROOT, managed_ledger_path
from worker.formats.protobuf_wire import MetadataFormatError
from worker.formats.topic_name import InvalidTopicName, TopicName

# ModularLoadManagerImpl.LOADBALANCE_BROKERS_ROOT: one record per live broker, its LocalBrokerData as JSON.
BROKERS_ROOT = "/loadbalance/brokers"
# OwnershipCache: one ephemeral record per owned bundle, ``/namespace/<namespace>/<bundle range>``.
OWNERSHIP_ROOT = "/namespace"
POLICIES_ROOT = "/admin/policies"
# Records per read-together: a topic's records are a few hundred bytes, far below ZooKeeper's 1 MB jute.maxbuffer.
MULTI_READ_MAX = 128


class PulsarStore:
    """:class:`~worker.core.metadata_stores.PulsarMetadataStore` on a key-value store; ``key`` names the
    setting that points at it, for messages."""

    def __init__(self, kv: KeyValueStore, *, key: str = "zookeeper.metadata_store_url") -> None:
        self.kv = kv
        self.key = key
        self._fresh_exists: SingleFlightReads[object | None] = SingleFlightReads()
        self._reads: GroupCommit[str, StoredRecord | None] = GroupCommit(kv.get_many, max_batch=MULTI_READ_MAX)

    @property
    def where(self) -> str:
        return f"{self.key} {self.kv.where}"

    async def check(self, pending: TopicName | None) -> None:
        """Without this, a store that holds no managed ledgers (BookKeeper's own ensemble, a wrong chroot)
        confirms every admin "not found" as a gone topic."""
        if pending is None:
            paths = [MANAGED_LEDGERS_ROOT]
            what = "it has no managed ledgers at all"
        else:
            paths = [managed_ledger_path(pending.partition(0)), managed_ledger_path(pending)]
            what = f"the pending topic {pending} has no managed ledger there"
        for path in paths:
            if await self.kv.exists(path) is not None:
                return
        raise WrongMetadataStore(
            f"{self.where}: not Pulsar's metadata store: {what} ({' nor '.join(paths)}), so no "
            f"topic could be proven gone. Point {self.key} at the brokers' metadataStoreUrl (with its "
            "chroot, if any); BookKeeper's metadata, when it lives elsewhere, goes in zookeeper.metadata_service_uri"
        )

    async def managed_ledger_exists(self, ml_name: str, *, since: float | None = None) -> bool:
        """Shared by the messages of one batch that ask for the same topic (``single_flight_reads``): a drained
        gone topic's proof is one read per batch, not one per message."""
        path = f"{MANAGED_LEDGERS_ROOT}/{ml_name}"
        return await self._fresh_exists.read(path, lambda: self.kv.exists_confirmed(path), since) is not None

    async def read_managed_ledger(self, topic: TopicName) -> ManagedLedgerInfo | None:
        """The one reader of a topic's managed-ledger record (decisions, ``purge-topic``, the offload audit).
        Raises :class:`UnreadableManagedLedger` on a bad record."""
        got = await self.kv.get(managed_ledger_path(topic))
        return None if got is None else managed_ledger_of(topic, got[0])

    async def stored_topic(self, topic: TopicName) -> StoredTopic | None:
        """The topic's records, or None when it has no managed-ledger record (an absence confirmed after a
        sync, as every absence the worker acts on). Raises BackendError when one is unreadable."""
        path = managed_ledger_path(topic)
        ml_read = asyncio.ensure_future(self._reads.submit(path))
        schema_read = asyncio.ensure_future(self._reads.submit(f"/schemas/{topic.schema_name}"))
        try:
            got = await ml_read
            if got is None and await self.kv.exists_confirmed(path) is not None:
                got = await self.kv.get(path)
            if got is None:
                return None
            data, stat = got
            managed_ledger = managed_ledger_of(topic, data)
            cursors = await self._cursors(topic, path)
            schema = schema_locator_ledgers(topic.schema_name, await schema_read)
        finally:
            for task in (ml_read, schema_read):
                if not task.done():
                    task.cancel()
                elif not task.cancelled():
                    task.exception()  # a failure already reported (or not needed) is not left unretrieved
        return StoredTopic(topic, int(stat.version), managed_ledger, cursors, schema or frozenset())

    async def _cursors(self, topic: TopicName, path: str) -> dict[str, ManagedCursorInfo]:
        names = sorted(await self.kv.children(path) or [])
        reads = await asyncio.gather(*(self._reads.submit(f"{path}/{name}") for name in names))
        cursors: dict[str, ManagedCursorInfo] = {}
        for name, got in zip(names, reads, strict=True):
            if got is None:
                continue  # the subscription was deleted between the listing and the read
            cursors[name] = _cursor_of(topic, name, got[0])
        return cursors

    async def cursor_properties(self, topic: TopicName, cursor: str) -> Mapping[str, str] | None:
        """``ManagedCursorInfo.cursorProperties`` of the cursor's record (its name: ``cursor``)."""
        info = await self._cursor(topic, cursor)
        return None if info is None else info.cursor_properties

    async def records_ledger(self, topic: TopicName, ledger_id: int, cursor: str | None = None) -> bool:
        """The cursor's ``cursorsLedgerId`` (the cursor's record name), or the managed ledger's list. No record:
        it does not."""
        if cursor is None:
            ml = await self.read_managed_ledger(topic)
            return ml is not None and ml.ledger(ledger_id) is not None
        info = await self._cursor(topic, cursor)
        return info is not None and info.cursors_ledger_id == ledger_id

    async def _cursor(self, topic: TopicName, cursor: str) -> ManagedCursorInfo | None:
        """The cursor's record; None without one. An unreadable one is a BackendError, never an absence."""
        got = await self.kv.get(f"{managed_ledger_path(topic)}/{cursor}")
        return None if got is None else _cursor_of(topic, cursor, got[0])

    async def schema_ledgers(self, schema_id: str) -> frozenset[int] | None:
        """From the locator ``/schemas/<schemaId>``."""
        return schema_locator_ledgers(schema_id, await self.kv.get(f"/schemas/{schema_id}"))

    async def anchor(self, topics: Sequence[TopicName], *, any_topic: bool = False) -> Anchor | None:
        found = await self._anchor(topics)
        if found is None and any_topic:
            found = await self._any_anchor()
        return found

    async def _anchor(self, topics: Sequence[TopicName]) -> Anchor | None:
        for topic in topics:
            try:
                info = await self.read_managed_ledger(topic)
            except UnreadableManagedLedger:
                continue  # any topic that lists a ledger proves the store: another one will do
            if info is not None and info.ledger_ids:
                return Anchor(topic, max(info.ledger_ids))
        return None

    async def _any_anchor(self, max_topics: int = 200) -> Anchor | None:
        """The first topic found that lists a ledger; at most ``max_topics`` read."""
        read = 0
        async for ns in self.namespaces():
            for topic in await self.persistent_topics(ns):
                if read >= max_topics:
                    return None
                read += 1
                found = await self._anchor([topic])
                if found is not None:
                    return found
        return None

    async def namespaces(self) -> AsyncIterator[str]:
        children = self.kv.children
        for tenant in sorted(await children(MANAGED_LEDGERS_ROOT) or []):
            for ns in sorted(await children(f"{MANAGED_LEDGERS_ROOT}/{tenant}") or []):
                below = await children(f"{MANAGED_LEDGERS_ROOT}/{tenant}/{ns}") or []
                if "persistent" in below:
                    yield f"{tenant}/{ns}"
                    continue
                # A version-1 name: tenant/cluster/namespace.
                for v1 in sorted(below):
                    yield f"{tenant}/{ns}/{v1}"

    async def persistent_topics(self, namespace: str) -> list[TopicName]:
        base = f"{namespace}/persistent"
        out = []
        for encoded in sorted(await self.kv.children(f"{MANAGED_LEDGERS_ROOT}/{base}") or []):
            try:
                out.append(TopicName.from_managed_ledger_name(f"{base}/{encoded}"))
            except InvalidTopicName:
                continue
        return out

    async def namespace_policies(self, namespace: str) -> bytes | None:
        got = await self.kv.get(f"{POLICIES_ROOT}/{namespace}")
        return None if got is None else got[0]

    async def brokers(self) -> list[BrokerUrls]:
        out = []
        for name in sorted(await self.kv.children(BROKERS_ROOT) or []):
            got = await self.kv.get(f"{BROKERS_ROOT}/{name}")
            if got is None:
                continue  # gone since the listing
            data = _json_object(got[0])
            out.append(BrokerUrls(name, _url(data.get("webServiceUrl")), _url(data.get("webServiceUrlTls"))))
        return out

    async def bundle_owner(self, namespace: str, bundle: str) -> BrokerUrls | None:
        got = await self.kv.get(f"{OWNERSHIP_ROOT}/{namespace}/{bundle}")
        if got is None:
            return None
        data = _json_object(got[0])
        if data.get("disabled") is True:
            return None  # being unloaded: its topics are closing
        return BrokerUrls(bundle, _url(data.get("httpUrl")), _url(data.get("httpUrlTls")))


def managed_ledger_of(topic: TopicName, data: bytes) -> ManagedLedgerInfo:
    try:
        return parse_managed_ledger_info(data)
    except MetadataFormatError as e:
        raise UnreadableManagedLedger(topic, e) from e


def _cursor_of(topic: TopicName, cursor: str, data: bytes) -> ManagedCursorInfo:
    try:
        return parse_managed_cursor_info(data)
    except MetadataFormatError as e:
        raise BackendError("zookeeper", f"cursor {cursor} of {topic}: {e}") from e


def schema_locator_ledgers(schema_id: str, record: StoredRecord | None) -> frozenset[int] | None:
    """The ledger ids a schema registry locator (``/schemas/<schemaId>``) references; None without one.
    Raises BackendError when it cannot be parsed: an unreadable locator is never an absence."""
    if record is None:
        return None
    try:
        return parse_schema_locator(record[0])
    except MetadataFormatError as e:
        raise BackendError("zookeeper", f"schema locator {schema_id}: {e}") from e


def _json_object(data: bytes) -> dict[str, object]:
    try:
        d = json.loads(data or b"{}")
    except ValueError:
        return {}
    return d if isinstance(d, dict) else {}


def _url(value: object) -> str | None:
    return value.rstrip("/") if isinstance(value, str) and value.startswith(("http://", "https://")) else None
