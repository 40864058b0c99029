"""BookKeeper's metadata store (``zookeeper.metadata_service_uri``, by default Pulsar's store under
``/ledgers``), written once over any :class:`~worker.core.metadata_stores.KeyValueStore`: ledger metadata and
registered bookies (``worker.core.metadata_stores.BookKeeperMetadataStore``), the walk of every ledger, and
the ZooKeeper delete route (``bookkeeper.delete_via: zookeeper``, docs/design.md step 5): it is the
:class:`~worker.backends.bookie_http.LedgerStore` that reads a ledger's record and deletes it versioned against
the record that was judged, so metadata changed since (a ledger being closed, recovered or re-replicated) is
never deleted on a stale verdict; once it is gone, the bookies' garbage collector reclaims the entries.

Where ledgers sit in the store: ``worker.formats.metadata_paths`` (the ledger manager's layout).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from worker.backends.group_commit import GroupCommit
from worker.core.metadata_stores import ChangedRecord, KeyValueStore, StoredRecord, WrongMetadataStore
from worker.errors import BackendError
from worker.formats.ledger_metadata import LedgerMetadata, parse_serialized_metadata
from worker.formats.metadata_paths import UnsupportedLedgerLayout, parse_layout
from worker.formats.protobuf_wire import MetadataFormatError

# Ledger-metadata reads per ZooKeeper multiRead: an answer is ~0.3 KB a ledger, far below the server's
# 1 MB jute.maxbuffer even for ledgers with long ensemble histories.
MULTI_READ_MAX = 128
# Deletes per ZooKeeper multi: a delete request is ~60 bytes, far below the server's 1 MB jute.maxbuffer.
MULTI_MAX = 500


class LedgerMetadataChanged(BackendError):
    """The ledger's metadata znode changed between our read and our delete (someone is writing it)."""

    def __init__(self, ledger_id: int) -> None:
        super().__init__("zookeeper", f"metadata of ledger {ledger_id} changed during the delete; not deleted")
        self.ledger_id = ledger_id


class BookKeeperStore:
    """:class:`~worker.core.metadata_stores.BookKeeperMetadataStore` on a key-value store. ``key`` names the
    setting that points at it, for messages."""

    def __init__(
        self, kv: KeyValueStore, *, ledgers_root: str = "/ledgers", key: str = "zookeeper.metadata_service_uri"
    ) -> None:
        self.kv = kv
        self.key = key
        # "/" (a chroot at BookKeeper's root) becomes "": every path below is built as root + "/...".
        self.ledgers_root = ledgers_root.rstrip("/")
        self._ledger_path: Callable[[int, str], str] | None = None
        # Concurrent ledger-metadata reads go out together as one multiRead (``read_ledger_metadata``).
        self._metadata_reads: GroupCommit[str, StoredRecord | None] = GroupCommit(
            self._read_together, max_batch=MULTI_READ_MAX
        )
        # Deletes made while others are in flight go out together as one multi, each versioned (``delete``).
        self.deletes: GroupCommit[tuple[int, int], bool] = GroupCommit(self._delete_together, max_batch=MULTI_MAX)

    @property
    def where(self) -> str:
        return f"{self.key} {self.kv.where} at ledgers root {self.ledgers_root or '/'}"

    async def check_layout(self) -> None:
        try:
            await self.ledger_path(0)
        except UnsupportedLedgerLayout as e:
            raise WrongMetadataStore(
                f"{self.where}: not BookKeeper's metadata store ({e}); point {self.key} at the bookies' "
                "metadataServiceUri"
            ) from e

    async def ledger_path(self, ledger_id: int) -> str:
        if self._ledger_path is None:
            got = await self.kv.get(f"{self.ledgers_root}/LAYOUT")
            if got is None:
                raise UnsupportedLedgerLayout(f"no {self.ledgers_root}/LAYOUT: not a BookKeeper metadata root")
            self._ledger_path = parse_layout(got[0])
        return self._ledger_path(ledger_id, self.ledgers_root)

    async def read_ledger_metadata(self, ledger_id: int) -> StoredRecord | None:
        """Reads asked while another is in flight go out together in the next multiRead (a group commit of
        reads): each is still made after it was asked, so it is as fresh as a read of its own."""
        return await self._metadata_reads.submit(await self.ledger_path(ledger_id))

    async def read_ledger_record(self, ledger_id: int) -> StoredRecord | None:
        return await self.kv.get(await self.ledger_path(ledger_id))

    async def read_ledgers_metadata(self, ledger_ids: list[int]) -> list[StoredRecord | BaseException | None]:
        """In multiReads of up to ``MULTI_READ_MAX``."""
        paths = [await self.ledger_path(lid) for lid in ledger_ids]
        chunks = [paths[i : i + MULTI_READ_MAX] for i in range(0, len(paths), MULTI_READ_MAX)]
        answers = await asyncio.gather(*(self._read_together(c) for c in chunks), return_exceptions=True)
        out: list[StoredRecord | BaseException | None] = []
        for chunk, answer in zip(chunks, answers, strict=True):
            if isinstance(answer, BaseException):
                out.extend([answer] * len(chunk))
            else:
                out.extend(answer)
        return out

    async def _read_together(self, paths: list[str]) -> list[StoredRecord | BaseException | None]:
        """Read ``paths`` at once; a missing one is read again after one sync, so that every None is an
        absence the leader confirms, not a follower's lag (a ledger made just before its deletion was queued
        may not have reached the server this session reads)."""
        answers = await self.kv.get_many(paths)
        missing = [i for i, a in enumerate(answers) if a is None]
        if not missing:
            return answers
        try:
            await self.kv.sync(self.ledgers_root or "/")
            again = await self.kv.get_many([paths[i] for i in missing])
        except BackendError as e:
            again = [e] * len(missing)  # absence not confirmed: a failed read, never an absence
        for i, answer in zip(missing, again, strict=True):
            answers[i] = answer
        return answers

    async def registered_bookies(self) -> frozenset[str]:
        """``<ledgers_root>/available/<id>`` (writable) and ``<ledgers_root>/available/readonly/<id>``."""
        available = f"{self.ledgers_root}/available"
        writable = {c for c in await self.kv.children(available) or [] if c != "readonly"}
        return frozenset(writable | set(await self.kv.children(f"{available}/readonly") or []))

    async def bookie_registration(self, bookie_id: str) -> bytes | None:
        if bookie_id in ("", ".", "..", "readonly") or "/" in bookie_id:
            return None
        available = f"{self.ledgers_root}/available"
        for path in (f"{available}/{bookie_id}", f"{available}/readonly/{bookie_id}"):
            got = await self.kv.get(path)
            if got is not None:
                return got[0]
        return None

    async def ledger_metadata_version(self, ledger_id: int) -> int | None:
        """An absence confirmed after a sync: it settles the bookie's ambiguous 500."""
        stat = await self.kv.exists_confirmed(await self.ledger_path(ledger_id))
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
            stat = await self.kv.exists(path)
            if stat is None:
                return False
            version = int(stat.version)
        try:
            return await self.kv.delete(path, version)
        except ChangedRecord as e:
            raise LedgerMetadataChanged(ledger_id) from e

    async def delete_ledgers_metadata_together(self, versions: list[tuple[int, int]]) -> bool:
        """All or none. False when refused (one record gone or changed since it was read); the caller then
        deletes them one by one, so that one stale ledger never holds back the others."""
        return await self.kv.delete_many([(await self.ledger_path(lid), v) for lid, v in versions])

    async def read(self, ledger_id: int, prefetched: Any = None) -> tuple[LedgerMetadata, object] | None:
        """The ledger's metadata (``prefetched``: the record the daemon's batch read) and its version, the
        token of :meth:`delete`."""
        got = prefetched if prefetched is not None else await self.read_ledger_metadata(ledger_id)
        if got is None:
            return None
        data, stat = got
        try:
            return parse_serialized_metadata(ledger_id, data, int(stat.ctime)), int(stat.version)
        except MetadataFormatError as e:
            raise BackendError("zookeeper", f"ledger {ledger_id} metadata: {e}") from e

    async def delete(self, ledger_id: int, token: object = None) -> bool:
        """At the version ``token`` that was verified; deletes made together go out as one multi, and a multi
        refused (one ledger gone or changed in between) is retried as single deletes, so each ledger gets its
        own answer."""
        if not isinstance(token, int):
            return await self.delete_ledger_metadata(ledger_id)
        return await self.deletes.submit((ledger_id, token))

    async def _delete_together(self, versions: list[tuple[int, int]]) -> list[bool | BaseException]:
        if len(versions) > 1 and await self.delete_ledgers_metadata_together(versions):
            return [True] * len(versions)
        singles = [self.delete_ledger_metadata(lid, expected_version=v) for lid, v in versions]
        return list(await asyncio.gather(*singles, return_exceptions=True))

    async def write_ledger_metadata(self, ledger_id: int, data: bytes, version: int) -> int | None:
        return await self.kv.set(await self.ledger_path(ledger_id), data, version)

    async def ledger_subtrees(self) -> list[str]:
        """The second-level records of the hierarchical layout (``root/00/0000``): each holds at most 10 000
        ledgers (short form) or one branch of the long form. Non-digit children (LAYOUT, idgen, available,
        underreplication, ...) are not ledgers."""
        root = self.ledgers_root
        out: list[str] = []
        for top in sorted(c for c in await self.kv.children(root or "/") or [] if c.isdigit()):
            below = await self.kv.children(f"{root}/{top}") or []
            out.extend(f"{root}/{top}/{c}" for c in sorted(below) if c.isdigit())
        return out

    async def read_subtree(self, subtree: str) -> list[tuple[int, bytes, int]]:
        """Every ledger under ``subtree``, read together in chunks of ``MULTI_READ_MAX``, all sent before the
        first answer is awaited. A ledger deleted since the listing is left out."""
        leaves: list[str] = []
        stack = [subtree]
        while stack:
            p = stack.pop()
            for c in await self.kv.children(p) or []:
                if c.startswith("L") and c[1:].isdigit():
                    leaves.append(f"{p}/{c}")
                elif c.isdigit():
                    stack.append(f"{p}/{c}")
        leaves.sort()
        chunks = [leaves[i : i + MULTI_READ_MAX] for i in range(0, len(leaves), MULTI_READ_MAX)]
        out = []
        for chunk, answers in zip(chunks, await asyncio.gather(*(self.kv.get_many(c) for c in chunks)), strict=True):
            for leaf, answer in zip(chunk, answers, strict=True):
                if answer is None:
                    continue  # deleted since the listing: nothing to judge
                if isinstance(answer, BaseException):
                    raise answer
                data, stat = answer
                out.append((ledger_id_of_path(self.ledgers_root, leaf), data, int(stat.ctime)))
        return out

    async def probe(self) -> None:
        await self.kv.exists(self.ledgers_root or "/")

    def drain_latency(self) -> dict[str, list[float]]:
        return self.kv.drain_latency()


def ledger_id_of_path(root: str, path: str) -> int:
    # /ledgers/00/0000/L0042 -> "00" "0000" "0042": the zero-padded id split into path components.
    return int("".join(p.lstrip("L") for p in path[len(root) :].split("/") if p))
