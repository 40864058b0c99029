"""Recovering an open ledger from Python, as BookKeeper's recovery open does: afterwards no writer can add
to it, and its metadata is CLOSED.

The steps and their arithmetic are ``worker.core.ledger_recovery``'s; this module does the I/O:
BookKeeper's metadata store (the ledger's record, read and rewritten with versioned writes; the registered
bookies and where they listen) and the bookies of the ledger's last ensemble (``worker.backends.bookie_protocol``).

- Every write to the record is versioned against the record just read, so a writer's ensemble change, a
  broker's own recovery or another worker racing this one makes the write fail rather than be lost: the
  record is read again, and a ledger someone else closed meanwhile is simply closed.
- The bookies come from the ledger's own metadata and must be registered in BookKeeper's store
  (``<ledgers_root>/available[/readonly]/<id>``); the address is the one the bookie registered. Nothing a
  message says chooses where this connects.
- A bookie that is down or fails counts as no answer: the recovery goes on when the others cover every
  write quorum (as BookKeeper's), and fails as a whole otherwise (a transient failure: tried again later).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass

from worker.backends.bookie_protocol import LAST_ENTRY, BookieConnection, ReadReply
from worker.core.ledger_recovery import (
    Answer,
    Entry,
    Fenced,
    Read,
    RecoveryRefused,
    Reply,
    close_point,
    entry_read,
    fenced,
    write_set,
)
from worker.core.metadata_stores import BookKeeperMetadataStore
from worker.errors import BackendError
from worker.formats import ledger_metadata_record as record
from worker.formats.bookie_registration import rpc_address
from worker.formats.bookkeeper_data_formats_pb2 import LedgerMetadataFormat
from worker.formats.bookkeeper_digest import DigestType, EntryDigestMismatch, master_key, verify_entry
from worker.formats.bookkeeper_protocol_pb2 import ENOENTRY, ENOLEDGER, EOK, EUA
from worker.formats.protobuf_wire import MetadataFormatError

# Versioned writes lost to a concurrent writer of the record before the recovery gives up for this attempt.
MAX_RECORD_RACES = 3


class RecoveryFailed(BackendError):
    """The ledger could not be recovered now (bookies unanswering, the record changing under us): retry later."""

    def __init__(self, ledger_id: int, why: str) -> None:
        super().__init__("recovery", f"recovery of ledger {ledger_id}: {why}")
        self.ledger_id = ledger_id


class Unrecoverable(BackendError):
    """This worker can never recover the ledger (no password in its metadata, a refused master key, a record
    it cannot read): it stays as it is, and the operator sees why."""

    def __init__(self, ledger_id: int, why: str) -> None:
        super().__init__("recovery", f"ledger {ledger_id} cannot be recovered: {why}")
        self.ledger_id = ledger_id


@dataclass(frozen=True, slots=True)
class Recovered:
    """The ledger is CLOSED: by this recovery (``closed_here``) at ``last_entry_id`` with ``length`` bytes,
    or by someone else before or during it. ``gone``: its metadata disappeared meanwhile."""

    ledger_id: int
    last_entry_id: int = -1
    length: int = 0
    closed_here: bool = False
    gone: bool = False


@dataclass(frozen=True, slots=True)
class _Ledger:
    """What the recovery knows of the ledger once it is IN_RECOVERY."""

    ledger_id: int
    md: LedgerMetadataFormat
    version: int
    quorum: record.Quorum
    digest_type: DigestType
    password: bytes


class LedgerRecovery:
    """Recovers open ledgers: ``await LedgerRecovery(store, timeout_s=...).recover(ledger_id)``, ``store``
    being BookKeeper's metadata store."""

    def __init__(self, store: BookKeeperMetadataStore, *, timeout_s: float) -> None:
        self.store = store
        self.timeout_s = timeout_s

    async def recover(self, ledger_id: int) -> Recovered:
        """Fence and close ``ledger_id``. Raises :class:`RecoveryFailed` (try again later) or
        :class:`Unrecoverable`."""
        for _ in range(MAX_RECORD_RACES):
            got = await self._read(ledger_id)
            if got is None:
                return Recovered(ledger_id, gone=True)
            md, version = got
            if md.state == record.CLOSED:
                return Recovered(ledger_id, md.lastEntryId, md.length)
            if md.state == record.OPEN:
                # Step 1: no ensemble change of the writer succeeds from now on.
                md = record.in_recovery(md)
                written = await self._write(ledger_id, md, version)
                if written is None:
                    continue
                version = written
            ledger = self._ledger(ledger_id, md, version)
            last_entry_id, length = await self._fence_and_read_tail(ledger)
            if await self._write(ledger_id, record.closed(md, last_entry_id=last_entry_id, length=length), version):
                return Recovered(ledger_id, last_entry_id, length, closed_here=True)
        raise RecoveryFailed(ledger_id, "its metadata kept changing during the recovery")

    def _ledger(self, ledger_id: int, md: LedgerMetadataFormat, version: int) -> _Ledger:
        try:
            quorum = record.last_ensemble(md)
        except MetadataFormatError as e:
            raise Unrecoverable(ledger_id, str(e)) from e
        digest_type = record.digest_type(md)
        if digest_type is None:
            raise Unrecoverable(ledger_id, "its metadata keeps no password, so its master key is unknown")
        return _Ledger(ledger_id, md, version, quorum, digest_type, md.password)

    # ---- the metadata store ------------------------------------------------------------------------------

    async def _read(self, ledger_id: int) -> tuple[LedgerMetadataFormat, int] | None:
        got = await self.store.read_ledger_record(ledger_id)
        if got is None:
            return None
        data, stat = got
        try:
            return record.decode(data), int(stat.version)
        except MetadataFormatError as e:
            raise Unrecoverable(ledger_id, f"its metadata: {e}") from e

    async def _write(self, ledger_id: int, md: LedgerMetadataFormat, version: int) -> int | None:
        """The record's new version, or None when it changed since ``version`` was read (or is gone)."""
        return await self.store.write_ledger_metadata(ledger_id, record.encode(md), version)

    async def _address(self, bookie_id: str) -> tuple[str, int] | None:
        """Where a bookie of the ensemble listens, from its registration; None when it is not registered
        (down, decommissioned): no answer from it."""
        registered = await self.store.bookie_registration(bookie_id)
        if registered is None:
            return None
        try:
            return rpc_address(bookie_id, registered)
        except MetadataFormatError:
            return None

    # ---- the bookies -------------------------------------------------------------------------------------

    @contextlib.asynccontextmanager
    async def _connections(self, ledger: _Ledger) -> AsyncIterator[list[BookieConnection | None]]:
        """One connection per bookie of the last ensemble (None: not registered, or not reachable)."""

        async def connect(bookie_id: str) -> BookieConnection | None:
            address = await self._address(bookie_id)
            if address is None:
                return None
            try:
                return await BookieConnection.open(*address, timeout_s=self.timeout_s)
            except BackendError:
                return None

        conns = list(await asyncio.gather(*(connect(b) for b in ledger.quorum.ensemble)))
        try:
            yield conns
        finally:
            await asyncio.gather(*(c.close() for c in conns if c is not None))

    def _answer(self, ledger: _Ledger, reply: ReadReply | BaseException, entry_id: int | None) -> Answer:
        if isinstance(reply, BaseException):
            return Answer(Reply.FAILED)
        if reply.status in (ENOENTRY, ENOLEDGER):
            return Answer(Reply.MISSING)
        if reply.status == EUA:
            return Answer(Reply.REFUSED)
        if reply.status != EOK:
            return Answer(Reply.FAILED)
        try:
            h = verify_entry(
                reply.body,
                ledger_id=ledger.ledger_id,
                digest_type=ledger.digest_type,
                password=ledger.password,
                entry_id=entry_id,
            )
        except EntryDigestMismatch:
            return Answer(Reply.FAILED)
        return Answer(Reply.FOUND, Entry(h.entry_id, h.last_add_confirmed, h.length))

    async def _read_from(
        self, ledger: _Ledger, conns: Sequence[BookieConnection | None], indexes: Sequence[int], entry_id: int
    ) -> list[Answer]:
        key = master_key(ledger.password)

        async def one(i: int) -> Answer:
            conn = conns[i]
            if conn is None:
                return Answer(Reply.FAILED)
            try:
                reply: ReadReply | BaseException = await conn.read_entry(
                    ledger.ledger_id, entry_id, fence_with=key, high_priority=entry_id != LAST_ENTRY
                )
            except BackendError as e:
                reply = e
            return self._answer(ledger, reply, None if entry_id == LAST_ENTRY else entry_id)

        return list(await asyncio.gather(*(one(i) for i in indexes)))

    async def _fence_and_read_tail(self, ledger: _Ledger) -> tuple[int, int]:
        q = ledger.quorum
        async with self._connections(ledger) as conns:
            # Step 2: every bookie of the last ensemble, fenced (ReadLastConfirmedOp.initiateWithFencing).
            answers = await self._read_from(ledger, conns, range(len(q.ensemble)), LAST_ENTRY)
            try:
                start: Fenced | None = fenced(
                    answers, write_quorum=q.write_quorum, ack_quorum=q.ack_quorum, first_entry_id=q.first_entry_id
                )
            except RecoveryRefused as e:
                raise Unrecoverable(ledger.ledger_id, str(e)) from e
            if start is None:
                raise RecoveryFailed(
                    ledger.ledger_id,
                    f"too few bookies of {list(q.ensemble)} answered the fence ({[a.reply.value for a in answers]})",
                )
            # Step 3: the entries after the last-add-confirmed, each from its write set, until one is missing.
            found: list[Entry] = []
            for entry_id in itertools.count(start.last_add_confirmed + 1):
                ws = write_set(entry_id, len(q.ensemble), q.write_quorum)
                got = await self._read_from(ledger, conns, ws, entry_id)
                try:
                    outcome = entry_read(got, write_quorum=q.write_quorum, ack_quorum=q.ack_quorum)
                except RecoveryRefused as e:
                    raise Unrecoverable(ledger.ledger_id, str(e)) from e
                if outcome is Read.MISSING:
                    break
                if outcome is Read.UNKNOWN:
                    raise RecoveryFailed(ledger.ledger_id, f"entry {entry_id} could not be read from its write set")
                entry = next(a.entry for a in got if a.entry is not None)
                found.append(entry)
        return close_point(start, found)
