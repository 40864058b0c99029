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

Where ledgers and managed ledgers sit in the stores: ``worker.formats.metadata_paths``; how kazoo's calls are
awaited and their errors mapped: ``worker.backends.kazoo_calls``.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from dataclasses import dataclass
from types import TracebackType
from typing import Any, TypeVar

from kazoo.exceptions import (
    BadVersionError,
    KazooException,
    NoNodeError,
    UnimplementedError,
)
from kazoo.handlers.threading import KazooTimeoutError
from kazoo.protocol.states import ZnodeStat

from worker.backends import prefetched_ledgers
from worker.backends.group_commit import GroupCommit
from worker.backends.kazoo_calls import KazooCalls, run_blocking
from worker.backends.kazoo_handler import kazoo_client
from worker.backends.multi_read import multi_read_async
from worker.backends.single_flight_reads import SingleFlightReads
from worker.core.store_anchor import Anchor, anchor_refusal
from worker.errors import BackendError
from worker.formats.ledger_metadata import LedgerMetadata, parse_serialized_metadata
from worker.formats.managed_ledger_metadata import (
    ManagedCursorInfo,
    ManagedLedgerInfo,
    parse_managed_cursor_info,
    parse_managed_ledger_info,
    parse_schema_locator,
)
from worker.formats.metadata_paths import (
    MANAGED_LEDGERS_ROOT,
    UnsupportedLedgerLayout,
    managed_ledger_path,
    parse_layout,
)
from worker.formats.protobuf_wire import MetadataFormatError
from worker.formats.topic_name import InvalidTopicName, TopicName
from worker.settings import ZooKeeperSettings

T = TypeVar("T")

# Ledger-metadata reads per ZooKeeper multiRead: an answer is ~0.3 KB a ledger, far below the server's
# 1 MB jute.maxbuffer even for ledgers with long ensemble histories.
MULTI_READ_MAX = 128

Znode = tuple[bytes, ZnodeStat]


class LedgerMetadataChanged(BackendError):
    """The ledger's metadata znode changed between our read and our delete (someone is writing it)."""

    def __init__(self, ledger_id: int) -> None:
        super().__init__("zookeeper", f"metadata of ledger {ledger_id} changed during the delete; not deleted")
        self.ledger_id = ledger_id


class UnreadableManagedLedger(BackendError):
    """A topic's managed-ledger znode holds something that is not ManagedLedgerInfo."""

    def __init__(self, topic: TopicName, e: MetadataFormatError) -> None:
        super().__init__("zookeeper", f"managed ledger of {topic}: {e}")
        self.topic = topic


class WrongMetadataStore(Exception):
    """A configured metadata store is not the one the config means; the message names the key."""


class NoAnchor(WrongMetadataStore):
    """BookKeeper's store cannot be proven yet: Pulsar's store lists no ledger to look for there."""


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
        self.calls = KazooCalls(timeout_s)
        self._fresh_exists: SingleFlightReads[ZnodeStat | None] = SingleFlightReads()
        self._ledger_path: Callable[[int, str], str] | None = None
        # Concurrent ledger-metadata reads go out together as one multiRead (``read_ledger_metadata``).
        self._metadata_reads: GroupCommit[str, Znode | None] = GroupCommit(
            self._read_together, max_batch=MULTI_READ_MAX
        )
        self._multi_read = True  # until the server says it has no multiRead (ZooKeeper < 3.6)
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

    async def run(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """Run any blocking kazoo call in a thread with the same error mapping (for tools and tests)."""
        return await run_blocking(fn, *args, **kwargs)

    async def get(self, path: str) -> tuple[bytes, ZnodeStat] | None:
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

    # ---- managed ledgers and schemas (the metadata store's half of "gone") ------------------------

    async def managed_ledger_exists(self, ml_name: str) -> bool:
        """Shared by the messages of one batch that ask for the same topic (``single_flight_reads``): a drained
        gone topic's proof is one read per batch, not one per message."""
        path = f"{MANAGED_LEDGERS_ROOT}/{ml_name}"
        return await self._fresh_exists.read(path, lambda: self.exists_confirmed(path)) is not None

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

    async def prove_bookkeeper_store(self, anchors: Sequence[TopicName], *, any_topic: bool = False) -> Anchor:
        """Prove ``bookkeeper_hosts`` + ``ledgers_root`` is the BookKeeper store Pulsar's topics write to
        (``worker.core.store_anchor``): its LAYOUT names a known ledger manager, it has registered bookies,
        and the newest ledger Pulsar's store lists for the first of ``anchors`` that lists one is there,
        naming that topic. With ``any_topic`` (the operator commands, which may run before the worker made
        its topics), any topic of Pulsar's store that lists a ledger anchors it when none of ``anchors``
        does. Returns the anchor; raises :class:`WrongMetadataStore` naming the keys."""
        await self.check_bookkeeper_store()
        bk = self.bookkeeper
        where = f"{self.bookkeeper_key} {bk.hosts} at zookeeper.ledgers_root {bk.ledgers_root or '/'}"
        if not await self.registered_bookies():
            raise WrongMetadataStore(
                f"{where}: no bookie is registered there ({bk.ledgers_root}/available is empty): not the store "
                "of a running BookKeeper cluster; point it at the bookies' metadataServiceUri"
            )
        # A trim may drop the anchor's ledger between the two reads: a refusal counts only when the topic
        # still lists the same newest ledger afterwards.
        anchor, why = None, None
        for _ in range(3):
            found = await self._anchor(anchors)
            if found is None and any_topic:
                found = await self._any_anchor()
            if found is None:
                names = ", ".join(str(t) for t in anchors) or "no topic"
                raise NoAnchor(
                    f"{where}: cannot be proven BookKeeper's store of this Pulsar cluster: Pulsar's metadata "
                    f"store lists no ledger for {names}{' nor for any other topic' if any_topic else ''} to look "
                    "for there"
                )
            if found == anchor:
                break
            anchor = found
            why = anchor_refusal(anchor, await self._anchor_metadata(anchor, where))
            if why is None:
                return anchor
        raise WrongMetadataStore(
            f"{where}: not BookKeeper's store of this Pulsar cluster: {why}. Point it at the bookies' "
            "metadataServiceUri (the brokers' bookkeeperMetadataServiceUri)"
        )

    async def _anchor_metadata(self, anchor: Anchor, where: str) -> LedgerMetadata | None:
        got = await self.read_ledger_metadata(anchor.ledger_id)
        if got is None:
            return None
        try:
            return parse_serialized_metadata(anchor.ledger_id, got[0], int(got[1].ctime))
        except MetadataFormatError as e:
            raise WrongMetadataStore(f"{where}: ledger {anchor.ledger_id}'s metadata is unreadable: {e}") from e

    async def _anchor(self, topics: Sequence[TopicName]) -> Anchor | None:
        for topic in topics:
            info = await self.read_managed_ledger(topic)
            if info is not None and info.ledger_ids:
                return Anchor(topic, max(info.ledger_ids))
        return None

    async def _any_anchor(self, max_topics: int = 200) -> Anchor | None:
        """The first topic found under the managed-ledgers root (``tenant/ns/persistent/topic``) that lists
        a ledger; at most ``max_topics`` read."""
        read = 0
        for tenant in sorted(await self.children(MANAGED_LEDGERS_ROOT) or []):
            for ns in sorted(await self.children(f"{MANAGED_LEDGERS_ROOT}/{tenant}") or []):
                base = f"{tenant}/{ns}/persistent"
                for encoded in sorted(await self.children(f"{MANAGED_LEDGERS_ROOT}/{base}") or []):
                    if read >= max_topics:
                        return None
                    read += 1
                    try:
                        topic = TopicName.from_managed_ledger_name(f"{base}/{encoded}")
                        found = await self._anchor([topic])
                    except (InvalidTopicName, UnreadableManagedLedger):
                        continue
                    if found is not None:
                        return found
        return None

    async def schema_ledgers(self, schema_id: str) -> frozenset[int] | None:
        """Ledger ids the schema registry's locator (``/schemas/<schemaId>``) references; None when the
        registry has no entry."""
        return schema_locator_ledgers(schema_id, await self.get(f"/schemas/{schema_id}"))

    async def cursor_properties(self, topic: TopicName, cursor: str) -> Mapping[str, str] | None:
        """The cursor properties of ``topic``'s cursor named ``cursor`` (its znode name) as stored
        (``ManagedCursorInfo.cursorProperties``); None when the cursor has no znode."""
        got = await self.get(f"{managed_ledger_path(topic)}/{cursor}")
        if got is None:
            return None
        try:
            return parse_managed_cursor_info(got[0]).cursor_properties
        except MetadataFormatError as e:
            raise BackendError("zookeeper", f"cursor {cursor} of {topic}: {e}") from e

    async def records_ledger(self, topic: TopicName, ledger_id: int, cursor: str | None = None) -> bool:
        """Whether ``topic``'s record names ``ledger_id``: its cursor ``cursor``'s ``cursorsLedgerId`` (the
        cursor's znode name), or, without ``cursor``, its managed ledger's list. No record: it does not."""
        if cursor is None:
            ml = await self.read_managed_ledger(topic)
            return ml is not None and ml.ledger(ledger_id) is not None
        got = await self.get(f"{managed_ledger_path(topic)}/{cursor}")
        if got is None:
            return False
        try:
            return parse_managed_cursor_info(got[0]).cursors_ledger_id == ledger_id
        except MetadataFormatError as e:
            raise BackendError("zookeeper", f"cursor {cursor} of {topic}: {e}") from e

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

    async def read_ledger_metadata(self, ledger_id: int) -> Znode | None:
        """The ledger's metadata znode (bytes, stat), or None when the ledger does not exist.

        Reads asked while another is in flight go out together in the next multiRead (a group commit of
        reads): each is still made after it was asked, so it is as fresh as a read of its own. In the
        daemon, a message whose batch already read the znode gets that read, once
        (``worker.backends.prefetched_ledgers``)."""
        got = prefetched_ledgers.take(ledger_id)
        if got is not None:
            return got
        return await self.bookkeeper._metadata_reads.submit(await self.ledger_path(ledger_id))

    async def read_ledgers_metadata(self, ledger_ids: list[int]) -> list[Znode | BaseException | None]:
        """Many ledgers' metadata znodes at once, in multiReads of up to ``MULTI_READ_MAX``, answered in
        order: a znode, None when the ledger does not exist, or the read's failure (never an absence)."""
        bk = self.bookkeeper
        paths = [await self.ledger_path(lid) for lid in ledger_ids]
        chunks = [paths[i : i + MULTI_READ_MAX] for i in range(0, len(paths), MULTI_READ_MAX)]
        answers = await asyncio.gather(*(bk._read_together(c) for c in chunks), return_exceptions=True)
        out: list[Znode | BaseException | None] = []
        for chunk, answer in zip(chunks, answers, strict=True):
            if isinstance(answer, BaseException):
                out.extend([answer] * len(chunk))
            else:
                out.extend(answer)
        return out

    async def _read_together(self, paths: list[str]) -> list[Znode | BaseException | None]:
        """Read ``paths`` (on BookKeeper's store) at once; a missing one is read again after one
        :meth:`sync`, so that every None is an absence the leader confirms, not a follower's lag (a ledger
        made just before its deletion was queued may not have reached the server this session reads)."""
        answers = await self._read_once(paths)
        missing = [i for i, a in enumerate(answers) if a is None]
        if not missing:
            return answers
        try:
            await self.sync(self.ledgers_root or "/")
            again = await self._read_once([paths[i] for i in missing])
        except BackendError as e:
            again = [e] * len(missing)  # absence not confirmed: a failed read, never an absence
        for i, answer in zip(missing, again, strict=True):
            answers[i] = answer
        return answers

    async def _read_once(self, paths: list[str]) -> list[Znode | BaseException | None]:
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

    async def registered_bookies(self) -> frozenset[str]:
        """The bookie ids BookKeeper's store has registered: ``<ledgers_root>/available/<id>`` (writable)
        and ``<ledgers_root>/available/readonly/<id>``."""
        bk = self.bookkeeper
        available = f"{bk.ledgers_root}/available"
        writable = {c for c in await bk.children(available) or [] if c != "readonly"}
        return frozenset(writable | set(await bk.children(f"{available}/readonly") or []))

    async def ledger_metadata_version(self, ledger_id: int) -> int | None:
        """The znode version of the ledger's metadata, or None when the ledger does not exist (an absence
        confirmed after a sync: it settles the bookie's ambiguous 500)."""
        stat = await self.bookkeeper.exists_confirmed(await self.ledger_path(ledger_id))
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
            await bk.calls.call(bk.client.delete_async, path, version)
        except NoNodeError:
            # Gone already, possibly by our own earlier attempt whose answer was lost with the connection.
            return False
        except BadVersionError as e:
            raise LedgerMetadataChanged(ledger_id) from e
        return True

    async def delete_ledgers_metadata_together(self, versions: list[tuple[int, int]]) -> bool:
        """Delete the metadata znodes of several ledgers, each at the version that was verified, in one
        ZooKeeper multi: all or none. False when the multi was refused (one znode gone or changed since
        it was read); the caller then deletes them one by one, so that one stale ledger never holds
        back the others."""
        bk = self.bookkeeper
        tx = bk.client.transaction()
        for ledger_id, version in versions:
            tx.delete(await self.ledger_path(ledger_id), version)
        results = await bk.calls.call(tx.commit_async)
        return all(r is True for r in results)


@contextlib.asynccontextmanager
async def optional_zookeeper(zs: ZooKeeperSettings) -> AsyncIterator[ZooKeeper | None]:
    """Connected clients of both metadata stores for the operator commands, or None when no ZooKeeper is
    configured (empty ``zookeeper.hosts``): they then run with less certainty (gone topics cannot be
    confirmed). Prove the stores with ``worker.broker.preflight.prove_metadata_stores`` before using them."""
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


def _znode_answer(path: str, answer: Znode | Exception) -> Znode | BaseException | None:
    """One multiRead answer as :meth:`ZooKeeper.get` gives it: a missing znode is None, any other error
    is a failed read (never an absence)."""
    if isinstance(answer, NoNodeError):
        return None
    if isinstance(answer, Exception):
        return BackendError("zookeeper", f"read {path}: {type(answer).__name__}")
    return answer


def _managed_ledger(topic: TopicName, data: bytes) -> ManagedLedgerInfo:
    try:
        return parse_managed_ledger_info(data)
    except MetadataFormatError as e:
        raise UnreadableManagedLedger(topic, e) from e


def schema_locator_ledgers(schema_id: str, znode: Znode | None) -> frozenset[int] | None:
    """The ledger ids a schema registry locator znode (``/schemas/<schemaId>``) references; None without one.
    Raises BackendError when it cannot be parsed: an unreadable locator is never an absence."""
    if znode is None:
        return None
    try:
        return parse_schema_locator(znode[0])
    except MetadataFormatError as e:
        raise BackendError("zookeeper", f"schema locator {schema_id}: {e}") from e
