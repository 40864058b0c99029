"""Pulsar's metadata store on ZooKeeper (``zookeeper.hosts``): managed ledgers, their cursors and the schema
registry's locators, as the brokers stored them (``worker.core.metadata_stores.PulsarMetadataStore``).

Where managed ledgers sit in the store: ``worker.formats.metadata_paths``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from worker.backends.single_flight_reads import SingleFlightReads
from worker.backends.zookeeper_session import Znode, ZooKeeperSession
from worker.core.metadata_stores import TopicMetadata, WrongMetadataStore
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


class UnreadableManagedLedger(BackendError):
    """A topic's managed-ledger znode holds something that is not ManagedLedgerInfo."""

    def __init__(self, topic: TopicName, e: MetadataFormatError) -> None:
        super().__init__("zookeeper", f"managed ledger of {topic}: {e}")
        self.topic = topic


class ZooKeeperPulsarStore:
    """:class:`~worker.core.metadata_stores.PulsarMetadataStore` on a ZooKeeper session."""

    def __init__(self, session: ZooKeeperSession, *, key: str = "zookeeper.hosts") -> None:
        self.session = session
        self.key = key
        self._fresh_exists: SingleFlightReads[object | None] = SingleFlightReads()

    @property
    def where(self) -> str:
        return f"{self.key} {self.session.hosts}"

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
            if await self.session.exists(path) is not None:
                return
        raise WrongMetadataStore(
            f"{self.where}: not Pulsar's metadata store: {what} ({' nor '.join(paths)}), so no "
            f"topic could be proven gone. Point {self.key} at the brokers' metadataStoreUrl (with its "
            "chroot, if any); BookKeeper's metadata, when it lives in another ensemble, goes in "
            "zookeeper.bookkeeper_hosts or zookeeper.metadata_service_uri"
        )

    async def managed_ledger_exists(self, ml_name: str, *, since: float | None = None) -> bool:
        """Shared by the messages of one batch that ask for the same topic (``single_flight_reads``): a drained
        gone topic's proof is one read per batch, not one per message."""
        path = f"{MANAGED_LEDGERS_ROOT}/{ml_name}"
        return await self._fresh_exists.read(path, lambda: self.session.exists_confirmed(path), since) is not None

    async def read_managed_ledger(self, topic: TopicName) -> ManagedLedgerInfo | None:
        """The one reader of a topic's managed-ledger record (decisions, ``purge-topic``, the offload audit);
        :meth:`read_topic` parses its copy the same way. Raises :class:`UnreadableManagedLedger` on a bad
        record."""
        got = await self.session.get(managed_ledger_path(topic))
        return None if got is None else managed_ledger_of(topic, got[0])

    async def read_topic(self, topic: TopicName) -> TopicMetadata | None:
        path = managed_ledger_path(topic)
        got = await self.session.get(path)
        if got is None:
            return None
        data, stat = got
        cursors: dict[str, ManagedCursorInfo] = {}
        for name in sorted(await self.session.children(path) or []):
            cur = await self.session.get(f"{path}/{name}")
            if cur is None:
                continue  # the subscription was deleted between the listing and the read
            cursors[name] = parse_managed_cursor_info(cur[0])
        return TopicMetadata(topic, path, stat.version, managed_ledger_of(topic, data), cursors)

    async def cursor_properties(self, topic: TopicName, cursor: str) -> Mapping[str, str] | None:
        """``ManagedCursorInfo.cursorProperties`` of the cursor's znode (its name: ``cursor``)."""
        info = await self._cursor(topic, cursor)
        return None if info is None else info.cursor_properties

    async def records_ledger(self, topic: TopicName, ledger_id: int, cursor: str | None = None) -> bool:
        """The cursor's ``cursorsLedgerId`` (the cursor's znode name), or the managed ledger's list. No record:
        it does not."""
        if cursor is None:
            ml = await self.read_managed_ledger(topic)
            return ml is not None and ml.ledger(ledger_id) is not None
        info = await self._cursor(topic, cursor)
        return info is not None and info.cursors_ledger_id == ledger_id

    async def _cursor(self, topic: TopicName, cursor: str) -> ManagedCursorInfo | None:
        """The cursor's record; None without one. An unreadable one is a BackendError, never an absence."""
        got = await self.session.get(f"{managed_ledger_path(topic)}/{cursor}")
        if got is None:
            return None
        try:
            return parse_managed_cursor_info(got[0])
        except MetadataFormatError as e:
            raise BackendError("zookeeper", f"cursor {cursor} of {topic}: {e}") from e

    async def schema_ledgers(self, schema_id: str) -> frozenset[int] | None:
        """From the locator ``/schemas/<schemaId>``."""
        return schema_locator_ledgers(schema_id, await self.session.get(f"/schemas/{schema_id}"))

    async def anchor(self, topics: Sequence[TopicName], *, any_topic: bool = False) -> Anchor | None:
        found = await self._anchor(topics)
        if found is None and any_topic:
            found = await self._any_anchor()
        return found

    async def _anchor(self, topics: Sequence[TopicName]) -> Anchor | None:
        for topic in topics:
            info = await self.read_managed_ledger(topic)
            if info is not None and info.ledger_ids:
                return Anchor(topic, max(info.ledger_ids))
        return None

    async def _any_anchor(self, max_topics: int = 200) -> Anchor | None:
        """The first topic found under the managed-ledgers root (``tenant/ns/persistent/topic``) that lists
        a ledger; at most ``max_topics`` read."""
        read = 0
        children = self.session.children
        for tenant in sorted(await children(MANAGED_LEDGERS_ROOT) or []):
            for ns in sorted(await children(f"{MANAGED_LEDGERS_ROOT}/{tenant}") or []):
                base = f"{tenant}/{ns}/persistent"
                for encoded in sorted(await children(f"{MANAGED_LEDGERS_ROOT}/{base}") or []):
                    if read >= max_topics:
                        return None
                    read += 1
                    try:
                        topic = TopicName.from_managed_ledger_name(f"{base}/{encoded}")
                        found = await self._anchor([topic])
                    except (InvalidTopicName, UnreadableManagedLedger):
                        continue
                    if found is not None:
                        return found
        return None


def managed_ledger_of(topic: TopicName, data: bytes) -> ManagedLedgerInfo:
    try:
        return parse_managed_ledger_info(data)
    except MetadataFormatError as e:
        raise UnreadableManagedLedger(topic, e) from e


def schema_locator_ledgers(schema_id: str, znode: Znode | None) -> frozenset[int] | None:
    """The ledger ids a schema registry locator znode (``/schemas/<schemaId>``) references; None without one.
    Raises BackendError when it cannot be parsed: an unreadable locator is never an absence."""
    if znode is None:
        return None
    try:
        return parse_schema_locator(znode[0])
    except MetadataFormatError as e:
        raise BackendError("zookeeper", f"schema locator {schema_id}: {e}") from e
