"""BookKeeper's ledger metadata read from its metadata store directly (the hierarchical layout's tree, walked
subtree by subtree: ``BookKeeperMetadataStore.ledger_subtrees``/``read_subtree``): what ``scan`` uses by
default when a metadata store is configured (:class:`LedgerWalk`, one subtree held at a time), and the
listing of metadata already read (:class:`MetadataListing`, the Spark audit's partition), and the walk from
blocking code (:func:`read_subtrees`: Spark's executors, tools).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

from worker.backends.stores import bookkeeper_store
from worker.core.metadata_stores import BookKeeperMetadataStore
from worker.formats.ledger_metadata import LedgerMetadata, parse_serialized_metadata
from worker.formats.protobuf_wire import MetadataFormatError

# A batch job can wait for a busy ensemble; a slow connect must not fail a whole run.
CONNECT_TIMEOUT_FACTOR = 6

T = TypeVar("T")


def parsed(rows: list[tuple[int, bytes, int]]) -> list[LedgerMetadata]:
    """A record whose content is not BookKeeper metadata is left out, as the bookie's own listing would."""
    out = []
    for lid, data, ctime in rows:
        try:
            out.append(parse_serialized_metadata(lid, data, ctime))
        except MetadataFormatError:
            continue
    return out


class LedgerWalk:
    """``scan``'s listing: the ledgers root walked one second-level subtree (at most 10,000 ledgers) at a
    time, so that no more than one subtree's metadata is held at once."""

    def __init__(self, store: BookKeeperMetadataStore) -> None:
        self.store = store
        self.subtrees = 0

    async def chunks(self) -> AsyncIterator[list[LedgerMetadata]]:
        """Raises BackendError when the store cannot be read."""
        paths = await self.store.ledger_subtrees()
        self.subtrees = len(paths)
        for base in paths:
            yield parsed(await self.store.read_subtree(base))


class MetadataListing:
    """The scanner's ledger listing from metadata already read (the Spark audit's partition, or ``scan``'s
    walk of the metadata store)."""

    def __init__(self, metadata: dict[int, LedgerMetadata]) -> None:
        self.metadata = metadata

    async def list_ledger_ids(self) -> list[int]:
        return sorted(self.metadata)

    async def get_metadata(self, ledger_id: int) -> LedgerMetadata | None:
        return self.metadata.get(ledger_id)

    async def chunks(self) -> AsyncIterator[list[LedgerMetadata]]:
        """All of it as one chunk: it was read at one time."""
        yield [self.metadata[lid] for lid in sorted(self.metadata)]


def ledger_subtrees(metadata_service_uri: str, timeout_s: float = 10) -> list[str]:
    """:meth:`BookKeeperMetadataStore.ledger_subtrees`, from blocking code (Spark's executors, tools)."""
    return _blocking(metadata_service_uri, timeout_s, lambda store: store.ledger_subtrees())


def read_subtrees(
    metadata_service_uri: str, subtrees: Iterable[str], timeout_s: float = 10
) -> list[tuple[int, bytes, int]]:
    """(ledger_id, metadata bytes, creation ms) of every ledger under ``subtrees``, from blocking code."""

    async def read(store: BookKeeperMetadataStore) -> list[tuple[int, bytes, int]]:
        return [row for base in subtrees for row in await store.read_subtree(base)]

    return _blocking(metadata_service_uri, timeout_s, read)


def _blocking(uri: str, timeout_s: float, fn: Callable[[BookKeeperMetadataStore], Awaitable[T]]) -> T:
    """``fn`` of BookKeeper's store alone, on a session and a loop of its own, in a thread of its own (a
    caller's running loop, if any, is not in the way)."""

    async def run() -> T:
        kv, store = bookkeeper_store(uri, timeout_s=timeout_s)
        # A batch job can wait for a busy ensemble; a task failing on a slow connect fails the whole run.
        await kv.start(CONNECT_TIMEOUT_FACTOR * timeout_s)
        try:
            return await fn(store)
        finally:
            await kv.close()

    with ThreadPoolExecutor(1) as thread:
        return thread.submit(asyncio.run, run()).result()
