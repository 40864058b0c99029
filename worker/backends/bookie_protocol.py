"""A bookie, spoken to in BookKeeper's own protocol (version 3: protobuf over TCP), for one thing: reading a
ledger's entries, with the FENCE flag when the read is a recovery's.

The bookie HTTP API has no way to fence a ledger (its read endpoint opens the ledger without recovery:
``ReadLedgerEntryService`` through ``BookKeeperAdmin.readEntries``), so the worker speaks to the bookie's
``bookie-rpc`` endpoint as BookKeeper's client does (bookkeeper-server 4.17):

- a frame is a 4-byte big-endian length and a serialized ``Request`` or ``Response``
  (``BookieProtoEncoding.serializeProtobuf``; the bookie's pipeline strips the length with a
  ``LengthFieldBasedFrameDecoder(maxFrameSize, 0, 4, 0, 4)``); a bookie takes a first request that parses
  as a v3 ``Request`` for the v3 protocol (``RequestDecoder``);
- a bookie without authentication (``bookieAuthProviderFactoryClass`` unset) takes requests at once
  (``AuthenticationDisabledAuthProviderFactory``); one with it answers ``EUA`` until a handshake this client
  does not make, which counts as a refusal;
- the response echoes the request's header (``PacketProcessorBaseV3.getHeader``): its ``txnId`` pairs them.

Nothing in a pending-deletion message chooses where this client connects: the caller resolves a bookie id
of the ledger's own metadata through its registration in BookKeeper's metadata store
(``worker.backends.ledger_recovery``).
"""

from __future__ import annotations

import asyncio
import itertools
import struct
from dataclasses import dataclass
from types import TracebackType

from google.protobuf.message import DecodeError

from worker.errors import BackendError
from worker.formats.bookkeeper_protocol_pb2 import (
    EOK,
    READ_ENTRY,
    VERSION_THREE,
    ReadRequest,
    Request,
    Response,
)

# Larger than any entry a bookie sends (its nettyMaxFrameSizeBytes is 5 MiB by default); a length above it
# is not a frame of this protocol.
MAX_FRAME_BYTES = 64 * 1024 * 1024
LAST_ENTRY = -1  # BookieProtocol.LAST_ADD_CONFIRMED: the bookie's last entry of the ledger
_LENGTH = struct.Struct(">I")


@dataclass(frozen=True, slots=True)
class ReadReply:
    """A bookie's answer to a read: its status (``StatusCode``'s value) and, when EOK, the entry as stored."""

    status: int
    body: bytes = b""

    @property
    def ok(self) -> bool:
        return self.status == EOK


class BookieConnection:
    """One TCP connection to one bookie; one request in flight at a time. Every call is bounded by
    ``timeout_s``; a failure (refused, cut, timed out, garbage) is a :class:`BackendError` of ``bookie``, and
    closes the connection: a stream left mid-frame cannot be read again."""

    _txn = itertools.count(1)

    def __init__(self, address: str, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, timeout_s: float):
        self.address = address
        self._reader = reader
        self._writer = writer
        self._timeout_s = timeout_s

    @classmethod
    async def open(cls, host: str, port: int, *, timeout_s: float) -> BookieConnection:
        address = f"{host}:{port}"
        try:
            async with asyncio.timeout(timeout_s):
                reader, writer = await asyncio.open_connection(host, port)
        except (OSError, TimeoutError) as e:
            raise BackendError("bookie", f"cannot connect to bookie {address}: {type(e).__name__}: {e}") from e
        return cls(address, reader, writer, timeout_s)

    async def read_entry(
        self, ledger_id: int, entry_id: int, *, fence_with: bytes | None = None, high_priority: bool = False
    ) -> ReadReply:
        """Read one entry (``LAST_ENTRY``: the bookie's last one). With ``fence_with`` (the ledger's master
        key) the bookie fences the ledger first and answers once the fence is logged in its journal
        (``ReadEntryProcessorV3``). As ``PerChannelBookieClient.readEntryInternal``: the key travels only
        with the fence flag, and a high-priority read carries priority 100."""
        txn = next(self._txn)
        req = Request()
        req.header.version = VERSION_THREE
        req.header.operation = READ_ENTRY
        req.header.txnId = txn
        read = req.readRequest
        read.ledgerId = ledger_id
        read.entryId = entry_id
        if fence_with is not None:
            read.flag = ReadRequest.FENCE_LEDGER
            read.masterKey = fence_with
        if high_priority:
            req.header.priority = 100  # DEFAULT_HIGH_PRIORITY_VALUE
        resp = await self._call(req.SerializeToString(), txn)
        if not resp.HasField("readResponse"):
            # An answer to the whole request (EUA before authentication, EBADREQ, EBADVERSION).
            return ReadReply(resp.status)
        r = resp.readResponse
        if r.ledgerId != ledger_id or r.entryId != entry_id:
            await self.close()
            raise BackendError(
                "bookie", f"bookie {self.address} answered for {r.ledgerId}:{r.entryId}, not {ledger_id}:{entry_id}"
            )
        return ReadReply(r.status, r.body if r.status == EOK else b"")

    async def _call(self, payload: bytes, txn: int) -> Response:
        try:
            async with asyncio.timeout(self._timeout_s):
                self._writer.write(_LENGTH.pack(len(payload)) + payload)
                await self._writer.drain()
                (size,) = _LENGTH.unpack(await self._reader.readexactly(_LENGTH.size))
                if size > MAX_FRAME_BYTES:
                    raise BackendError("bookie", f"bookie {self.address} sent a frame of {size} bytes")
                resp = Response()
                resp.ParseFromString(await self._reader.readexactly(size))
                if resp.header.txnId != txn:
                    # One request is in flight, and a failed one closes the connection: no other answer is due.
                    raise BackendError("bookie", f"bookie {self.address} answered request {resp.header.txnId}")
                return resp
        except BackendError:
            await self.close()
            raise
        except (OSError, EOFError, asyncio.IncompleteReadError, TimeoutError, DecodeError) as e:
            await self.close()
            raise BackendError("bookie", f"bookie {self.address}: {type(e).__name__}: {e}") from e

    async def close(self) -> None:
        if self._writer.is_closing():
            return
        self._writer.close()
        try:
            await self._writer.wait_closed()
        except OSError:
            pass  # already reset by the bookie: closed either way

    async def __aenter__(self) -> BookieConnection:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()
