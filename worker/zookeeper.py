"""Pulsar's and BookKeeper's metadata in ZooKeeper, from asyncio.

Two stores, which may be two ensembles (a supported Pulsar layout): Pulsar's metadata store
(``zookeeper.hosts``: managed ledgers, cursors, schemas) and BookKeeper's (``zookeeper.bookkeeper_hosts``,
by default the same: the ledgers root with ledger metadata and registered bookies). One kazoo client per
distinct ensemble; every managed-ledger or schema read goes to Pulsar's, every ledger read or delete to
BookKeeper's. Neither is trusted blindly: :meth:`ZooKeeper.check_pulsar_store` and
:meth:`ZooKeeper.check_bookkeeper_store` prove at start that each is where the config says (a store
that lacks ``/managed-ledgers`` would make every admin "not found" look like a gone topic).

Two uses:
- read a topic's managed-ledger metadata (``/managed-ledgers/<tenant>/<ns>/persistent/<encoded name>`` and
  one child znode per cursor) as the broker stored it, e.g. to learn which offload attempt (uuid) the topic
  records for a ledger;
- delete a ledger directly in BookKeeper's metadata store (docs/design.md step 5, "ZooKeeper, versioned delete"):
  once a ledger's znode is gone, the bookies' garbage collector reclaims its entries.

Facts this module relies on (Pulsar 4.0 standalone, checked on the local stack and in the sources):
- ``/ledgers/LAYOUT`` names the ledger manager; Pulsar's own PulsarLedgerManager (the one its brokers and
  bookies use) and BookKeeper's HierarchicalLedgerManager put ledger ``id < Integer.MAX_VALUE`` at
  ``/ledgers/00/0000/L0042`` (``%010d`` split 2-4-4) and larger ids at
  ``/ledgers/000/0000/0000/0000/L0042`` (``%019d`` split 3-4-4-4-4). LongHierarchicalLedgerManager uses
  the long form for every id. Any other layout is refused rather than guessed.
- Kazoo runs its I/O on its own threads. Every call goes through kazoo's ``*_async`` API, its result is
  handed to the event loop by a callback (no executor thread per call) and awaited with a timeout, so a
  lost ZooKeeper connection surfaces as :class:`BackendError` instead of a stuck task.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import selectors
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass
from types import TracebackType
from typing import Any, TypeVar

from kazoo.client import KazooClient
from kazoo.exceptions import (
    BadVersionError,
    KazooException,
    NodeExistsError,
    NoNodeError,
    NotEmptyError,
)
from kazoo.handlers.threading import KazooTimeoutError, SequentialThreadingHandler
from kazoo.handlers.utils import selector_select
from kazoo.protocol.states import ZnodeStat

from worker.bookkeeper import LedgerMetadata, parse_serialized_metadata
from worker.http import BackendError
from worker.managed_ledger_metadata import (
    ManagedCursorInfo,
    ManagedLedgerInfo,
    parse_managed_cursor_info,
    parse_managed_ledger_info,
    parse_schema_locator,
)
from worker.protobuf_wire import MetadataFormatError
from worker.settings import ZooKeeperSettings
from worker.topic_name import TopicName


class ReusedSelectorHandler(SequentialThreadingHandler):  # type: ignore[misc]  # kazoo is untyped
    """kazoo's threading handler, polling with a kept selector instead of a new one per poll.

    kazoo's connection thread polls its socket for every request and reply, and its stock ``select``
    builds, registers and closes a fresh epoll selector each time: 14 % of the whole process's CPU in a
    profile of the DLQ replay on the ZooKeeper route. A selector is kept per set of (file object, events)
    the connection polls (three sets per connection). The file objects themselves are the keys, so a
    reconnect's new socket can never be mistaken for a closed one that had the same descriptor number."""

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


T = TypeVar("T")

MANAGED_LEDGERS_ROOT = "/managed-ledgers"
_INT_MAX = 2**31 - 1
_LONG_MAX = 2**63 - 1

# Errors that are answers, not failures: callers decide what they mean.
_SEMANTIC = (NoNodeError, BadVersionError, NodeExistsError, NotEmptyError)


class LedgerMetadataChanged(BackendError):
    """The ledger's metadata znode changed between our read and our delete (someone is writing it)."""

    def __init__(self, ledger_id: int) -> None:
        super().__init__("zookeeper", f"metadata of ledger {ledger_id} changed during the delete; not deleted")
        self.ledger_id = ledger_id


class UnsupportedLedgerLayout(Exception):
    """``/ledgers/LAYOUT`` names a ledger manager whose paths this module does not know."""


class UnreadableManagedLedger(BackendError):
    """A topic's managed-ledger znode holds something that is not ManagedLedgerInfo."""

    def __init__(self, topic: TopicName, e: MetadataFormatError) -> None:
        super().__init__("zookeeper", f"managed ledger of {topic}: {e}")
        self.topic = topic


class WrongMetadataStore(Exception):
    """A configured metadata store is not the one the config means; the message names the key."""


def managed_ledger_path(topic: TopicName) -> str:
    """The topic's managed-ledger znode (``TopicName.getPersistenceNamingEncoding`` under the root)."""
    return f"{MANAGED_LEDGERS_ROOT}/{topic.managed_ledger_name}"


def _short_path(ledger_id: int) -> str:
    s = f"{ledger_id:010d}"
    return f"/{s[0:2]}/{s[2:6]}/L{s[6:10]}"


def _long_path(ledger_id: int) -> str:
    s = f"{ledger_id:019d}"
    return f"/{s[0:3]}/{s[3:7]}/{s[7:11]}/{s[11:15]}/L{s[15:19]}"


def hierarchical_ledger_path(ledger_id: int, root: str = "/ledgers") -> str:
    """BookKeeper's ``StringUtils.getHybridHierarchicalLedgerPath`` under ``root``."""
    _check_id(ledger_id)
    # Strictly below Integer.MAX_VALUE, as in BookKeeper: MAX_VALUE itself takes the long form.
    return root + (_short_path(ledger_id) if ledger_id < _INT_MAX else _long_path(ledger_id))


def long_hierarchical_ledger_path(ledger_id: int, root: str = "/ledgers") -> str:
    _check_id(ledger_id)
    return root + _long_path(ledger_id)


def _check_id(ledger_id: int) -> None:
    if not isinstance(ledger_id, int) or not 0 <= ledger_id <= _LONG_MAX:
        raise ValueError(f"not a ledger id: {ledger_id!r}")


_LAYOUTS: dict[str, Callable[[int, str], str]] = {
    "org.apache.bookkeeper.meta.HierarchicalLedgerManagerFactory": hierarchical_ledger_path,
    "org.apache.bookkeeper.meta.LongHierarchicalLedgerManagerFactory": long_hierarchical_ledger_path,
    # Pulsar's own factory (metadata-store driver) builds a PulsarLedgerManager: the same hybrid paths.
    "org.apache.pulsar.metadata.bookkeeper.PulsarLedgerManagerFactory": hierarchical_ledger_path,
}


def parse_layout(data: bytes) -> Callable[[int, str], str]:
    """``/ledgers/LAYOUT`` is ``<layout format version>\\n<factory class>:<factory version>``."""
    try:
        lines = data.decode("utf-8").strip().splitlines()
        factory = lines[1].rsplit(":", 1)[0].strip()
    except (UnicodeDecodeError, IndexError) as e:
        raise UnsupportedLedgerLayout(f"unreadable ledger layout {data!r}") from e
    path_fn = _LAYOUTS.get(factory)
    if path_fn is None:
        raise UnsupportedLedgerLayout(f"ledger manager {factory!r} is not supported (known: {sorted(_LAYOUTS)})")
    return path_fn


@dataclass(frozen=True, slots=True)
class TopicMetadata:
    """A topic's managed-ledger znode and its cursor znodes, read one after the other (not atomically).

    ``cursors`` is keyed by the znode name: the cursor name as BookKeeper metadata records it
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


class ZooKeeper:
    """Pulsar's metadata store (``hosts``) and BookKeeper's (``bookkeeper_hosts``, default: the same
    connection). Use as ``async with ZooKeeper(hosts) as zk:`` (or ``start()``/``close()``).

    The generic calls (``get``, ``children``, ``exists``, ``client``) are on Pulsar's store; the ledger
    calls (``ledger_path``, ``read_ledger_metadata``, ``delete_ledger_metadata``, ``registered_bookies``)
    on ``self.bookkeeper``, which is ``self`` unless BookKeeper's metadata lives in another ensemble."""

    def __init__(
        self,
        hosts: str,
        *,
        timeout_s: float = 10.0,
        ledgers_root: str = "/ledgers",
        bookkeeper_hosts: str | None = None,
        bookkeeper_key: str = "zookeeper.bookkeeper_hosts",
    ) -> None:
        self.hosts = hosts
        self.timeout_s = timeout_s
        # "/" (a chroot at BookKeeper's root) becomes "": every path below is built as root + "/...".
        self.ledgers_root = ledgers_root.rstrip("/")
        self.client = kazoo_client(hosts, timeout_s)
        self._ledger_path: Callable[[int, str], str] | None = None
        separate = bool(bookkeeper_hosts) and bookkeeper_hosts != hosts
        # The key that names BookKeeper's store in error messages.
        self.bookkeeper_key = bookkeeper_key if separate else "zookeeper.hosts"
        self.bookkeeper: ZooKeeper = (
            ZooKeeper(bookkeeper_hosts, timeout_s=timeout_s, ledgers_root=ledgers_root)
            if separate and bookkeeper_hosts
            else self
        )

    @classmethod
    def from_settings(cls, zs: ZooKeeperSettings) -> ZooKeeper:
        if not zs.hosts:
            raise ValueError("zookeeper.hosts is not set")
        return cls(
            zs.hosts,
            timeout_s=zs.timeout_s,
            ledgers_root=zs.ledgers_root,
            bookkeeper_hosts=zs.bookkeeper_hosts,
            bookkeeper_key=zs.bookkeeper_store_key,
        )

    @property
    def bookkeeper_hosts(self) -> str:
        return self.bookkeeper.hosts

    async def start(self) -> None:
        await self._start_one()
        if self.bookkeeper is not self:
            try:
                await self.bookkeeper._start_one()
            except BaseException:
                await asyncio.to_thread(self._shutdown)
                raise

    async def _start_one(self) -> None:
        try:
            await asyncio.to_thread(self.client.start, self.timeout_s)
        except (KazooTimeoutError, KazooException) as e:
            await asyncio.to_thread(self._shutdown)
            raise BackendError("zookeeper", f"cannot connect to {self.hosts}: {type(e).__name__}: {e}") from e

    def _shutdown(self) -> None:
        self.client.stop()
        self.client.close()

    async def close(self) -> None:
        await asyncio.to_thread(self._shutdown)
        if self.bookkeeper is not self:
            await asyncio.to_thread(self.bookkeeper._shutdown)

    async def __aenter__(self) -> ZooKeeper:
        await self.start()
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()

    # ---- plumbing ---------------------------------------------------------------------------------

    async def _call(self, method: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """Run a kazoo ``*_async`` method; NoNode/BadVersion/NodeExists/NotEmpty propagate as themselves,
        everything else (connection loss, session expiry, timeout) becomes BackendError.

        No thread per call: kazoo completes its IAsyncResult on its own callback thread, and ``rawlink``
        hands the result to this loop (``call_soon_threadsafe``). A thread hop per call through the default
        executor was the ZooKeeper route's main cost (the profile in the perf note)."""
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[Any] = loop.create_future()

        def settle(result: Any) -> None:  # on the loop
            if fut.done():
                return  # timed out (cancelled) already: the answer has nobody to go to
            exc = result.exception
            if exc is not None:
                fut.set_exception(exc)
            else:
                fut.set_result(result.value)

        def completed(result: Any) -> None:  # on kazoo's callback thread
            with contextlib.suppress(RuntimeError):  # the loop closed while the call was in flight
                loop.call_soon_threadsafe(settle, result)

        try:
            method(*args, **kwargs).rawlink(completed)
            return await asyncio.wait_for(fut, self.timeout_s)
        except _SEMANTIC:
            raise
        except TimeoutError as e:
            raise BackendError("zookeeper", f"no answer within {self.timeout_s}s") from e
        except (KazooTimeoutError, KazooException) as e:
            raise BackendError("zookeeper", f"{type(e).__name__}: {e}") from e

    async def run(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """Run any blocking kazoo call in a thread with the same error mapping (for tools and tests)."""
        try:
            return await asyncio.to_thread(functools.partial(fn, *args, **kwargs))
        except _SEMANTIC:
            raise
        except (KazooTimeoutError, KazooException) as e:
            raise BackendError("zookeeper", f"{type(e).__name__}: {e}") from e

    async def get(self, path: str) -> tuple[bytes, ZnodeStat] | None:
        try:
            data, stat = await self._call(self.client.get_async, path)
        except NoNodeError:
            return None
        return bytes(data or b""), stat

    async def children(self, path: str) -> list[str] | None:
        try:
            return list(await self._call(self.client.get_children_async, path))
        except NoNodeError:
            return None

    async def exists(self, path: str) -> ZnodeStat | None:
        stat: ZnodeStat | None = await self._call(self.client.exists_async, path)
        return stat

    # ---- managed ledgers and schemas (the metadata store's half of "gone") ------------------------

    async def managed_ledger_exists(self, ml_name: str) -> bool:
        return await self.exists(f"{MANAGED_LEDGERS_ROOT}/{ml_name}") is not None

    async def read_managed_ledger(self, topic: TopicName) -> ManagedLedgerInfo | None:
        """The topic's managed-ledger record (ledgers with their offload state), without its cursors;
        None when the topic has no znode. The one reader of it (decisions, ``purge-topic``, the offload
        audit); :meth:`read_topic` parses its copy the same way (``_managed_ledger``). Raises
        :class:`UnreadableManagedLedger` on a bad record."""
        got = await self.get(managed_ledger_path(topic))
        return None if got is None else _managed_ledger(topic, got[0])

    async def check_pulsar_store(self, pending: TopicName | None) -> None:
        """Prove ``hosts`` is Pulsar's metadata store: the pending topic's own managed ledger is there
        (its partition 0, made with the partitioned topic, or the topic itself when it is not
        partitioned). Without this, a store that holds no managed ledgers (BookKeeper's own ensemble, a
        wrong chroot) confirms every admin "not found" as a gone topic. ``pending`` None (an operator
        command on a cluster where the worker's topics do not exist yet): only the managed-ledgers root
        is required. Raises :class:`WrongMetadataStore`."""
        if pending is None:
            paths = [MANAGED_LEDGERS_ROOT]
            what = "it has no managed ledgers at all"
        else:
            paths = [managed_ledger_path(pending.partition(0)), managed_ledger_path(pending)]
            what = f"the pending topic {pending} has no managed ledger there"
        for path in paths:
            if await self.exists(path) is not None:
                return
        raise WrongMetadataStore(
            f"zookeeper.hosts {self.hosts}: not Pulsar's metadata store: {what} ({' nor '.join(paths)}), so no "
            "topic could be proven gone. Point zookeeper.hosts at the brokers' metadataStoreUrl (with its "
            "chroot, if any); BookKeeper's metadata, when it lives in another ensemble, goes in "
            "zookeeper.bookkeeper_hosts"
        )

    async def check_bookkeeper_store(self) -> None:
        """Prove ``bookkeeper_hosts`` (+ ``ledgers_root``) is BookKeeper's metadata store: its LAYOUT is
        there and names a known ledger manager. Raises :class:`WrongMetadataStore`."""
        bk = self.bookkeeper
        try:
            await self.ledger_path(0)
        except UnsupportedLedgerLayout as e:
            raise WrongMetadataStore(
                f"{self.bookkeeper_key} {bk.hosts}: not BookKeeper's metadata store at zookeeper.ledgers_root "
                f"{bk.ledgers_root or '/'} ({e}); point it at the bookies' metadataServiceUri"
            ) from e

    async def schema_ledgers(self, schema_id: str) -> frozenset[int] | None:
        """Ledger ids the schema registry's locator (``/schemas/<schemaId>``) references; None when the
        registry has no entry."""
        got = await self.get(f"/schemas/{schema_id}")
        if got is None:
            return None
        try:
            return parse_schema_locator(got[0])
        except MetadataFormatError as e:
            raise BackendError("zookeeper", f"schema locator {schema_id}: {e}") from e

    async def read_topic(self, topic: TopicName) -> TopicMetadata | None:
        """The topic's managed-ledger metadata with its cursors; None when the topic has no znode."""
        path = managed_ledger_path(topic)
        got = await self.get(path)
        if got is None:
            return None
        data, stat = got
        cursors: dict[str, ManagedCursorInfo] = {}
        for name in sorted(await self.children(path) or []):
            cur = await self.get(f"{path}/{name}")
            if cur is None:
                continue  # the subscription was deleted between the listing and the read
            cursors[name] = parse_managed_cursor_info(cur[0])
        return TopicMetadata(topic, path, stat.version, _managed_ledger(topic, data), cursors)

    # ---- BookKeeper ledger metadata (on BookKeeper's store: ``self.bookkeeper``) -------------------

    async def ledger_path(self, ledger_id: int) -> str:
        bk = self.bookkeeper
        if bk is not self:
            return await bk.ledger_path(ledger_id)
        if self._ledger_path is None:
            got = await self.get(f"{self.ledgers_root}/LAYOUT")
            if got is None:
                raise UnsupportedLedgerLayout(f"no {self.ledgers_root}/LAYOUT: not a BookKeeper metadata root")
            self._ledger_path = parse_layout(got[0])
        return self._ledger_path(ledger_id, self.ledgers_root)

    async def read_ledger_metadata(self, ledger_id: int) -> tuple[bytes, ZnodeStat] | None:
        """The ledger's metadata znode (bytes, stat), or None when the ledger does not exist."""
        return await self.bookkeeper.get(await self.ledger_path(ledger_id))

    async def registered_bookies(self) -> frozenset[str]:
        """The bookie ids BookKeeper's store has registered: ``<ledgers_root>/available/<id>`` (writable)
        and ``<ledgers_root>/available/readonly/<id>``."""
        bk = self.bookkeeper
        available = f"{bk.ledgers_root}/available"
        writable = {c for c in await bk.children(available) or [] if c != "readonly"}
        return frozenset(writable | set(await bk.children(f"{available}/readonly") or []))

    async def ledger_metadata_version(self, ledger_id: int) -> int | None:
        """The znode version of the ledger's metadata, or None when the ledger does not exist."""
        stat = await self.bookkeeper.exists(await self.ledger_path(ledger_id))
        return None if stat is None else int(stat.version)

    async def ledger_metadata_exists(self, ledger_id: int) -> bool:
        return await self.ledger_metadata_version(ledger_id) is not None

    async def delete_ledger_metadata(self, ledger_id: int, *, expected_version: int | None = None) -> bool:
        """Delete the ledger's metadata znode with a versioned delete.

        True if this call deleted it, False if it was already gone (idempotent). ``expected_version``
        pins the version the caller verified; without it, the version just read is used, which still
        refuses to delete metadata that changes under us (a ledger being closed, recovered or
        re-replicated): that raises :class:`LedgerMetadataChanged`, a BackendError, i.e. retry later.
        """
        bk = self.bookkeeper
        path = await self.ledger_path(ledger_id)
        version = expected_version
        if version is None:
            stat = await bk.exists(path)
            if stat is None:
                return False
            version = int(stat.version)
        try:
            await bk._call(bk.client.delete_async, path, version)
        except NoNodeError:
            # Gone already, possibly by our own earlier attempt whose answer was lost with the connection.
            return False
        except BadVersionError as e:
            raise LedgerMetadataChanged(ledger_id) from e
        return True


class ZooKeeperLedgerStore:
    """:class:`~worker.bookkeeper.LedgerStore` straight on the metadata store
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


@contextlib.asynccontextmanager
async def optional_zookeeper(zs: ZooKeeperSettings) -> AsyncIterator[ZooKeeper | None]:
    """Connected clients of both metadata stores for the operator commands, or None when no ZooKeeper is
    configured (empty ``zookeeper.hosts``): they then run with less certainty (gone topics cannot be
    confirmed). Prove the stores with ``worker.preflight.prove_metadata_stores`` before using them."""
    if not zs.hosts:
        yield None
        return
    zk = ZooKeeper.from_settings(zs)
    try:
        await zk.start()
    except BackendError as e:
        raise ConnectionError(f"{e} (set zookeeper.hosts empty to run without ZooKeeper)") from e
    try:
        yield zk
    finally:
        await zk.close()


def _managed_ledger(topic: TopicName, data: bytes) -> ManagedLedgerInfo:
    try:
        return parse_managed_ledger_info(data)
    except MetadataFormatError as e:
        raise UnreadableManagedLedger(topic, e) from e
