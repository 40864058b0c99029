"""``worker.backends.zookeeper``: an absence counts only when read again after a sync, and a server
without multiRead gets single reads."""

from __future__ import annotations

from typing import Any

import pytest
from kazoo.exceptions import UnimplementedError

from worker.backends.zookeeper import ZooKeeperStore
from worker.errors import BackendError


async def test_exists_confirmed_syncs_only_on_absence() -> None:
    calls: list[str] = []
    zk = ZooKeeperStore("127.0.0.1:1")
    answers: list[Any] = [None, "stat", "stat"]

    async def exists(path: str) -> Any:
        calls.append(f"exists {path}")
        return answers.pop(0)

    async def sync(path: str = "/") -> None:
        calls.append(f"sync {path}")

    zk.exists = exists  # type: ignore[method-assign]
    zk.sync = sync  # type: ignore[method-assign]
    assert await zk.exists_confirmed("/x") == "stat"
    assert calls == ["exists /x", "sync /x", "exists /x"]
    calls.clear()
    assert await zk.exists_confirmed("/y") == "stat"
    assert calls == ["exists /y"]


async def test_a_server_without_multi_read_gets_single_reads_from_then_on() -> None:
    """ZooKeeper before 3.6 answers an unknown request type with UNIMPLEMENTED: the reads of that batch,
    and every later batch, are made one by one (same answers), instead of failing forever."""
    zk = ZooKeeperStore("127.0.0.1:1")  # never started: every call below is replaced
    sent: list[str] = []

    async def call(method: object, *args: object) -> object:
        sent.append(getattr(method, "__name__", str(method)))
        try:
            raise UnimplementedError()
        except UnimplementedError as e:
            raise BackendError("zookeeper", "UnimplementedError") from e

    async def get(path: str) -> tuple[bytes, object] | None:
        sent.append(f"get {path}")
        return None if path.endswith("missing") else (path.encode(), None)

    zk.calls.call = call  # type: ignore[method-assign]
    zk.get = get  # type: ignore[method-assign]
    assert await zk.get_many(["/a", "/missing"]) == [(b"/a", None), None]
    assert sent == ["multi_read_async", "get /a", "get /missing"] and not zk._multi_read
    sent.clear()
    assert await zk.get_many(["/b", "/c"]) == [(b"/b", None), (b"/c", None)]
    assert sent == ["get /b", "get /c"]


async def test_any_other_failure_of_a_multi_read_fails_its_reads_and_keeps_multi_read() -> None:
    zk = ZooKeeperStore("127.0.0.1:1")

    async def call(method: object, *args: object) -> object:
        raise BackendError("zookeeper", "no answer within 10s")

    zk.calls.call = call  # type: ignore[method-assign]
    with pytest.raises(BackendError, match="no answer"):
        await zk.get_many(["/a", "/b"])
    assert zk._multi_read
