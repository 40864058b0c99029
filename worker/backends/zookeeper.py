"""ZooKeeper, the one metadata-store provider (Pulsar's ``ZKMetadataStoreProvider``, URL scheme ``zk``): the
:class:`~worker.core.metadata_stores.KeyValueStore` both roles are written over, on kazoo. The only module of
``worker`` that imports kazoo (an import-linter contract).

- kazoo's asynchronous calls are awaited from asyncio (:class:`KazooCalls`: no thread per call, answers handed
  to the loop in bursts, one timer per call). NoNode, BadVersion, NodeExists and NotEmpty are answers;
  everything else (connection loss, session expiry, no answer in time) becomes
  :class:`~worker.errors.BackendError`, which the daemon retries and never acks. A call made while the session
  is not connected fails at once: kazoo would queue it and wake its connection thread through a blocking
  socket that nobody reads while it reconnects, so a few hundred such calls blocked the event loop itself
  (and with it SIGTERM) until ZooKeeper came back.
- Every answered call's latency is kept by kind (:class:`StoreLatency`), the pace's signal (``worker.core.pace``).
- The client polls with kept epoll selectors (:class:`ReusedSelectorHandler`): kazoo's default builds,
  registers and closes one per poll, a large share of a busy process's CPU (bench/results/LOG.md).
- ZooKeeper's read-only multi (``multiRead``, 3.6+: :class:`MultiRead`) reads many znodes in one request;
  an older server gets single reads.
- An absence is proof only when read again after a ``sync`` (:meth:`ZooKeeperStore.exists_confirmed`): a read
  is served by whichever server the session is connected to, which may lag the leader.
"""

from __future__ import annotations

import asyncio
import functools
import selectors
import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar, TypeVar

from kazoo.client import KazooClient, _prefix_root
from kazoo.exceptions import (
    EXCEPTIONS,
    BadVersionError,
    KazooException,
    NodeExistsError,
    NoNodeError,
    NotEmptyError,
    UnimplementedError,
)
from kazoo.handlers.threading import KazooTimeoutError, SequentialThreadingHandler
from kazoo.handlers.utils import selector_select
from kazoo.protocol.serialization import MultiHeader, ZnodeStat, int_struct, read_buffer, stat_struct, write_string

from worker.backends.loop_handoff import LoopHandoff
from worker.core.metadata_stores import ChangedRecord
from worker.errors import BackendError

T = TypeVar("T")

Znode = tuple[bytes, ZnodeStat]


class ReusedSelectorHandler(SequentialThreadingHandler):  # type: ignore[misc]  # kazoo is untyped
    """kazoo's threading handler, polling with a kept selector instead of a new one per poll.

    kazoo's connection thread polls its socket for every request and reply, and its stock ``select``
    builds, registers and closes a fresh epoll selector each time, which shows in a profile of any process
    busy with ZooKeeper (bench/results/LOG.md, the ZooKeeper route's profile). A selector is kept per set of
    (file object, events) the connection polls (three sets per connection). The file objects themselves are
    the keys, so a reconnect's new socket can never be mistaken for a closed one that had the same descriptor number."""

    MAX_KEPT = 8
    # Not closed in stop(): kazoo may stop the handler while its connection thread is still in a poll.
    # The selectors go with the handler (an epoll object closes when collected).

    def __init__(self) -> None:
        super().__init__()
        # key -> (selector, the descriptors registered in it, in key order)
        self._kept: dict[tuple[tuple[Any, int], ...], tuple[selectors.BaseSelector, list[int]]] = {}

    def select(self, rlist: list[Any], wlist: list[Any], xlist: list[Any], timeout: float | None = None) -> Any:
        key = tuple((o, selectors.EVENT_READ) for o in rlist) + tuple((o, selectors.EVENT_WRITE) for o in wlist)
        fds = [_fd(o) for o, _ in key]
        if xlist or len(set(fds)) != len(fds):
            return selector_select(rlist, wlist, xlist, timeout)  # shapes kazoo's connection never polls
        kept = self._kept.get(key)
        if kept is None or kept[1] != fds:
            if kept is not None:
                kept[0].close()
            elif len(self._kept) >= self.MAX_KEPT:
                self._close_kept()
            sel = selectors.DefaultSelector()
            try:
                for fd, (_, ev) in zip(fds, key, strict=True):
                    sel.register(fd, ev)
            except (ValueError, OSError) as e:
                sel.close()
                raise ValueError("Invalid event mask or fd") from e
            kept = self._kept[key] = (sel, fds)
        ready = {k.fd: ev for k, ev in kept[0].select(timeout)}
        # fds are in key order: the read list's objects first, then the write list's.
        return (
            [o for o, fd in zip(rlist, fds, strict=False) if ready.get(fd, 0) & selectors.EVENT_READ],
            [o for o, fd in zip(wlist, fds[len(rlist) :], strict=True) if ready.get(fd, 0) & selectors.EVENT_WRITE],
            [],
        )

    def _close_kept(self) -> None:
        for sel, _ in self._kept.values():
            sel.close()
        self._kept.clear()


def _fd(o: Any) -> int:
    fd = o if isinstance(o, int) else o.fileno()
    if fd < 0:
        raise ValueError("Invalid event mask or fd")
    return int(fd)


def kazoo_client(hosts: str, timeout_s: float) -> KazooClient:
    """A KazooClient on :class:`ReusedSelectorHandler`."""
    return KazooClient(hosts=hosts, timeout=timeout_s, handler=ReusedSelectorHandler())


# Kinds of call: a write needs a quorum and a read does not, so each is compared with its own idle level.
READ = "read"
WRITE = "write"
# kazoo's methods (and the multiRead helper) by kind; anything else counts as a read.
_WRITES = frozenset({"delete_async", "set_async", "create_async", "commit_async"})

# Samples kept per kind between two drains: far more than a control interval needs, and a bound on memory
# should nobody drain them.
MAX_SAMPLES = 20_000


def kind_of(method_name: str) -> str:
    return WRITE if method_name in _WRITES else READ


class StoreLatency:
    def __init__(self) -> None:
        self._samples: dict[str, list[float]] = defaultdict(list)

    def record(self, kind: str, seconds: float) -> None:
        samples = self._samples[kind]
        if len(samples) < MAX_SAMPLES:
            samples.append(seconds)

    def drain(self) -> dict[str, list[float]]:
        """Every sample since the last drain, by kind."""
        out, self._samples = dict(self._samples), defaultdict(list)
        return out


ANSWERS = (NoNodeError, BadVersionError, NodeExistsError, NotEmptyError)


class KazooCalls:
    """Awaits kazoo's ``*_async`` methods on one client, each bounded by ``timeout_s``.

    No thread per call: kazoo completes its IAsyncResult on its own callback thread, and the answers reach
    the loop through one :class:`LoopHandoff` (one wake-up for a burst of answers). A thread hop per call
    through the default executor, then a wake-up per answer, were the ZooKeeper route's main costs
    (bench/results/LOG.md). The timeout is a timer on the future, not a ``wait_for`` task per call."""

    def __init__(self, timeout_s: float, connected: Callable[[], bool]) -> None:
        self.timeout_s = timeout_s
        self.connected = connected
        self._handoff: LoopHandoff | None = None
        # Every answered call's latency, by kind: the pace's signal (``worker.core.pace``).
        self.latency = StoreLatency()

    async def call(self, method: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        if not self.connected():
            raise BackendError("zookeeper", "not connected (the session is reconnecting)")
        loop = asyncio.get_running_loop()
        handoff = self._handoff
        if handoff is None or handoff.loop is not loop:
            handoff = self._handoff = LoopHandoff(loop)
        fut: asyncio.Future[Any] = loop.create_future()

        def settle(result: Any) -> None:  # on the loop
            if fut.done():
                return  # timed out or cancelled already: the answer has nobody to go to
            exc = result.exception
            if exc is not None:
                fut.set_exception(exc)
            else:
                fut.set_result(result.value)

        timer = loop.call_later(self.timeout_s, _expire, fut)
        # The answer's time is taken on kazoo's thread, when it arrives: a busy event loop must not read as
        # a slow store.
        answered: list[float] = []

        def on_answer(result: Any) -> None:  # on kazoo's thread
            answered.append(time.monotonic())
            handoff.call(settle, result)

        started = time.monotonic()
        try:
            method(*args, **kwargs).rawlink(on_answer)
            result = await fut
        except ANSWERS:
            self._took(method, started, answered)
            raise
        except TimeoutError as e:
            self._took(method, started, [started + self.timeout_s])  # at least that slow
            raise BackendError("zookeeper", f"no answer within {self.timeout_s}s") from e
        except (KazooTimeoutError, KazooException) as e:
            raise BackendError("zookeeper", f"{type(e).__name__}: {e}") from e
        finally:
            timer.cancel()
        self._took(method, started, answered)
        return result

    def _took(self, method: Callable[..., Any], started: float, answered: list[float]) -> None:
        if answered:
            self.latency.record(kind_of(getattr(method, "__name__", "")), answered[0] - started)


def _expire(fut: asyncio.Future[Any]) -> None:
    if not fut.done():
        fut.set_exception(TimeoutError())


OP_GET_DATA = 4
OP_ERROR = -1
_END = MultiHeader(-1, True, -1).serialize()


@dataclass(frozen=True, slots=True)
class MultiRead:
    """``getData`` of each path (already chroot-prefixed), answered in order: ``(data, stat)``, or the
    kazoo exception instance that operation failed with (``NoNodeError()`` for a missing znode)."""

    paths: tuple[str, ...]

    type: ClassVar[int] = 22  # OpCode.multiRead

    def serialize(self) -> bytearray:
        b = bytearray()
        head = MultiHeader(OP_GET_DATA, False, -1).serialize()
        for path in self.paths:
            b += head
            b += write_string(path)
            b.append(0)  # no watch
        b += _END
        return b

    @classmethod
    def deserialize(cls, buf: bytes, offset: int) -> list[tuple[bytes, ZnodeStat] | Exception]:
        out: list[tuple[bytes, ZnodeStat] | Exception] = []
        header, offset = MultiHeader.deserialize(buf, offset)
        while not header.done:
            if header.type == OP_GET_DATA:
                data, offset = read_buffer(buf, offset)
                stat = ZnodeStat._make(stat_struct.unpack_from(buf, offset))
                offset += stat_struct.size
                out.append((bytes(data or b""), stat))
            elif header.type == OP_ERROR:
                err = int_struct.unpack_from(buf, offset)[0]
                offset += int_struct.size
                out.append(EXCEPTIONS[err]())
            else:
                raise ValueError(f"unexpected operation type {header.type} in a multiRead answer")
            header, offset = MultiHeader.deserialize(buf, offset)
        return out


def multi_read_async(client: Any, paths: list[str]) -> Any:
    """Send one multiRead on ``client`` (a started ``KazooClient``); kazoo's IAsyncResult of the answers."""
    result = client.handler.async_result()
    client._call(MultiRead(tuple(_prefix_root(client.chroot, p) for p in paths)), result)
    return result


class ZooKeeperStore:
    """:class:`~worker.core.metadata_stores.KeyValueStore` on one ZooKeeper ensemble (``connect``:
    ``host:port[,host:port...][/chroot]``). ``start()`` before use, ``close()`` after."""

    def __init__(self, connect: str, *, timeout_s: float = 10.0) -> None:
        self.hosts = connect
        self.timeout_s = timeout_s
        self.client = kazoo_client(connect, timeout_s)
        self.calls = KazooCalls(timeout_s, lambda: bool(self.client.connected))
        self._multi_read = True  # until the server says it has no multiRead (ZooKeeper < 3.6)

    @property
    def where(self) -> str:
        return self.hosts

    async def start(self, timeout_s: float | None = None) -> None:
        try:
            await asyncio.to_thread(self.client.start, timeout_s or self.timeout_s)
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
        try:
            return await asyncio.to_thread(functools.partial(fn, *args, **kwargs))
        except ANSWERS:
            raise
        except (KazooTimeoutError, KazooException) as e:
            raise BackendError("zookeeper", f"{type(e).__name__}: {e}") from e

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
        """Reads made after it returns see every write the leader had committed when it started."""
        await self.calls.call(self.client.sync_async, path)

    async def exists_confirmed(self, path: str) -> ZnodeStat | None:
        """:meth:`exists`, with an absence read again after a :meth:`sync`: None is then the leader's answer
        as of a moment after this call began, not a lagging follower's."""
        stat = await self.exists(path)
        if stat is None:
            await self.sync(path)
            stat = await self.exists(path)
        return stat

    async def get_many(self, paths: list[str]) -> list[Znode | BaseException | None]:
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

    async def delete(self, path: str, version: int) -> bool:
        try:
            await self.calls.call(self.client.delete_async, path, version)
        except NoNodeError:
            return False  # gone already, possibly by an earlier attempt whose answer was lost with the connection
        except BadVersionError as e:
            raise ChangedRecord(path) from e
        return True

    async def delete_many(self, versioned: list[tuple[str, int]]) -> bool:
        """One ZooKeeper multi."""
        tx = self.client.transaction()
        for path, version in versioned:
            tx.delete(path, version)
        results = await self.calls.call(tx.commit_async)
        return all(r is True for r in results)

    async def set(self, path: str, data: bytes, version: int) -> int | None:
        try:
            stat = await self.calls.call(self.client.set_async, path, data, version)
        except (BadVersionError, NoNodeError):
            return None
        return int(stat.version)

    def drain_latency(self) -> dict[str, list[float]]:
        return self.calls.latency.drain()


def _znode_answer(path: str, answer: Znode | Exception) -> Znode | BaseException | None:
    """One multiRead answer as :meth:`ZooKeeperStore.get` gives it: a missing znode is None, any other error
    is a failed read (never an absence)."""
    if isinstance(answer, NoNodeError):
        return None
    if isinstance(answer, Exception):
        return BackendError("zookeeper", f"read {path}: {type(answer).__name__}")
    return answer


class ZooKeeperProvider:
    """Pulsar's ``MetadataStoreProvider`` for ZooKeeper: its URL scheme, and a store of ``servers`` under
    ``chroot`` ("" for none)."""

    url_scheme: ClassVar[str] = "zk"

    @staticmethod
    def create(servers: str, chroot: str, timeout_s: float) -> ZooKeeperStore:
        return ZooKeeperStore(servers + chroot, timeout_s=timeout_s)
