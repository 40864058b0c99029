"""BookKeeper's metadata store on ZooKeeper (``zookeeper.bookkeeper_hosts``, by default ``zookeeper.hosts``,
under ``zookeeper.ledgers_root``): ledger metadata and registered bookies
(``worker.core.metadata_stores.BookKeeperMetadataStore``), and the ZooKeeper delete route's versioned
delete (docs/design.md step 5): once a ledger's znode is gone, the bookies' garbage collector reclaims its
entries.

Where ledgers sit in the store: ``worker.formats.metadata_paths`` (the ledger manager's layout).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from kazoo.exceptions import BadVersionError, NoNodeError

from worker.backends.group_commit import GroupCommit
from worker.backends.zookeeper_session import Znode, ZooKeeperSession
from worker.core.metadata_stores import WrongMetadataStore
from worker.errors import BackendError
from worker.formats.metadata_paths import UnsupportedLedgerLayout, parse_layout

# Ledger-metadata reads per ZooKeeper multiRead: an answer is ~0.3 KB a ledger, far below the server's
# 1 MB jute.maxbuffer even for ledgers with long ensemble histories.
MULTI_READ_MAX = 128


class LedgerMetadataChanged(BackendError):
    """The ledger's metadata znode changed between our read and our delete (someone is writing it)."""

    def __init__(self, ledger_id: int) -> None:
        super().__init__("zookeeper", f"metadata of ledger {ledger_id} changed during the delete; not deleted")
        self.ledger_id = ledger_id


class ZooKeeperBookKeeperStore:
    """:class:`~worker.core.metadata_stores.BookKeeperMetadataStore` on a ZooKeeper session. ``key`` names the
    setting that points at the ensemble, for messages."""

    def __init__(
        self, session: ZooKeeperSession, *, ledgers_root: str = "/ledgers", key: str = "zookeeper.hosts"
    ) -> None:
        self.session = session
        self.key = key
        # "/" (a chroot at BookKeeper's root) becomes "": every path below is built as root + "/...".
        self.ledgers_root = ledgers_root.rstrip("/")
        self._ledger_path: Callable[[int, str], str] | None = None
        # Concurrent ledger-metadata reads go out together as one multiRead (``read_ledger_metadata``).
        self._metadata_reads: GroupCommit[str, Znode | None] = GroupCommit(
            self._read_together, max_batch=MULTI_READ_MAX
        )

    @property
    def hosts(self) -> str:
        return self.session.hosts

    @property
    def where(self) -> str:
        return f"{self.key} {self.session.hosts} at zookeeper.ledgers_root {self.ledgers_root or '/'}"

    async def check_layout(self) -> None:
        try:
            await self.ledger_path(0)
        except UnsupportedLedgerLayout as e:
            raise WrongMetadataStore(
                f"{self.key} {self.session.hosts}: not BookKeeper's metadata store at zookeeper.ledgers_root "
                f"{self.ledgers_root or '/'} ({e}); point it at the bookies' metadataServiceUri"
            ) from e

    async def ledger_path(self, ledger_id: int) -> str:
        if self._ledger_path is None:
            got = await self.session.get(f"{self.ledgers_root}/LAYOUT")
            if got is None:
                raise UnsupportedLedgerLayout(f"no {self.ledgers_root}/LAYOUT: not a BookKeeper metadata root")
            self._ledger_path = parse_layout(got[0])
        return self._ledger_path(ledger_id, self.ledgers_root)

    async def read_ledger_metadata(self, ledger_id: int) -> Znode | None:
        """Reads asked while another is in flight go out together in the next multiRead (a group commit of
        reads): each is still made after it was asked, so it is as fresh as a read of its own."""
        return await self._metadata_reads.submit(await self.ledger_path(ledger_id))

    async def read_ledger_record(self, ledger_id: int) -> Znode | None:
        return await self.session.get(await self.ledger_path(ledger_id))

    async def read_ledgers_metadata(self, ledger_ids: list[int]) -> list[Znode | BaseException | None]:
        """In multiReads of up to ``MULTI_READ_MAX``."""
        paths = [await self.ledger_path(lid) for lid in ledger_ids]
        chunks = [paths[i : i + MULTI_READ_MAX] for i in range(0, len(paths), MULTI_READ_MAX)]
        answers = await asyncio.gather(*(self._read_together(c) for c in chunks), return_exceptions=True)
        out: list[Znode | BaseException | None] = []
        for chunk, answer in zip(chunks, answers, strict=True):
            if isinstance(answer, BaseException):
                out.extend([answer] * len(chunk))
            else:
                out.extend(answer)
        return out

    async def _read_together(self, paths: list[str]) -> list[Znode | BaseException | None]:
        """Read ``paths`` at once; a missing one is read again after one sync, so that every None is an
        absence the leader confirms, not a follower's lag (a ledger made just before its deletion was queued
        may not have reached the server this session reads)."""
        answers = await self.session.read_many(paths)
        missing = [i for i, a in enumerate(answers) if a is None]
        if not missing:
            return answers
        try:
            await self.session.sync(self.ledgers_root or "/")
            again = await self.session.read_many([paths[i] for i in missing])
        except BackendError as e:
            again = [e] * len(missing)  # absence not confirmed: a failed read, never an absence
        for i, answer in zip(missing, again, strict=True):
            answers[i] = answer
        return answers

    async def registered_bookies(self) -> frozenset[str]:
        """``<ledgers_root>/available/<id>`` (writable) and ``<ledgers_root>/available/readonly/<id>``."""
        available = f"{self.ledgers_root}/available"
        writable = {c for c in await self.session.children(available) or [] if c != "readonly"}
        return frozenset(writable | set(await self.session.children(f"{available}/readonly") or []))

    async def bookie_registration(self, bookie_id: str) -> bytes | None:
        if bookie_id in ("", ".", "..", "readonly") or "/" in bookie_id:
            return None
        available = f"{self.ledgers_root}/available"
        for path in (f"{available}/{bookie_id}", f"{available}/readonly/{bookie_id}"):
            got = await self.session.get(path)
            if got is not None:
                return got[0]
        return None

    async def ledger_metadata_version(self, ledger_id: int) -> int | None:
        """An absence confirmed after a sync: it settles the bookie's ambiguous 500."""
        stat = await self.session.exists_confirmed(await self.ledger_path(ledger_id))
        return None if stat is None else int(stat.version)

    async def ledger_metadata_exists(self, ledger_id: int) -> bool:
        return await self.ledger_metadata_version(ledger_id) is not None

    async def delete_ledger_metadata(self, ledger_id: int, *, expected_version: int | None = None) -> bool:
        """A versioned delete. Without ``expected_version``, the version just read is used, which still
        refuses to delete metadata that changes under us (a ledger being closed, recovered or
        re-replicated): that raises :class:`LedgerMetadataChanged`, a BackendError, i.e. retry later."""
        path = await self.ledger_path(ledger_id)
        version = expected_version
        if version is None:
            stat = await self.session.exists(path)
            if stat is None:
                return False
            version = int(stat.version)
        try:
            await self.session.calls.call(self.session.client.delete_async, path, version)
        except NoNodeError:
            # Gone already, possibly by our own earlier attempt whose answer was lost with the connection.
            return False
        except BadVersionError as e:
            raise LedgerMetadataChanged(ledger_id) from e
        return True

    async def delete_ledgers_metadata_together(self, versions: list[tuple[int, int]]) -> bool:
        """One ZooKeeper multi. False when the multi was refused (one znode gone or changed since it was
        read); the caller then deletes them one by one, so that one stale ledger never holds back the
        others."""
        tx = self.session.client.transaction()
        for ledger_id, version in versions:
            tx.delete(await self.ledger_path(ledger_id), version)
        results = await self.session.calls.call(tx.commit_async)
        return all(r is True for r in results)

    async def write_ledger_metadata(self, ledger_id: int, data: bytes, version: int) -> int | None:
        path = await self.ledger_path(ledger_id)
        try:
            stat = await self.session.calls.call(self.session.client.set_async, path, data, version)
        except (BadVersionError, NoNodeError):
            return None
        return int(stat.version)

    async def probe(self) -> None:
        await self.session.exists(self.ledgers_root or "/")

    def drain_latency(self) -> dict[str, list[float]]:
        return self.session.calls.latency.drain()
