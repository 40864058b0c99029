"""The ZooKeeper delete route (``bookkeeper.delete_via: zookeeper``): a ledger read and deleted directly in
BookKeeper's metadata store, the delete versioned against the metadata that was judged, so a ledger
changed since it was inspected is not deleted. The bookies' garbage collector reclaims its entries."""

from __future__ import annotations

from worker.backends.zookeeper import ZooKeeper
from worker.errors import BackendError
from worker.formats.ledger_metadata import LedgerMetadata, parse_serialized_metadata
from worker.formats.protobuf_wire import MetadataFormatError


class ZooKeeperLedgerStore:
    """:class:`~worker.backends.bookie_http.LedgerStore` straight on the metadata store
    (``bookkeeper.delete_via=zookeeper``): the ledger's metadata znode is read and parsed here, and the
    delete is versioned with the version that was verified, so metadata that changed in between (a
    ledger being closed, recovered or re-replicated) is never deleted on a stale verdict. Bookies then
    garbage-collect the entries of a ledger whose metadata is gone."""

    def __init__(self, zk: ZooKeeper) -> None:
        self.zk = zk

    async def read(self, ledger_id: int) -> tuple[LedgerMetadata, object] | None:
        got = await self.zk.read_ledger_metadata(ledger_id)
        if got is None:
            return None
        data, stat = got
        try:
            return parse_serialized_metadata(ledger_id, data, int(stat.ctime)), int(stat.version)
        except MetadataFormatError as e:
            raise BackendError("zookeeper", f"ledger {ledger_id} metadata: {e}") from e

    async def delete(self, ledger_id: int, token: object = None) -> bool:
        version = token if isinstance(token, int) else None
        return await self.zk.delete_ledger_metadata(ledger_id, expected_version=version)
