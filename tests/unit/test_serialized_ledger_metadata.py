"""BookKeeper's stored ledger metadata (format 3), as the ZooKeeper ledger store reads it."""

from __future__ import annotations

import pytest

from worker.formats.ledger_metadata import parse_serialized_metadata
from worker.formats.protobuf_wire import MetadataFormatError

# A real znode value from the local stack (ledger 56004, a cursor ledger of a system topic), cut after
# the first custom-metadata entries: header line, varint length, LedgerMetadataFormat.
HEADER = b"BookieMetadataFormatVersion\t3\n"


def varint(v: int) -> bytes:
    out = bytearray()
    v &= 2**64 - 1
    while True:
        b = v & 0x7F
        v >>= 7
        out.append(b | (0x80 if v else 0))
        if not v:
            return bytes(out)


def field(number: int, value: int | bytes) -> bytes:
    if isinstance(value, int):
        return varint(number << 3) + varint(value)
    return varint(number << 3 | 2) + varint(len(value)) + value


def entry(key: str, value: bytes) -> bytes:
    return field(11, field(1, key.encode()) + field(2, value))


def stored(body: bytes) -> bytes:
    return HEADER + varint(len(body)) + body


BODY = (
    field(1, 1)
    + field(2, 1)
    + field(3, 4096)
    + field(4, -1)
    + field(5, 3)
    + field(6, field(1, b"bk0test") + field(2, 0))
    + field(7, 3)
    + field(8, b"")
    + field(9, 1)
    + entry("application", b"pulsar")
    + entry("component", b"managed-ledger")
    + entry("pulsar/managed-ledger", b"public/default/persistent/t")
    + field(12, 0)
)


def test_parses_custom_metadata_state_and_length() -> None:
    md = parse_serialized_metadata(7, stored(BODY), znode_ctime_ms=1_700_000_000_000)
    assert md.ledger_id == 7
    assert md.custom_metadata == {
        "application": "pulsar",
        "component": "managed-ledger",
        "pulsar/managed-ledger": "public/default/persistent/t",
    }
    assert md.state == "CLOSED" and md.length == 4096
    # No stored ctime: the znode's creation time stands in, as BookKeeper's own ledger manager does.
    assert md.ctime_ms == 1_700_000_000_000


def test_stored_ctime_wins_over_the_znode_time() -> None:
    md = parse_serialized_metadata(7, stored(BODY + field(10, 1_600_000_000_000)), znode_ctime_ms=5)
    assert md.ctime_ms == 1_600_000_000_000


def test_non_utf8_value_is_visibly_undecodable() -> None:
    md = parse_serialized_metadata(7, stored(BODY + entry("pulsar/compactedTo", b"\x08\xb2\xb5")))
    assert md.custom_metadata["pulsar/compactedTo"].startswith("<undecodable:")


@pytest.mark.parametrize(
    "data",
    [
        b"",
        b"not metadata at all",
        b"BookieMetadataFormatVersion\t2\nquorumSize: 1\n",
        HEADER + varint(500) + BODY,  # length beyond the data
        HEADER + varint(3) + b"\x08",  # truncated field inside
    ],
)
def test_malformed_or_older_formats_are_refused(data: bytes) -> None:
    with pytest.raises(MetadataFormatError):
        parse_serialized_metadata(1, data)
