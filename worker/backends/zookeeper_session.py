"""One ZooKeeper ensemble's session, from asyncio: the generic reads both metadata stores are built on.

kazoo's asynchronous calls are awaited through ``worker.backends.kazoo_calls`` (errors mapped, latency
recorded for the pace); the blocking ones run in a thread (``run``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any, TypeVar

from kazoo.exceptions import KazooException, NoNodeError, UnimplementedError
from kazoo.handlers.threading import KazooTimeoutError
from kazoo.protocol.states import ZnodeStat

from worker.backends.kazoo_calls import KazooCalls, run_blocking
from worker.backends.kazoo_handler import kazoo_client
from worker.backends.multi_read import multi_read_async
from worker.errors import BackendError

T = TypeVar("T")

Znode = tuple[bytes, ZnodeStat]


class ZooKeeperSession:
    """A kazoo client of ``hosts`` with awaitable reads. ``start()`` before use, ``close()`` after."""

    def __init__(self, hosts: str, *, timeout_s: float = 10.0) -> None:
        self.hosts = hosts
        self.timeout_s = timeout_s
        self.client = kazoo_client(hosts, timeout_s)
        self.calls = KazooCalls(timeout_s)
        self._multi_read = True  # until the server says it has no multiRead (ZooKeeper < 3.6)

    async def start(self) -> None:
        try:
            await asyncio.to_thread(self.client.start, self.timeout_s)
        except (KazooTimeoutError, KazooException) as e:
            await asyncio.to_thread(self.shutdown)
            raise BackendError("zookeeper", f"cannot connect to {self.hosts}: {type(e).__name__}: {e}") from e

    def shutdown(self) -> None:
        self.client.stop()
        self.client.close()

    async def close(self) -> None:
        await asyncio.to_thread(self.shutdown)

    async def run(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """Run any blocking kazoo call in a thread with the same error mapping (for tools and tests)."""
        return await run_blocking(fn, *args, **kwargs)

    async def get(self, path: str) -> Znode | None:
        try:
            data, stat = await self.calls.call(self.client.get_async, path)
        except NoNodeError:
            return None
        return bytes(data or b""), stat

    async def children(self, path: str) -> list[str] | None:
        try:
            return list(await self.calls.call(self.client.get_children_async, path))
        except NoNodeError:
            return None

    async def exists(self, path: str) -> ZnodeStat | None:
        stat: ZnodeStat | None = await self.calls.call(self.client.exists_async, path)
        return stat

    async def sync(self, path: str = "/") -> None:
        """ZooKeeper's ``sync``: reads made after it returns see every write the leader had committed when it
        started. A read is served by whichever server the session is connected to, which may lag the
        leader, so an absence is proof only when read after a sync that started after the read that
        found it missing (:meth:`exists_confirmed`)."""
        await self.calls.call(self.client.sync_async, path)

    async def exists_confirmed(self, path: str) -> ZnodeStat | None:
        """:meth:`exists`, with an absence read again after a :meth:`sync`: None is then the leader's answer
        as of a moment after this call began, not a lagging follower's."""
        stat = await self.exists(path)
        if stat is None:
            await self.sync(path)
            stat = await self.exists(path)
        return stat

    async def read_many(self, paths: list[str]) -> list[Znode | BaseException | None]:
        """``paths`` read at once (one multiRead; single reads on a server without it), answered in order:
        a znode, None when it is missing, or the read's failure (never an absence)."""
        if len(paths) > 1 and self._multi_read:
            try:
                answers = await self.calls.call(multi_read_async, self.client, paths)
            except BackendError as e:
                if not isinstance(e.__cause__, UnimplementedError):
                    raise
                self._multi_read = False  # an old server: single reads from now on
            else:
                return [_znode_answer(path, a) for path, a in zip(paths, answers, strict=True)]
        return list(await asyncio.gather(*(self.get(p) for p in paths), return_exceptions=True))


def _znode_answer(path: str, answer: Znode | Exception) -> Znode | BaseException | None:
    """One multiRead answer as :meth:`ZooKeeperSession.get` gives it: a missing znode is None, any other
    error is a failed read (never an absence)."""
    if isinstance(answer, NoNodeError):
        return None
    if isinstance(answer, Exception):
        return BackendError("zookeeper", f"read {path}: {type(answer).__name__}")
    return answer
