"""Pulsar's managed-ledger metadata as stored in ZooKeeper, read and edited without a protobuf runtime.

A topic's znode ``/managed-ledgers/<tenant>/<ns>/persistent/<encoded topic>`` holds a ``ManagedLedgerInfo``
and each child znode (one per cursor) a ``ManagedCursorInfo``; both are proto2 messages of
``managed-ledger/src/main/proto/MLDataFormats.proto``::

    ManagedLedgerInfo    { repeated LedgerInfo ledgerInfo = 1; NestedPositionInfo terminatedPosition = 2;
                           repeated KeyValue properties = 3; }
    LedgerInfo           { int64 ledgerId = 1; int64 entries = 2; int64 size = 3; int64 timestamp = 4;
                           OffloadContext offloadContext = 5; }
    OffloadContext       { int64 uidMsb = 1; int64 uidLsb = 2; bool complete = 3; bool bookkeeperDeleted = 4;
                           int64 timestamp = 5; OffloadDriverMetadata driverMetadata = 6;
                           repeated OffloadSegment offloadSegment = 7; }
    OffloadDriverMetadata{ string name = 1; repeated KeyValue properties = 2; }
    KeyValue             { string key = 1; string value = 2; }
    NestedPositionInfo   { int64 ledgerId = 1; int64 entryId = 2; }
    ManagedCursorInfo    { int64 cursorsLedgerId = 1; int64 markDeleteLedgerId = 2; int64 markDeleteEntryId = 3;
                           ... repeated LongProperty properties = 5; int64 lastActive = 6;
                           repeated StringProperty cursorProperties = 8; }
    LongProperty         { string name = 1; int64 value = 2; }

Compression (``managedLedgerInfoCompressionType`` / ``managedCursorInfoCompressionType``: NONE by default up to
Pulsar 4.x, LZ4 from 5.0 for values over ``...CompressionThresholdInBytes``, 16 KiB): MetaStoreImpl then writes
``[0x4778 (2 bytes)][metadata size (4 bytes, big endian)][Managed{Ledger,Cursor}InfoMetadata][compressed payload]``,
the metadata being ``{CompressionType compressionType = 1; int32 uncompressedSize = 2}``. 0x47 cannot start a
valid protobuf message (field 8, wire type 7 does not exist), so the header is unambiguous. The payload is what
pulsar-common's codecs make: LZ4 and SNAPPY raw blocks (no frame), ZLIB a zlib stream ended by a sync flush (no
final block), ZSTD a frame. Reading decompresses (:func:`decompressed`); editing refuses a compressed value
(:class:`CompressedMetadataError`): rewriting one would mean re-compressing it exactly as the broker would.

The worker only reads these values. Staging writes them too (tests, benchmarks, demos): their encoder and
editor are ``testkit.managed_ledger_encoding``.
"""

from __future__ import annotations

import uuid as uuid_mod
import zlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import cramjam

from worker.formats.protobuf_wire import _LEN, _U64, _VARINT
from worker.formats.protobuf_wire import MetadataFormatError as MetadataFormatError
from worker.formats.protobuf_wire import as_bytes as _bytes
from worker.formats.protobuf_wire import as_int as _int
from worker.formats.protobuf_wire import as_str as _str
from worker.formats.protobuf_wire import fields as _fields

# MetaStoreImpl.MAGIC_MANAGED_INFO_METADATA
COMPRESSION_MAGIC = 0x4778


# The largest value decompressed: ZooKeeper's own limit on a znode (jute.maxbuffer) is 1 MiB by default, and a
# header claiming more than this is damaged or hostile, not a topic.
MAX_UNCOMPRESSED_BYTES = 64 * 1024 * 1024


class CompressedMetadataError(MetadataFormatError):
    """A compressed value that cannot be read (an unknown codec, a damaged header or payload), or that an editor
    was asked to rewrite."""

    def __init__(self, compression: str, why: str = "") -> None:
        super().__init__(f"managed-ledger metadata compressed with {compression}: {why or 'not editable'}")
        self.compression = compression


def _zlib(payload: bytes, size: int) -> bytes:
    d = zlib.decompressobj()  # a sync-flushed stream has no end: zlib.decompress would call it truncated
    return d.decompress(payload, size)


_CODECS: dict[int, tuple[str, Callable[[bytes, int], bytes]]] = {
    0: ("NONE", lambda payload, size: payload),
    1: ("LZ4", lambda payload, size: bytes(cramjam.lz4.decompress_block(payload, output_len=size))),
    2: ("ZLIB", _zlib),
    3: ("ZSTD", lambda payload, size: bytes(cramjam.zstd.decompress(payload))),  # a frame: it knows its size
    4: ("SNAPPY", lambda payload, size: bytes(cramjam.snappy.decompress_raw(payload))),
}


def is_compressed(data: bytes) -> bool:
    return len(data) >= 2 and int.from_bytes(data[:2], "big") == COMPRESSION_MAGIC


def _header(data: bytes) -> tuple[int, int, int]:
    """(compression type, uncompressed size, payload offset) of a compressed value."""
    if len(data) < 6:
        raise CompressedMetadataError("an unknown codec", "the header is cut short")
    end = 6 + int.from_bytes(data[2:6], "big")
    if end > len(data):
        raise CompressedMetadataError("an unknown codec", "the header is cut short")
    compression = size = None
    for f in _fields(data[6:end]):
        if f.number == 1 and f.wire_type == _VARINT:
            compression = _int(f)
        elif f.number == 2 and f.wire_type == _VARINT:
            size = _int(f)
    if compression is None or size is None:
        raise CompressedMetadataError("an unknown codec", "the header lacks its compression type or size")
    return compression, size, end


def decompressed(data: bytes) -> bytes:
    """``data`` as MetaStoreImpl reads it: itself when uncompressed, else its payload decompressed."""
    if not is_compressed(data):
        return data
    compression, size, start = _header(data)
    name, decode = _CODECS.get(compression, (str(compression), None))
    if decode is None:
        raise CompressedMetadataError(name, "a codec Pulsar did not have when this was written")
    if not 0 <= size <= MAX_UNCOMPRESSED_BYTES:
        raise CompressedMetadataError(name, f"its header claims {size} bytes uncompressed")
    try:
        out = decode(data[start:], size)
    except (cramjam.DecompressionError, zlib.error, ValueError) as e:
        raise CompressedMetadataError(name, f"its payload does not decompress: {e}") from e
    if len(out) != size:
        raise CompressedMetadataError(name, f"{len(out)} bytes decompressed where the header says {size}")
    return out


# ---- model -----------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class OffloadInfo:
    """A ledger's ``OffloadContext``. ``uid_msb``/``uid_lsb`` are Java's signed longs."""

    uid_msb: int | None = None
    uid_lsb: int | None = None
    complete: bool = False
    bookkeeper_deleted: bool = False
    timestamp: int | None = None
    driver_name: str | None = None
    driver_metadata: Mapping[str, str] = field(default_factory=dict)

    @property
    def uuid(self) -> uuid_mod.UUID | None:
        """The offload attempt's UUID; None when no attempt was recorded (both halves absent)."""
        if self.uid_msb is None and self.uid_lsb is None:
            return None
        # Java's new UUID(msb, lsb): the same 128 bits, two's complement (as worker.formats.message.OffloadContext).
        msb, lsb = self.uid_msb or 0, self.uid_lsb or 0
        return uuid_mod.UUID(int=((msb & (_U64 - 1)) << 64) | (lsb & (_U64 - 1)))


@dataclass(frozen=True, slots=True)
class LedgerInfo:
    ledger_id: int
    entries: int | None = None
    size: int | None = None
    timestamp: int | None = None
    offload: OffloadInfo | None = None

    @property
    def offloaded(self) -> bool:
        return self.offload is not None and self.offload.complete


@dataclass(frozen=True, slots=True)
class ManagedLedgerInfo:
    ledgers: tuple[LedgerInfo, ...] = ()
    terminated_position: tuple[int, int] | None = None
    properties: Mapping[str, str] = field(default_factory=dict)

    @property
    def ledger_ids(self) -> tuple[int, ...]:
        return tuple(ld.ledger_id for ld in self.ledgers)

    def ledger(self, ledger_id: int) -> LedgerInfo | None:
        for ld in self.ledgers:
            if ld.ledger_id == ledger_id:
                return ld
        return None


@dataclass(frozen=True, slots=True)
class ManagedCursorInfo:
    """A cursor znode. ``cursors_ledger_id`` is -1 when the position lives only in the znode (after a
    clean close the broker writes the position here and deletes the cursor ledger)."""

    cursors_ledger_id: int
    mark_delete_ledger_id: int | None = None
    mark_delete_entry_id: int | None = None
    last_active: int | None = None
    cursor_properties: Mapping[str, str] = field(default_factory=dict)
    # The properties of the mark-delete position (``ManagedCursor.markDelete(position, properties)``), as of
    # the last time the position was written to the znode: when ``cursors_ledger_id`` is -1 they are the
    # current ones; otherwise the cursor ledger's entries hold newer ones.
    position_properties: Mapping[str, int] = field(default_factory=dict)


# ---- decoding --------------------------------------------------------------------------------------


def _scalars(
    data: bytes, ints: tuple[int, ...], chunks: tuple[int, ...] = (), lists: tuple[int, ...] = ()
) -> tuple[dict[int, int], dict[int, bytes], dict[int, list[bytes]]]:
    """The last value of each varint field ``ints`` names; each singular message field ``chunks`` names, its
    chunks concatenated (proto2 merges a message field written twice, which on the wire is that); and the
    values of each repeated length-delimited field ``lists`` names, in order."""
    values: dict[int, int] = {}
    parts: dict[int, list[bytes]] = {}
    for f in _fields(data):
        if f.number in ints:
            values[f.number] = _int(f)
        elif f.number in chunks or f.number in lists:
            parts.setdefault(f.number, []).append(_bytes(f))
    return values, {n: b"".join(p) for n, p in parts.items() if n in chunks}, parts


def _key_value(data: bytes, key_field: int = 1, value_field: int = 2) -> tuple[str, str]:
    key = value = ""
    for f in _fields(data):
        if f.number == key_field:
            key = _str(f)
        elif f.number == value_field:
            value = _str(f)
    return key, value


def _parse_driver_metadata(data: bytes) -> tuple[str | None, dict[str, str]]:
    name: str | None = None
    props: dict[str, str] = {}
    for f in _fields(data):
        if f.number == 1:
            name = _str(f)
        elif f.number == 2:
            k, v = _key_value(_bytes(f))
            props[k] = v
    return name, props


def _parse_offload(data: bytes) -> OffloadInfo:
    v, sub, _ = _scalars(data, (1, 2, 3, 4, 5), (6,))
    name, props = _parse_driver_metadata(sub[6]) if 6 in sub else (None, {})
    return OffloadInfo(v.get(1), v.get(2), v.get(3, 0) != 0, v.get(4, 0) != 0, v.get(5), name, props)


def _parse_ledger_info(data: bytes) -> LedgerInfo:
    v, sub, _ = _scalars(data, (1, 2, 3, 4), (5,))
    if 1 not in v:
        raise MetadataFormatError("LedgerInfo without its required ledgerId")
    return LedgerInfo(v[1], v.get(2), v.get(3), v.get(4), _parse_offload(sub[5]) if 5 in sub else None)


def parse_managed_ledger_info(data: bytes) -> ManagedLedgerInfo:
    """Decode a topic's znode value. An empty value is valid: the broker creates the znode empty."""
    data = decompressed(data)
    _, sub, lists = _scalars(data, (), (2,), (1, 3))
    ledgers = tuple(_parse_ledger_info(b) for b in lists.get(1, []))
    props = dict(_key_value(b) for b in lists.get(3, []))
    terminated = None
    if 2 in sub:
        pos = _scalars(sub[2], (1, 2))[0]
        if 1 not in pos or 2 not in pos:
            raise MetadataFormatError("terminatedPosition without ledgerId/entryId")
        terminated = (pos[1], pos[2])
    return ManagedLedgerInfo(ledgers, terminated, props)


def parse_managed_cursor_info(data: bytes) -> ManagedCursorInfo:
    data = decompressed(data)
    v, _, lists = _scalars(data, (1, 2, 3, 6), (), (5, 8))
    position_props = dict(_long_property(b) for b in lists.get(5, []))
    props = dict(_key_value(b) for b in lists.get(8, []))  # StringProperty {name = 1, value = 2}
    if 1 not in v:
        raise MetadataFormatError("ManagedCursorInfo without its required cursorsLedgerId")
    return ManagedCursorInfo(v[1], v.get(2), v.get(3), v.get(6), props, position_props)


def _long_property(data: bytes) -> tuple[str, int]:
    """``LongProperty {name = 1; value = 2}``; both are required by the proto."""
    name: str | None = None
    value: int | None = None
    for f in _fields(data):
        if f.number == 1:
            name = _str(f)
        elif f.number == 2:
            value = _int(f)
    if name is None or value is None:
        raise MetadataFormatError("LongProperty without its required name or value")
    return name, value


def parse_schema_locator(data: bytes) -> frozenset[int]:
    """Ledger ids of the schema registry's ``SchemaLocator`` (``/schemas/<schemaId>``, SchemaStorageFormat.proto):
    ``info = 1`` and ``index = 2`` are ``IndexEntry {version = 1; PositionInfo position = 2 {ledgerId = 1;
    entryId = 2}; hash = 3}``. The same set the broker reports as a topic's ``schemaLedgers``."""
    ids: set[int] = set()
    for entry in _fields(data):
        if entry.number not in (1, 2) or entry.wire_type != _LEN:
            continue
        for position in _fields(_bytes(entry)):
            if position.number == 2 and position.wire_type == _LEN:
                for lid in _fields(_bytes(position)):
                    if lid.number == 1 and lid.wire_type == _VARINT:
                        ids.add(_int(lid))
    return frozenset(ids)
