"""Pulsar's managed-ledger metadata written and edited the way a broker leaves it, for staging: tests, the
benchmarks and the demos put these values into ZooKeeper. The worker only reads them
(:mod:`worker.formats.managed_ledger_metadata` has the schema and the reader).

:func:`without_ledgers` edits the bytes instead of re-encoding a model: every field it does not remove is
copied verbatim, so fields the reader does not know (added by a newer Pulsar) survive the edit."""

from __future__ import annotations

from collections.abc import Iterable

from worker.formats.managed_ledger_metadata import (
    CompressedMetadataError,
    LedgerInfo,
    ManagedCursorInfo,
    ManagedLedgerInfo,
    MetadataFormatError,
    OffloadInfo,
    decompressed,
    is_compressed,
)
from worker.formats.protobuf_wire import as_bytes, as_int, encode_field, fields

# MLDataFormats' CompressionType, as MetaStoreImpl's header names it.
CODEC_NAMES = {0: "NONE", 1: "LZ4", 2: "ZLIB", 3: "ZSTD", 4: "SNAPPY"}


def refuse_compressed(data: bytes) -> None:
    """An editor never rewrites MetaStoreImpl's compressed form (it would have to re-compress it exactly as the
    broker would): refused, naming its codec; a damaged one as the reader names it."""
    if is_compressed(data):
        decompressed(data)
        header = data[6 : 6 + int.from_bytes(data[2:6], "big")]
        codec = next(as_int(f) for f in fields(header) if f.number == 1)
        raise CompressedMetadataError(CODEC_NAMES.get(codec, str(codec)))


def listed_ledger_id(data: bytes) -> int:
    """The ledgerId of a LedgerInfo (field 1)."""
    lid = next((as_int(f) for f in fields(data) if f.number == 1), None)
    if lid is None:
        raise MetadataFormatError("LedgerInfo without its required ledgerId")
    return lid


def without_ledgers(data: bytes, ids: Iterable[int]) -> bytes:
    """``data`` (a ``ManagedLedgerInfo``) minus the LedgerInfo entries of ``ids``; every other byte is kept
    as written.

    Ids that are not listed are ignored (removing is idempotent); callers that need to know compare
    ``parse_managed_ledger_info`` before and after.
    """
    drop = set(ids)
    refuse_compressed(data)
    out = bytearray()
    for f in fields(data):
        if f.number == 1 and listed_ledger_id(as_bytes(f)) in drop:
            continue
        out += data[f.start : f.end]
    return bytes(out)


def _int(number: int, v: int | None) -> bytes:
    return b"" if v is None else encode_field(number, v)


def _str(number: int, s: str) -> bytes:
    return encode_field(number, s.encode("utf-8"))


def _kv(number: int, k: str, v: str) -> bytes:
    return encode_field(number, _str(1, k) + _str(2, v))


def encode_offload_info(o: OffloadInfo) -> bytes:
    out = _int(1, o.uid_msb) + _int(2, o.uid_lsb)
    out += _int(3, int(o.complete)) + _int(4, int(o.bookkeeper_deleted)) + _int(5, o.timestamp)
    if o.driver_name is not None or o.driver_metadata:
        dm = _str(1, o.driver_name or "") + b"".join(_kv(2, k, v) for k, v in o.driver_metadata.items())
        out += encode_field(6, dm)
    return out


def encode_ledger_info(ld: LedgerInfo) -> bytes:
    out = _int(1, ld.ledger_id) + _int(2, ld.entries) + _int(3, ld.size) + _int(4, ld.timestamp)
    if ld.offload is not None:
        out += encode_field(5, encode_offload_info(ld.offload))
    return out


def encode_managed_ledger_info(info: ManagedLedgerInfo) -> bytes:
    out = b"".join(encode_field(1, encode_ledger_info(ld)) for ld in info.ledgers)
    if info.terminated_position is not None:
        lid, eid = info.terminated_position
        out += encode_field(2, _int(1, lid) + _int(2, eid))
    out += b"".join(_kv(3, k, v) for k, v in info.properties.items())
    return out


def encode_managed_cursor_info(c: ManagedCursorInfo) -> bytes:
    out = _int(1, c.cursors_ledger_id) + _int(2, c.mark_delete_ledger_id)
    out += _int(3, c.mark_delete_entry_id)
    out += b"".join(encode_field(5, _str(1, k) + _int(2, v)) for k, v in c.position_properties.items())
    out += _int(6, c.last_active)
    out += b"".join(_kv(8, k, v) for k, v in c.cursor_properties.items())
    return out
