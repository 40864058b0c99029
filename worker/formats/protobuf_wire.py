"""Proto2 wire format, read without a protobuf runtime: the few messages this project reads from ZooKeeper
(Pulsar's managed-ledger metadata, BookKeeper's ledger metadata) are decoded field by field."""

from __future__ import annotations

import struct
from collections.abc import Iterator
from typing import NamedTuple

_VARINT, _FIXED64, _LEN, _START_GROUP, _END_GROUP, _FIXED32 = 0, 1, 2, 3, 4, 5
_U64 = 2**64


class MetadataFormatError(ValueError):
    """The bytes are not a well-formed value of the expected message."""


def read_varint(data: bytes, pos: int) -> tuple[int, int]:
    if pos < len(data) and data[pos] < 0x80:
        return data[pos], pos + 1  # one byte: every tag and most values of the messages read here
    result = shift = 0
    while True:
        if pos >= len(data):
            raise MetadataFormatError("truncated varint")
        if shift >= 70:
            raise MetadataFormatError("varint longer than 10 bytes")
        b = data[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        shift += 7
        if not b & 0x80:
            return result & (_U64 - 1), pos


def _signed64(v: int) -> int:
    return v - _U64 if v >= 2**63 else v


class Field(NamedTuple):
    # A tuple, not a frozen dataclass: a ledger's metadata has dozens of fields, built on every read of the hot
    # path, and a dataclass constructor costs several times a tuple's.
    number: int
    wire_type: int
    start: int  # first byte of the tag: data[start:end] is the field exactly as written
    end: int
    value: int | bytes  # varint/fixed as unsigned int, length-delimited as its payload


def _skip_group(data: bytes, pos: int, number: int) -> int:
    # Deprecated proto2 groups: skipped (never produced by Pulsar, but legal on the wire).
    while True:
        tag, pos = read_varint(data, pos)
        wt = tag & 7
        if wt == _END_GROUP:
            if tag >> 3 != number:
                raise MetadataFormatError("mismatched end-group tag")
            return pos
        pos = _skip_value(data, pos, wt, tag >> 3)


def _skip_value(data: bytes, pos: int, wire_type: int, number: int) -> int:
    if wire_type == _VARINT:
        return read_varint(data, pos)[1]
    if wire_type == _FIXED64:
        end = pos + 8
    elif wire_type == _FIXED32:
        end = pos + 4
    elif wire_type == _LEN:
        n, pos = read_varint(data, pos)
        end = pos + n
    elif wire_type == _START_GROUP:
        return _skip_group(data, pos, number)
    else:
        raise MetadataFormatError(f"invalid wire type {wire_type}")
    if end > len(data):
        raise MetadataFormatError("truncated field")
    return end


def fields(data: bytes) -> Iterator[Field]:
    pos = 0
    while pos < len(data):
        start = pos
        tag, pos = read_varint(data, pos)
        number, wt = tag >> 3, tag & 7
        if number == 0:
            raise MetadataFormatError("field number 0")
        value: int | bytes
        if wt == _VARINT:
            value, pos = read_varint(data, pos)
        elif wt == _LEN:
            n, pos = read_varint(data, pos)
            if pos + n > len(data):
                raise MetadataFormatError("truncated length-delimited field")
            value, pos = data[pos : pos + n], pos + n
        elif wt == _FIXED64:
            if pos + 8 > len(data):
                raise MetadataFormatError("truncated fixed64")
            value, pos = struct.unpack_from("<Q", data, pos)[0], pos + 8
        elif wt == _FIXED32:
            if pos + 4 > len(data):
                raise MetadataFormatError("truncated fixed32")
            value, pos = struct.unpack_from("<I", data, pos)[0], pos + 4
        elif wt == _START_GROUP:
            pos = _skip_group(data, pos, number)
            value = data[start:pos]
        else:
            raise MetadataFormatError(f"invalid wire type {wt} for field {number}")
        yield Field(number, wt, start, pos, value)


def as_int(f: Field) -> int:
    if f.wire_type != _VARINT or not isinstance(f.value, int):
        raise MetadataFormatError(f"field {f.number}: expected a varint, got wire type {f.wire_type}")
    return _signed64(f.value)


def as_bytes(f: Field) -> bytes:
    if f.wire_type != _LEN or not isinstance(f.value, bytes):
        raise MetadataFormatError(f"field {f.number}: expected length-delimited, got wire type {f.wire_type}")
    return f.value


def as_str(f: Field) -> str:
    try:
        return as_bytes(f).decode("utf-8")
    except UnicodeDecodeError as e:
        raise MetadataFormatError(f"field {f.number}: invalid UTF-8") from e


# ---- encoding (what tests, tools and the stored forms this package writes are built with) -----------------


def encode_varint(v: int) -> bytes:
    """A varint; a negative int64 takes ten bytes, as protobuf writes it."""
    v &= _U64 - 1
    out = bytearray()
    while True:
        b, v = v & 0x7F, v >> 7
        out.append(b | (0x80 if v else 0))
        if not v:
            return bytes(out)


def encode_field(number: int, value: int | bytes) -> bytes:
    """One field: an int as a varint, bytes length-delimited."""
    if isinstance(value, int):
        return encode_varint(number << 3 | _VARINT) + encode_varint(value)
    return encode_varint(number << 3 | _LEN) + encode_varint(len(value)) + value
