"""Ledger metadata as the worker reads it (``worker.formats.ledger_metadata``): the bookie's HTTP answer (base64
custom metadata, creation time, fail-closed decoding) and BookKeeper's stored record (format 3), as the ZooKeeper
ledger store reads it."""

from __future__ import annotations

import base64

import pytest
from hypothesis import given
from hypothesis import strategies as st

from worker.errors import BackendError
from worker.formats.ledger_metadata import parse_metadata, parse_serialized_metadata
from worker.formats.protobuf_wire import MetadataFormatError, encode_field, encode_varint


def b64(s: str) -> str:
    return base64.b64encode(s.encode()).decode()


# The shape bookkeeper-server 4.17's /api/v1/ledger/metadata/?ledger_id=N answers with.
BODY = {
    "42": {
        "metadataFormatVersion": 3,
        "ensembleSize": 1,
        "writeQuorumSize": 1,
        "ackQuorumSize": 1,
        "lastEntryId": 4,
        "length": 1234,
        "digestType": "CRC32C",
        "password": "",
        "ctime": 1_700_000_000_000,
        "state": "CLOSED",
        "customMetadata": {
            "application": b64("pulsar"),
            "component": b64("managed-ledger"),
            "pulsar/managed-ledger": b64("public/default/persistent/my+topic"),
        },
        "ensembles": {"0": ["127.0.0.1:3181"]},
    }
}


def test_parse_metadata() -> None:
    md = parse_metadata(42, BODY)
    assert md.ledger_id == 42
    assert md.custom_metadata == {
        "application": "pulsar",
        "component": "managed-ledger",
        "pulsar/managed-ledger": "public/default/persistent/my+topic",
    }
    assert md.ctime_ms == 1_700_000_000_000
    assert md.length == 1234
    assert md.state == "CLOSED"
    assert md.raw is BODY["42"]


def test_no_entry_for_the_ledger_is_a_backend_error() -> None:
    with pytest.raises(BackendError):
        parse_metadata(43, BODY)
    with pytest.raises(BackendError):
        parse_metadata(42, {"42": "not a dict"})
    with pytest.raises(BackendError):
        parse_metadata(42, {})


def test_missing_optional_fields() -> None:
    md = parse_metadata(1, {"1": {}})
    assert md.custom_metadata == {}
    assert md.ctime_ms is None
    assert md.length == 0
    assert md.state == ""


@pytest.mark.parametrize("ctime", [0, -5, None, "1700000000000", 1.7e12, True])
def test_unusable_ctime_is_none(ctime: object) -> None:
    # No creation time means the ledger cannot be proven old enough (TOO_YOUNG, never deleted).
    assert parse_metadata(1, {"1": {"ctime": ctime}}).ctime_ms is None


@pytest.mark.parametrize(
    "raw",
    [
        "not base64!",
        "cHVsc2F",  # incomplete quantum
        "cHVs c2Fy",  # whitespace is not valid base64 under validate=True
        base64.b64encode(b"\xff\xfe\x00").decode(),  # not UTF-8
    ],
)
def test_undecodable_values_stay_visibly_undecodable(raw: str) -> None:
    md = parse_metadata(1, {"1": {"customMetadata": {"application": raw}}})
    value = md.custom_metadata["application"]
    assert value.startswith("<undecodable:")
    assert value != "pulsar"


def test_non_string_value_is_undecodable_not_a_crash() -> None:
    md = parse_metadata(1, {"1": {"customMetadata": {"application": 5, "component": None}}})
    assert md.custom_metadata["application"].startswith("<undecodable:")
    assert md.custom_metadata["component"].startswith("<undecodable:")


def test_values_are_not_decoded_twice_or_left_raw() -> None:
    # A plain-text value that happens to be valid base64 is still decoded: the bookie always encodes.
    md = parse_metadata(1, {"1": {"customMetadata": {"application": b64(b64("pulsar"))}}})
    assert md.custom_metadata["application"] == b64("pulsar")


@given(st.dictionaries(st.text(max_size=20), st.text(st.characters(blacklist_categories=("Cs",)), max_size=50)))
def test_base64_round_trip(cm: dict[str, str]) -> None:
    md = parse_metadata(7, {"7": {"customMetadata": {k: b64(v) for k, v in cm.items()}, "ctime": 5}})
    assert md.custom_metadata == cm
    assert md.ctime_ms == 5


@given(st.dictionaries(st.text(max_size=10), st.text(max_size=30)))
def test_arbitrary_values_never_raise(cm: dict[str, str]) -> None:
    md = parse_metadata(7, {"7": {"customMetadata": cm}})
    assert set(md.custom_metadata) == set(cm)


# ---- BookKeeper's stored ledger metadata (format 3), as the ZooKeeper ledger store reads it ---------------------

# A real znode value from the local stack (ledger 56004, a cursor ledger of a system topic), cut after
# the first custom-metadata entries: header line, varint length, LedgerMetadataFormat.
HEADER = b"BookieMetadataFormatVersion\t3\n"


def entry(key: str, value: bytes) -> bytes:
    return encode_field(11, encode_field(1, key.encode()) + encode_field(2, value))


def stored(body: bytes) -> bytes:
    return HEADER + encode_varint(len(body)) + body


STORED_BODY = (
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
    md = parse_serialized_metadata(7, stored(STORED_BODY), znode_ctime_ms=1_700_000_000_000)
    assert md.ledger_id == 7
    assert md.custom_metadata == {
        "application": "pulsar",
        "component": "managed-ledger",
        "pulsar/managed-ledger": "public/default/persistent/t",
    }
    assert md.state == "CLOSED" and md.length == 4096
    # An empty closed ledger: lastEntryId -1 (a negative int64 varint).
    assert md.last_entry_id == -1
    # No stored ctime: the znode's creation time stands in, as BookKeeper's own ledger manager does.
    assert md.ctime_ms == 1_700_000_000_000


def test_a_closed_ledgers_last_entry_is_read() -> None:
    body = STORED_BODY.replace(encode_field(4, -1), encode_field(4, 41))
    assert parse_serialized_metadata(7, stored(body)).last_entry_id == 41
    assert parse_serialized_metadata(7, stored(body.replace(encode_field(4, 41), b""))).last_entry_id is None


def test_stored_ctime_wins_over_the_znode_time() -> None:
    md = parse_serialized_metadata(7, stored(STORED_BODY + encode_field(10, 1_600_000_000_000)), znode_ctime_ms=5)
    assert md.ctime_ms == 1_600_000_000_000


def test_non_utf8_value_is_visibly_undecodable() -> None:
    md = parse_serialized_metadata(7, stored(STORED_BODY + entry("pulsar/compactedTo", b"\x08\xb2\xb5")))
    assert md.custom_metadata["pulsar/compactedTo"].startswith("<undecodable:")


@pytest.mark.parametrize(
    "data",
    [
        b"",
        b"not metadata at all",
        b"BookieMetadataFormatVersion\t2\nquorumSize: 1\n",
        HEADER + encode_varint(500) + STORED_BODY,  # length beyond the data
        HEADER + encode_varint(3) + b"\x08",  # truncated field inside
    ],
)
def test_malformed_or_older_formats_are_refused(data: bytes) -> None:
    with pytest.raises(MetadataFormatError):
        parse_serialized_metadata(1, data)
