"""``worker.backends.bookkeeper_store``: a missing ledger counts only when read again after a sync.

A ZooKeeper read is served by the server the session is connected to, which may lag the leader: a ledger
made just before its deletion was queued can read as missing there, and a missing ledger is settled as
already gone (its bytes then stay on the bookies for good). These tests pin the order of the calls; the
stack's single-server ZooKeeper cannot lag, so the order is what can be checked."""

from __future__ import annotations

from typing import Any

from worker.backends.bookkeeper_store import BookKeeperStore
from worker.backends.zookeeper import ZooKeeperStore
from worker.errors import BackendError

FOUND: Any = (b"metadata", object())


def _store(answers: list[list[Any]], calls: list[str], *, sync_fails: bool = False) -> BookKeeperStore:
    session = ZooKeeperStore("127.0.0.1:1")  # never connected: its reads are replaced

    async def get_many(paths: list[str]) -> list[Any]:
        calls.append(f"read {','.join(paths)}")
        return answers.pop(0)

    async def sync(path: str = "/") -> None:
        calls.append(f"sync {path}")
        if sync_fails:
            raise BackendError("zookeeper", "connection loss")

    session.get_many = get_many  # type: ignore[method-assign]
    session.sync = sync  # type: ignore[method-assign]
    return BookKeeperStore(session, ledgers_root="/ledgers")


async def test_a_missing_ledger_is_read_again_after_a_sync() -> None:
    calls: list[str] = []
    store = _store([[FOUND, None, None], [FOUND, None]], calls)
    got = await store._read_together(["/a", "/b", "/c"])
    assert calls == ["read /a,/b,/c", "sync /ledgers", "read /b,/c"]
    assert got == [FOUND, FOUND, None]  # /b had only lagged; /c is confirmed missing


async def test_found_ledgers_cost_no_sync() -> None:
    calls: list[str] = []
    store = _store([[FOUND, FOUND]], calls)
    assert await store._read_together(["/a", "/b"]) == [FOUND, FOUND]
    assert calls == ["read /a,/b"]


async def test_an_unconfirmed_absence_is_a_failed_read_never_an_absence() -> None:
    calls: list[str] = []
    store = _store([[None, FOUND]], calls, sync_fails=True)
    got = await store._read_together(["/a", "/b"])
    assert isinstance(got[0], BackendError) and got[1] is FOUND
