"""BookKeeper's ledger metadata read from the metadata store directly: the ``/ledgers`` tree of the
hierarchical layout, walked subtree by subtree with pipelined reads. What ``scan`` uses by default when
ZooKeeper is configured (:class:`LedgerWalk`, one subtree held at a time), and what the Spark audit spreads
over its input partitions (:func:`read_subtrees`).

``hosts`` is always BookKeeper's metadata store (``ZooKeeperSettings.bookkeeper_store``), which may be
another ensemble than Pulsar's; ``root`` its ledgers root ("/" when a chroot is BookKeeper's root).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from typing import Any

from worker.backends.kazoo_calls import run_blocking
from worker.backends.kazoo_handler import kazoo_client
from worker.backends.multi_read import multi_read_async
from worker.formats.ledger_metadata import LedgerMetadata, parse_serialized_metadata
from worker.formats.protobuf_wire import MetadataFormatError

# A batch job can wait for a busy ensemble; a slow connect must not fail a whole run.
CONNECT_TIMEOUT_FACTOR = 6
# Ledger-metadata znodes per multiRead of the walk, as the worker's (zookeeper.MULTI_READ_MAX): answers of
# ~0.3 KB a ledger, far below ZooKeeper's 1 MB jute.maxbuffer even for long ensemble histories.
WALK_MULTI_READ = 128


def ledger_subtrees(hosts: str, root: str, timeout_s: float = 10) -> list[str]:
    """The second-level znodes of BookKeeper's hierarchical layout (``root/00/0000``): each holds at most
    10 000 ledgers (short form) or one branch of the long form. Non-digit children (LAYOUT, idgen,
    available, underreplication, ...) are not ledgers."""
    zk = kazoo_client(hosts, timeout_s)
    # A batch job can wait for a busy ensemble; a task failing on a slow connect fails the whole run.
    zk.start(CONNECT_TIMEOUT_FACTOR * timeout_s)
    try:
        return _subtrees(zk, root.rstrip("/"))
    finally:
        _stop(zk)


def _subtrees(zk: Any, root: str) -> list[str]:
    out: list[str] = []
    for top in sorted(c for c in zk.get_children(root or "/") if c.isdigit()):
        out.extend(f"{root}/{top}/{c}" for c in sorted(zk.get_children(f"{root}/{top}")) if c.isdigit())
    return out


def ledger_id_of_path(root: str, path: str) -> int:
    # /ledgers/00/0000/L0042 -> "00" "0000" "0042": the zero-padded id split into path components.
    return int("".join(p.lstrip("L") for p in path[len(root) :].split("/") if p))


def read_subtrees(
    hosts: str, root: str, paths: Iterator[str], timeout_s: float = 10
) -> Iterator[tuple[int, bytes, int]]:
    """(ledger_id, metadata bytes, znode ctime ms) of every ledger under ``paths``."""
    root = root.rstrip("/")
    zk = kazoo_client(hosts, timeout_s)
    # A batch job can wait for a busy ensemble; a task failing on a slow connect fails the whole run.
    zk.start(CONNECT_TIMEOUT_FACTOR * timeout_s)
    try:
        for base in paths:
            yield from _read_subtree(zk, root, base, timeout_s)
    finally:
        zk.stop()
        zk.close()


def _read_subtree(zk: Any, root: str, base: str, timeout_s: float) -> list[tuple[int, bytes, int]]:
    from kazoo.exceptions import NoNodeError, UnimplementedError

    leaves: list[str] = []
    stack = [base]
    while stack:
        p = stack.pop()
        try:
            children = zk.get_children(p)
        except NoNodeError:
            continue
        for c in children:
            if c.startswith("L") and c[1:].isdigit():
                leaves.append(f"{p}/{c}")
            elif c.isdigit():
                stack.append(f"{p}/{c}")
    leaves.sort()
    try:
        answers = _multi_read(zk, leaves, timeout_s)
    except UnimplementedError:
        # A server without multiRead (ZooKeeper < 3.6): pipelined single reads.
        pending = [zk.get_async(leaf) for leaf in leaves]
        answers = []
        for fut in pending:
            try:
                answers.append(fut.get(timeout=timeout_s))
            except NoNodeError as e:
                answers.append(e)
    out = []
    for leaf, answer in zip(leaves, answers, strict=True):
        if isinstance(answer, NoNodeError):
            continue  # deleted since the listing: nothing to judge
        if isinstance(answer, Exception):
            raise answer
        data, stat = answer
        out.append((ledger_id_of_path(root, leaf), bytes(data or b""), int(stat.ctime)))
    return out


def _multi_read(zk: Any, paths: list[str], timeout_s: float) -> list[Any]:
    """``paths`` read in multiReads of :data:`WALK_MULTI_READ` znodes, all sent before the first answer is
    awaited: a subtree costs a few hundred requests instead of one per ledger (kazoo spends ~0.1 ms of Python
    per request, the walk's main cost with single reads)."""
    pending = [multi_read_async(zk, paths[i : i + WALK_MULTI_READ]) for i in range(0, len(paths), WALK_MULTI_READ)]
    out: list[Any] = []
    for fut in pending:
        out.extend(fut.get(timeout=timeout_s))
    return out


def _parsed(rows: list[tuple[int, bytes, int]]) -> list[LedgerMetadata]:
    """A znode whose content is not BookKeeper metadata is left out, as the bookie's own listing would."""
    out = []
    for lid, data, ctime in rows:
        try:
            out.append(parse_serialized_metadata(lid, data, ctime))
        except MetadataFormatError:
            continue
    return out


class LedgerWalk:
    """``scan``'s listing: the ledgers root walked one second-level subtree (at most 10,000 ledgers) at a
    time, so that no more than one subtree's metadata is held at once. One ZooKeeper session for the walk."""

    def __init__(self, hosts: str, root: str, timeout_s: float = 10) -> None:
        self.hosts = hosts
        self.root = root.rstrip("/")
        self.timeout_s = timeout_s
        self.subtrees = 0

    async def chunks(self) -> AsyncIterator[list[LedgerMetadata]]:
        """Raises BackendError when the store cannot be read (kazoo's errors, mapped)."""
        zk = kazoo_client(self.hosts, self.timeout_s)
        await run_blocking(zk.start, CONNECT_TIMEOUT_FACTOR * self.timeout_s)
        try:
            paths = await run_blocking(_subtrees, zk, self.root)
            self.subtrees = len(paths)
            for base in paths:
                rows = await run_blocking(_read_subtree, zk, self.root, base, self.timeout_s)
                yield _parsed(rows)
        finally:
            await asyncio.to_thread(_stop, zk)


def _stop(zk: Any) -> None:
    zk.stop()
    zk.close()


class MetadataListing:
    """The scanner's ledger listing from metadata already read (the Spark audit's partition, or ``scan``'s
    walk of the metadata store)."""

    def __init__(self, metadata: dict[int, LedgerMetadata]) -> None:
        self.metadata = metadata

    async def list_ledger_ids(self) -> list[int]:
        return sorted(self.metadata)

    async def get_metadata(self, ledger_id: int) -> LedgerMetadata | None:
        return self.metadata.get(ledger_id)

    async def chunks(self) -> AsyncIterator[list[LedgerMetadata]]:
        """All of it as one chunk: it was read at one time."""
        yield [self.metadata[lid] for lid in sorted(self.metadata)]


async def read_listing(hosts: str, root: str, timeout_s: float = 10) -> MetadataListing:
    """Every ledger's metadata under ``root`` at once (tools and tests; ``scan`` walks with
    :class:`LedgerWalk`, which holds one subtree at a time)."""
    out: dict[int, LedgerMetadata] = {}
    async for chunk in LedgerWalk(hosts, root, timeout_s).chunks():
        out.update((md.ledger_id, md) for md in chunk)
    return MetadataListing(out)
