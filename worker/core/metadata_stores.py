"""The two metadata stores a Pulsar cluster keeps, one interface per role.

*Pulsar's metadata store* (the brokers' ``metadataStoreUrl``) holds the managed ledgers, their cursors and
the schema registry's locators: what a topic says it owns. *BookKeeper's metadata store* (the bookies'
``metadataServiceUri``) holds each ledger's metadata and the registered bookies: what exists in storage.
They may be one ZooKeeper ensemble, two, or another store; confusing them is how a worker would prove a
live ledger gone or an orphan missing. So every caller asks for the role it needs, by type: nothing that
reads a topic's records can delete a ledger's metadata, and nothing that deletes one can read a topic.

An implementation per store: ``worker.backends.pulsar_store`` and ``worker.backends.bookkeeper_store`` on
ZooKeeper (the only store Pulsar 4.0 and this project's tests run on). Another store (Oxia, which Pulsar
5.0 recommends) is one new implementation of each.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from worker.core.store_anchor import Anchor
from worker.formats.managed_ledger_metadata import ManagedCursorInfo, ManagedLedgerInfo
from worker.formats.topic_name import TopicName


class WrongMetadataStore(Exception):
    """A configured metadata store is not the one the config means; the message names the key."""


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


@dataclass(frozen=True, slots=True)
class TopicMetadata:
    """A topic's managed-ledger record and its cursor records, read one after the other (not atomically).

    ``cursors`` is keyed by the record's name: the cursor name as BookKeeper metadata records it
    (``pulsar/cursor``), i.e. the subscription name encoded like a topic's local name.
    """

    topic: TopicName
    path: str
    version: int
    managed_ledger: ManagedLedgerInfo
    cursors: Mapping[str, ManagedCursorInfo]

    @property
    def ledger_ids(self) -> tuple[int, ...]:
        return self.managed_ledger.ledger_ids

    @property
    def cursor_ledger_ids(self) -> dict[str, int]:
        return {name: c.cursors_ledger_id for name, c in self.cursors.items() if c.cursors_ledger_id >= 0}


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

    async def read_topic(self, topic: TopicName) -> TopicMetadata | None:
        """The topic's managed-ledger record with its cursors; None without one."""
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

    async def ledger_path(self, ledger_id: int) -> str:
        """Where the ledger's metadata record is (the ledger manager's layout)."""
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

    async def ledger_metadata_version(self, ledger_id: int) -> int | None:
        """The version of the ledger's metadata record; None when the ledger does not exist."""
        ...

    async def ledger_metadata_exists(self, ledger_id: int) -> bool: ...

    async def registered_bookies(self) -> frozenset[str]:
        """The bookie ids the store has registered (writable and read-only)."""
        ...

    async def delete_ledger_metadata(self, ledger_id: int, *, expected_version: int | None = None) -> bool:
        """Delete the ledger's metadata record at ``expected_version`` (default: the version read now). True
        if this call deleted it, False if it was gone; a changed record is not deleted (an error)."""
        ...

    async def delete_ledgers_metadata_together(self, versions: list[tuple[int, int]]) -> bool:
        """Delete several ledgers' records, each at its version, all or none. False when refused."""
        ...

    async def write_ledger_metadata(self, ledger_id: int, data: bytes, version: int) -> int | None:
        """Replace the ledger's metadata record at ``version``: its new version, or None when the record
        changed since (or is gone), and nothing was written."""
        ...

    async def bookie_registration(self, bookie_id: str) -> bytes | None:
        """What a bookie registered (its service info), writable or read-only; None when it is not registered."""
        ...

    async def probe(self) -> None:
        """One cheap read, so that the store's latency is known while the worker makes few calls."""
        ...

    def drain_latency(self) -> dict[str, list[float]]:
        """The latency of every call answered since the last drain, in seconds, by kind (read, write)."""
        ...
