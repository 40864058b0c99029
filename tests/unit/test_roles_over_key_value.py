"""Both roles are written once over the key-value interface (``worker.core.metadata_stores.KeyValueStore``):
here over a store in memory, which is all another provider (Oxia) would have to be. No ZooKeeper."""

from __future__ import annotations

import json
from dataclasses import dataclass

import pytest

from testkit.managed_ledger_encoding import encode_managed_cursor_info, encode_managed_ledger_info
from worker.backends.bookkeeper_store import BookKeeperStore, LedgerMetadataChanged
from worker.backends.pulsar_store import PulsarStore
from worker.core.metadata_stores import BrokerUrls, ChangedRecord, KeyValueStore
from worker.formats.managed_ledger_metadata import LedgerInfo, ManagedCursorInfo, ManagedLedgerInfo
from worker.formats.metadata_paths import hierarchical_ledger_path, managed_ledger_path
from worker.formats.topic_name import TopicName

LAYOUT = b"2\norg.apache.bookkeeper.meta.HierarchicalLedgerManagerFactory:1\n"


@dataclass
class Stat:
    version: int
    ctime: int = 7
    mtime: int = 7


class MemoryStore:
    """A key-value store in a dict: a record per path, its parents implied."""

    where = "memory"

    def __init__(self, records: dict[str, bytes]) -> None:
        self.records = {p: (d, Stat(0)) for p, d in records.items()}

    async def get(self, path: str) -> tuple[bytes, Stat] | None:
        return self.records.get(path)

    async def get_many(self, paths: list[str]) -> list[tuple[bytes, Stat] | BaseException | None]:
        return [self.records.get(p) for p in paths]

    async def children(self, path: str) -> list[str] | None:
        below = {p[len(path) + 1 :].split("/")[0] for p in self.records if p.startswith(path.rstrip("/") + "/")}
        return sorted(below) if below or path in self.records else None

    async def exists(self, path: str) -> Stat | None:
        got = self.records.get(path)
        return got[1] if got else (Stat(0) if await self.children(path) else None)

    async def sync(self, path: str) -> None:
        pass

    async def exists_confirmed(self, path: str) -> Stat | None:
        return await self.exists(path)

    async def set(self, path: str, data: bytes, version: int) -> int | None:
        got = self.records.get(path)
        if got is None or got[1].version != version:
            return None
        self.records[path] = (data, Stat(version + 1))
        return version + 1

    async def delete(self, path: str, version: int) -> bool:
        got = self.records.get(path)
        if got is None:
            return False
        if got[1].version != version:
            raise ChangedRecord(path)
        del self.records[path]
        return True

    async def delete_many(self, versioned: list[tuple[str, int]]) -> bool:
        if any(p not in self.records or self.records[p][1].version != v for p, v in versioned):
            return False
        for p, _ in versioned:
            del self.records[p]
        return True

    def drain_latency(self) -> dict[str, list[float]]:
        return {}


def _kv(records: dict[str, bytes]) -> KeyValueStore:
    return MemoryStore(records)


async def test_pulsars_records_over_any_store() -> None:
    topic = TopicName.parse("persistent://t/ns/orders")
    ml = managed_ledger_path(topic)
    kv = _kv(
        {
            ml: encode_managed_ledger_info(ManagedLedgerInfo((LedgerInfo(3), LedgerInfo(5)))),
            f"{ml}/sub": encode_managed_cursor_info(ManagedCursorInfo(9, 5, 0)),
            "/admin/policies/t/ns": b'{"message_ttl_in_seconds": 60}',
            "/loadbalance/brokers/b1": json.dumps({"webServiceUrl": "http://b1:8080/"}).encode(),
            "/namespace/t/ns/0x0_0xf": json.dumps({"httpUrl": "http://b1:8080"}).encode(),
        }
    )
    store = PulsarStore(kv)
    stored = await store.stored_topic(topic)
    assert stored is not None and stored.ledger_ids == (3, 5) and stored.cursor_ledger_ids == {"sub": 9}
    assert await store.records_ledger(topic, 5) and await store.records_ledger(topic, 9, "sub")
    assert not await store.records_ledger(topic, 4)
    assert await store.stored_topic(TopicName.parse("persistent://t/ns/none")) is None
    assert [ns async for ns in store.namespaces()] == ["t/ns"]
    assert await store.persistent_topics("t/ns") == [topic]
    assert json.loads(await store.namespace_policies("t/ns") or b"") == {"message_ttl_in_seconds": 60}
    assert await store.brokers() == [BrokerUrls("b1", "http://b1:8080", None)]
    assert await store.bundle_owner("t/ns", "0x0_0xf") == BrokerUrls("0x0_0xf", "http://b1:8080", None)
    anchor = await store.anchor([], any_topic=True)
    assert anchor is not None and (anchor.topic, anchor.ledger_id) == (topic, 5)
    assert store.where == "zookeeper.metadata_store_url memory"


async def test_bookkeepers_records_over_any_store() -> None:
    kv = _kv(
        {
            "/ledgers/LAYOUT": LAYOUT,
            "/ledgers/available/bk1": b"",
            "/ledgers/available/readonly/bk2": b"",
            **{hierarchical_ledger_path(lid): b"md" for lid in (1, 2, 10_001)},
        }
    )
    store = BookKeeperStore(kv, ledgers_root="/ledgers")
    await store.check_layout()
    assert await store.registered_bookies() == {"bk1", "bk2"}
    assert await store.ledger_subtrees() == ["/ledgers/00/0000", "/ledgers/00/0001"]
    assert [lid for lid, _, _ in await store.read_subtree("/ledgers/00/0000")] == [1, 2]
    assert await store.ledger_metadata_version(2) == 0 and not await store.ledger_metadata_exists(3)
    assert await store.write_ledger_metadata(2, b"md2", 0) == 1
    with pytest.raises(LedgerMetadataChanged):
        await store.delete_ledger_metadata(2, expected_version=0)
    assert await store.delete_ledger_metadata(2) is True and await store.delete_ledger_metadata(2) is False
    assert not await store.delete_ledgers_metadata_together([(1, 0), (10_001, 3)])
    assert await store.delete_ledgers_metadata_together([(1, 0), (10_001, 0)])
    assert await store.ledger_subtrees() == []
