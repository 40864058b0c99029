"""The ZooKeeper delete route (``bookkeeper.delete_via: zookeeper``): a ledger read and deleted directly in
BookKeeper's metadata store, the delete versioned against the metadata that was judged, so a ledger
changed since it was inspected is not deleted. The bookies' garbage collector reclaims its entries."""

from __future__ import annotations

import asyncio
from typing import Any

from worker.backends.group_commit import GroupCommit
from worker.core.metadata_stores import BookKeeperMetadataStore
from worker.errors import BackendError
from worker.formats.ledger_metadata import LedgerMetadata, parse_serialized_metadata
from worker.formats.protobuf_wire import MetadataFormatError

# Deletes per ZooKeeper multi: a delete request is ~60 bytes, far below the server's 1 MB jute.maxbuffer.
MULTI_MAX = 500


class ZooKeeperLedgerStore:
    """:class:`~worker.backends.bookie_http.LedgerStore` straight on the metadata store
    (``bookkeeper.delete_via=zookeeper``): the ledger's metadata znode is read and parsed here, and the
    delete is versioned with the version that was verified, so metadata that changed in between (a
    ledger being closed, recovered or re-replicated) is never deleted on a stale verdict. Bookies then
    garbage-collect the entries of a ledger whose metadata is gone.

    Deletes made while others are in flight go out together as one ZooKeeper multi (``GroupCommit``),
    every delete in it versioned as above; a multi that ZooKeeper refuses (one ledger gone or changed in
    between) is retried as single deletes, so each ledger gets its own answer."""

    def __init__(self, store: BookKeeperMetadataStore, *, max_batch: int = MULTI_MAX) -> None:
        self.store = store
        self.deletes: GroupCommit[tuple[int, int], bool] = GroupCommit(self._commit, max_batch=max_batch)

    async def read(self, ledger_id: int, prefetched: Any = None) -> tuple[LedgerMetadata, object] | None:
        got = prefetched if prefetched is not None else await self.store.read_ledger_metadata(ledger_id)
        if got is None:
            return None
        data, stat = got
        try:
            return parse_serialized_metadata(ledger_id, data, int(stat.ctime)), int(stat.version)
        except MetadataFormatError as e:
            raise BackendError("zookeeper", f"ledger {ledger_id} metadata: {e}") from e

    async def delete(self, ledger_id: int, token: object = None) -> bool:
        if not isinstance(token, int):
            return await self.store.delete_ledger_metadata(ledger_id)
        return await self.deletes.submit((ledger_id, token))

    async def _commit(self, versions: list[tuple[int, int]]) -> list[bool | BaseException]:
        if len(versions) > 1 and await self.store.delete_ledgers_metadata_together(versions):
            return [True] * len(versions)
        singles = [self.store.delete_ledger_metadata(lid, expected_version=v) for lid, v in versions]
        return list(await asyncio.gather(*singles, return_exceptions=True))
