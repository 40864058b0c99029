"""The two metadata stores a Pulsar cluster keeps, one interface per role.

*Pulsar's metadata store* (the brokers' ``metadataStoreUrl``) holds the managed ledgers, their cursors and
the schema registry's locators: what a topic says it owns. *BookKeeper's metadata store* (the bookies'
``metadataServiceUri``) holds each ledger's metadata and the registered bookies: what exists in storage.
They may be one ZooKeeper ensemble, two, or another store; confusing them is how a worker would prove a
live ledger gone or an orphan missing. So every caller asks for the role it needs, by type: nothing that
reads a topic's records can delete a ledger's metadata, and nothing that deletes one can read a topic.

Both roles are written once (``worker.backends.pulsar_store``, ``worker.backends.bookkeeper_store``), over the
:class:`KeyValueStore` below, as Pulsar writes its ``MetaStoreImpl`` once over its ``MetadataStore``. A store is
a provider of that interface chosen by the scheme of its URL (``worker.backends.stores``, modelled on Pulsar's
``MetadataStoreProvider``): ZooKeeper's (``worker.backends.zookeeper``, the only store Pulsar 4.0 and this
project's tests run on). Another store (Oxia, which Pulsar 5.0 recommends) is one new provider.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from worker.core.store_anchor import Anchor
from worker.errors import BackendError
from worker.formats.ledger_metadata import LedgerMetadata
from worker.formats.managed_ledger_metadata import ManagedCursorInfo, ManagedLedgerInfo
from worker.formats.topic_name import TopicName


class WrongMetadataStore(Exception):
    """A configured metadata store is not the one the config means; the message names the key."""


class UnreadableManagedLedger(BackendError):
    """A topic's managed-ledger record holds something that is not ManagedLedgerInfo."""

    def __init__(self, topic: TopicName, e: Exception) -> None:
        super().__init__("zookeeper", f"managed ledger of {topic}: {e}")
        self.topic = topic


class NoAnchor(WrongMetadataStore):
    """BookKeeper's store cannot be proven yet: Pulsar's store lists no ledger to look for there."""


class RecordStat(Protocol):
    """What the worker reads of a stored record's bookkeeping: its version (the compare-and-set token of a
    versioned delete), its creation time and the time of its last write (epoch ms)."""

    @property
    def version(self) -> int: ...

    @property
    def ctime(self) -> int: ...

    @property
    def mtime(self) -> int: ...


# A stored record: its bytes and their stat.
StoredRecord = tuple[bytes, RecordStat]


class KeyValueStore(Protocol):
    """A metadata store as both roles use it, and no more: records at paths, each with a version. What a
    provider implements (``worker.backends.zookeeper``). ``get`` and ``children``: None when there is no
    record (as the server this session reads sees it); ``get_many``: in order, a record, None or the read's
    failure; ``exists_confirmed``: an absence read again after a ``sync``, the leader's answer; ``set``: the
    new version, or None when the record changed or is gone; ``delete``: True if this call deleted it, False
    if it was gone, :class:`ChangedRecord` at another version; ``delete_many``: all or none, False when
    refused; ``drain_latency``: every call's seconds since the last drain, by kind (read, write)."""

    @property
    def where(self) -> str: ...

    async def get(self, path: str) -> StoredRecord | None: ...

    async def get_many(self, paths: list[str]) -> list[StoredRecord | BaseException | None]: ...

    async def children(self, path: str) -> list[str] | None: ...

    async def exists(self, path: str) -> RecordStat | None: ...

    async def sync(self, path: str) -> None: ...

    async def exists_confirmed(self, path: str) -> RecordStat | None: ...

    async def set(self, path: str, data: bytes, version: int) -> int | None: ...

    async def delete(self, path: str, version: int) -> bool: ...

    async def delete_many(self, versioned: list[tuple[str, int]]) -> bool: ...

    def drain_latency(self) -> dict[str, list[float]]: ...


class ChangedRecord(Exception):
    """A versioned write or delete found another version: someone else wrote the record."""


class MetadataStores(Protocol):
    """Both roles, connected (``worker.backends.stores.Stores``)."""

    @property
    def pulsar(self) -> PulsarMetadataStore: ...

    @property
    def bookkeeper(self) -> BookKeeperMetadataStore: ...


@dataclass(frozen=True, slots=True)
class StoredTopic:
    """A topic's records in Pulsar's metadata store, read one after the other (not atomically). ``cursors``
    is keyed by the record's name: the cursor name as BookKeeper metadata records it (``pulsar/cursor``),
    i.e. the subscription name encoded like a topic's local name."""

    topic: TopicName
    version: int
    managed_ledger: ManagedLedgerInfo
    cursors: Mapping[str, ManagedCursorInfo]
    schema_ledgers: frozenset[int]

    @property
    def ledger_ids(self) -> tuple[int, ...]:
        return self.managed_ledger.ledger_ids

    @property
    def cursor_ledger_ids(self) -> dict[str, int]:
        return {name: c.cursors_ledger_id for name, c in self.cursors.items() if c.cursors_ledger_id >= 0}


@dataclass(frozen=True, slots=True)
class BrokerUrls:
    """A live broker's admin endpoints as it registered them."""

    name: str
    http: str | None
    https: str | None

    def url(self, tls: bool) -> str | None:
        return self.https if tls else self.http


class PulsarMetadataStore(Protocol):
    """Pulsar's metadata store: what topics say they own."""

    @property
    def where(self) -> str:
        """The configuration key and address, for messages that must name them."""
        ...

    async def check(self, pending: TopicName | None) -> None:
        """Prove this is Pulsar's store: the pending topic's managed ledger is there (its partition 0 or the
        topic itself), or, with ``pending`` None, the managed-ledgers root. Raises :class:`WrongMetadataStore`."""
        ...

    async def managed_ledger_exists(self, ml_name: str, *, since: float | None = None) -> bool:
        """Whether the managed ledger has a record; an absence is the store leader's answer. ``since``: a
        concurrent read of the same record started at or after it may answer (``worker.core.dispatch``)."""
        ...

    async def read_managed_ledger(self, topic: TopicName) -> ManagedLedgerInfo | None:
        """The topic's managed-ledger record (ledgers with their offload state); None without one."""
        ...

    async def stored_topic(self, topic: TopicName) -> StoredTopic | None:
        """The topic's managed-ledger record with its cursors and schema ledgers; None without one (an absence
        confirmed after a sync). Reads of topics asked together go out together."""
        ...

    async def brokers(self) -> list[BrokerUrls]:
        """The brokers registered as live, with the admin URLs they advertise."""
        ...

    async def bundle_owner(self, namespace: str, bundle: str) -> BrokerUrls | None:
        """Which broker owns a bundle, or None when none does."""
        ...

    async def namespace_policies(self, namespace: str) -> bytes | None:
        """The namespace's policies record (JSON); None without one."""
        ...

    def namespaces(self) -> AsyncIterator[str]:
        """Every namespace with managed ledgers (``tenant/ns``, or a version-1 ``tenant/cluster/ns``)."""
        ...

    async def persistent_topics(self, namespace: str) -> list[TopicName]:
        """The persistent topics of ``namespace`` that have a managed-ledger record, in name order."""
        ...

    async def cursor_properties(self, topic: TopicName, cursor: str) -> Mapping[str, str] | None:
        """The stored properties of ``topic``'s cursor ``cursor``; None when the cursor has no record."""
        ...

    async def records_ledger(self, topic: TopicName, ledger_id: int, cursor: str | None = None) -> bool:
        """Whether ``topic``'s record names ``ledger_id``: its cursor ``cursor``'s ledger, or, without
        ``cursor``, its managed ledger's list."""
        ...

    async def schema_ledgers(self, schema_id: str) -> frozenset[int] | None:
        """The ledger ids the schema registry's locator references; None when the registry has no entry."""
        ...

    async def anchor(self, topics: Sequence[TopicName], *, any_topic: bool = False) -> Anchor | None:
        """The newest ledger the first of ``topics`` that lists one lists; with ``any_topic``, any topic's
        when none of ``topics`` lists one. None: no topic to anchor on."""
        ...


class BookKeeperMetadataStore(Protocol):
    """BookKeeper's metadata store: what ledgers exist, and the one place a ledger is deleted from."""

    @property
    def where(self) -> str:
        """The configuration keys and address, for messages that must name them."""
        ...

    async def check_layout(self) -> None:
        """Prove a ledgers root with a known ledger manager is there. Raises :class:`WrongMetadataStore`."""
        ...

    async def ledger_metadata_exists(self, ledger_id: int) -> bool:
        """An absence confirmed after a sync: it settles the bookie's ambiguous 500."""
        ...

    async def read_ledger_metadata(self, ledger_id: int) -> StoredRecord | None:
        """The ledger's metadata record; None when the ledger does not exist (an absence the store's leader
        confirms). Reads asked together may go out together, and the daemon may answer one its batch
        already read."""
        ...

    async def read_ledger_record(self, ledger_id: int) -> StoredRecord | None:
        """One read of the ledger's metadata record of its own, for a writer that must see its own writes
        (the recovery); None when it is missing."""
        ...

    async def read_ledgers_metadata(self, ledger_ids: list[int]) -> list[StoredRecord | BaseException | None]:
        """Many ledgers' metadata records at once, in order: a record, None when the ledger does not exist, or
        the read's failure (never an absence)."""
        ...

    async def registered_bookies(self) -> frozenset[str]:
        """The bookie ids the store has registered (writable and read-only)."""
        ...

    async def read(self, ledger_id: int, prefetched: Any = None) -> tuple[LedgerMetadata, object] | None:
        """The ledger's metadata and the token of :meth:`delete` (``worker.backends.bookie_http.LedgerStore``:
        the ZooKeeper delete route); ``prefetched``: its record as the daemon's batch read it."""
        ...

    async def delete(self, ledger_id: int, token: object = None) -> bool:
        """Delete the ledger's metadata at the version ``token`` that was verified."""
        ...

    async def write_ledger_metadata(self, ledger_id: int, data: bytes, version: int) -> int | None:
        """Replace the ledger's metadata record at ``version``: its new version, or None when the record
        changed since (or is gone), and nothing was written."""
        ...

    async def bookie_registration(self, bookie_id: str) -> bytes | None:
        """What a bookie registered (its service info), writable or read-only; None when it is not registered."""
        ...

    async def ledger_subtrees(self) -> list[str]:
        """The ledger manager's subtrees (``/ledgers/00/0000``: at most 10,000 ledgers each), for a walk."""
        ...

    async def read_subtree(self, subtree: str) -> list[tuple[int, bytes, int]]:
        """(ledger id, metadata bytes, creation ms) of every ledger under one of :meth:`ledger_subtrees`."""
        ...

    async def probe(self) -> None:
        """One cheap read, so that the store's latency is known while the worker makes few calls."""
        ...

    def drain_latency(self) -> dict[str, list[float]]:
        """The latency of every call answered since the last drain, in seconds, by kind (read, write)."""
        ...
