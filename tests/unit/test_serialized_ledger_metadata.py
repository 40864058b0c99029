"""BookKeeper's stored ledger metadata (format 3), as the ZooKeeper ledger store reads it."""

from __future__ import annotations

import pytest

from worker.formats.ledger_metadata import parse_serialized_metadata
from worker.formats.protobuf_wire import MetadataFormatError, encode_field, encode_varint

# A real znode value from the local stack (ledger 56004, a cursor ledger of a system topic), cut after
# the first custom-metadata entries: header line, varint length, LedgerMetadataFormat.
HEADER = b"BookieMetadataFormatVersion\t3\n"


def entry(key: str, value: bytes) -> bytes:
    return encode_field(11, encode_field(1, key.encode()) + encode_field(2, value))


def stored(body: bytes) -> bytes:
    return HEADER + encode_varint(len(body)) + body


BODY = (
    encode_field(1, 1)
    + encode_field(2, 1)
    + encode_field(3, 4096)
    + encode_field(4, -1)
    + encode_field(5, 3)
    + encode_field(6, encode_field(1, b"bk0test") + encode_field(2, 0))
    + encode_field(7, 3)
    + encode_field(8, b"")
    + encode_field(9, 1)
    + entry("application", b"pulsar")
    + entry("component", b"managed-ledger")
    + entry("pulsar/managed-ledger", b"public/default/persistent/t")
    + encode_field(12, 0)
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
    md = parse_serialized_metadata(7, stored(BODY + encode_field(10, 1_600_000_000_000)), znode_ctime_ms=5)
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
        HEADER + encode_varint(500) + BODY,  # length beyond the data
        HEADER + encode_varint(3) + b"\x08",  # truncated field inside
    ],
)
def test_malformed_or_older_formats_are_refused(data: bytes) -> None:
    with pytest.raises(MetadataFormatError):
        parse_serialized_metadata(1, data)
