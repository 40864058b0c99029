"""PendingDeleteLedgerInfo (``worker.formats.message``): validation, the Avro codec (PIP-186 field names), the offload
uuid, and the broker extension's copy of the Avro schema."""

from __future__ import annotations

import io
import json
import uuid
from typing import Any

import fastavro
import pytest
from hypothesis import given
from hypothesis import strategies as st

from testkit.stack import REPO
from tests.unit.fakes import BUCKET_TOPIC
from worker.broker.client import PendingDeleteSchema
from worker.formats.message import (
    _PARSED,
    AVRO_SCHEMA,
    InvalidMessage,
    LedgerComponent,
    LedgerType,
    OffloadContext,
    PartialInfo,
    PendingDeleteLedgerInfo,
    decode,
    decode_lenient,
    encode,
)
from worker.formats.topic_name import MAX_MANAGED_LEDGER_PATH_BYTES, TopicName

LONG_MIN, LONG_MAX = -(2**63), 2**63 - 1


def raw_record(**over: object) -> dict[str, object]:
    rec: dict[str, object] = {
        "topicName": "persistent://t/ns/x",
        "ledgerComponent": "MANAGED_LEDGER",
        "cursorName": None,
        "schemaId": None,
        "ledgerType": "LEDGER",
        "ledgerId": 42,
        "offloadContext": None,
        "properties": {},
    }
    rec.update(over)
    return rec


def avro_bytes(rec: dict[str, object]) -> bytes:
    buf = io.BytesIO()
    fastavro.schemaless_writer(buf, _PARSED, rec)
    return buf.getvalue()


# ---- strategies --------------------------------------------------------------------------------------------

_entity = st.text(st.sampled_from("abcxyzABC019-_=:."), min_size=1, max_size=8).filter(lambda s: s not in (".", ".."))
_local = st.text(
    st.characters(blacklist_categories=("Cs", "Cc"), blacklist_characters="/"), min_size=1, max_size=20
).filter(lambda s: s not in (".", ".."))
topic_strings = st.one_of(
    st.builds(lambda t, n, ln: f"persistent://{t}/{n}/{ln}", _entity, _entity, _local),
    st.builds(lambda t, n, ln: f"{t}/{n}/{ln}", _entity, _entity, _local),
)
text = st.text(st.characters(blacklist_categories=("Cs",)), max_size=20)
string_maps = st.dictionaries(text, text, max_size=4)
offload_contexts = st.builds(
    OffloadContext,
    st.integers(LONG_MIN, LONG_MAX),
    st.integers(LONG_MIN, LONG_MAX),
    st.sampled_from(["aws-s3", "S3", "filesystem", "google-cloud-storage"]) | text,
    string_maps,
)


@st.composite
def infos(draw: st.DrawFn) -> PendingDeleteLedgerInfo:
    component = draw(st.sampled_from(list(LedgerComponent)))
    ledger_type = draw(st.sampled_from(list(LedgerType)))
    nonempty = text.filter(bool)
    needs_cursor = component in (LedgerComponent.MANAGED_CURSOR, LedgerComponent.DELAYED_INDEX_BUCKET)
    cursor = draw(nonempty) if needs_cursor else draw(st.none() | text)
    schema = draw(nonempty) if component is LedgerComponent.SCHEMA_STORAGE else draw(st.none() | text)
    oc = draw(offload_contexts) if ledger_type is LedgerType.OFFLOAD_LEDGER else draw(st.none() | offload_contexts)
    return PendingDeleteLedgerInfo(
        topic_name=draw(topic_strings),
        ledger_component=component,
        ledger_type=ledger_type,
        ledger_id=draw(st.integers(0, LONG_MAX)),
        cursor_name=cursor,
        schema_id=schema,
        offload_context=oc,
        properties=draw(string_maps),
    )


# ---- codec ---------------------------------------------------------------------------------------------------


@given(infos())
def test_encode_decode_round_trip(info: PendingDeleteLedgerInfo) -> None:
    assert decode(encode(info)) == info


@given(infos())
def test_from_avro_to_avro_round_trip(info: PendingDeleteLedgerInfo) -> None:
    assert PendingDeleteLedgerInfo.from_avro(info.to_avro()) == info


@given(st.binary(max_size=200))
def test_random_bytes_only_ever_raise_invalid_message(data: bytes) -> None:
    try:
        info = decode(data)
    except InvalidMessage:
        return
    # Whatever decodes must be a valid message.
    assert isinstance(info, PendingDeleteLedgerInfo)
    assert info.ledger_id >= 0
    TopicName.parse(info.topic_name)


@given(infos(), st.data())
def test_mutated_valid_payloads_only_ever_raise_invalid_message(
    info: PendingDeleteLedgerInfo, data: st.DataObject
) -> None:
    raw = bytearray(encode(info))
    i = data.draw(st.integers(0, len(raw) - 1))
    raw[i] = data.draw(st.integers(0, 255))
    cut = data.draw(st.integers(0, len(raw)))
    for payload in (bytes(raw), bytes(raw[:cut])):
        try:
            decode(payload)
        except InvalidMessage:
            pass


def test_trailing_bytes_are_invalid() -> None:
    info = PendingDeleteLedgerInfo("persistent://t/ns/x", LedgerComponent.MANAGED_LEDGER, LedgerType.LEDGER, 1)
    with pytest.raises(InvalidMessage, match="trailing"):
        decode(encode(info) + b"\x00")


def test_truncated_payload_is_invalid() -> None:
    info = PendingDeleteLedgerInfo("persistent://t/ns/x", LedgerComponent.MANAGED_LEDGER, LedgerType.LEDGER, 1)
    with pytest.raises(InvalidMessage):
        decode(encode(info)[:-1])


@pytest.mark.parametrize("data", [b"", b"\xff", b"\x00" * 3, b"\x06abc\x08"])
def test_garbage_is_invalid(data: bytes) -> None:
    with pytest.raises(InvalidMessage):
        decode(data)


@pytest.mark.parametrize(
    "over",
    [
        {"topicName": "non-persistent://t/ns/x"},
        {"topicName": "persistent://t/../x"},
        {"topicName": "persistent://t//x"},
        {"ledgerId": -1},
        {"ledgerComponent": "MANAGED_CURSOR"},  # no cursorName
        {"ledgerComponent": "MANAGED_CURSOR", "cursorName": ""},
        {"ledgerComponent": "DELAYED_INDEX_BUCKET"},  # no cursorName
        {"ledgerComponent": "SCHEMA_STORAGE"},  # no schemaId
        {"ledgerComponent": "SCHEMA_STORAGE", "schemaId": ""},
        {"ledgerType": "OFFLOAD_LEDGER"},  # no offloadContext
    ],
)
def test_well_formed_avro_that_breaks_the_rules_is_invalid(over: dict[str, object]) -> None:
    with pytest.raises(InvalidMessage):
        decode(avro_bytes(raw_record(**over)))


def test_well_formed_avro_decodes() -> None:
    info = decode(
        avro_bytes(
            raw_record(
                ledgerComponent="MANAGED_CURSOR",
                cursorName="sub",
                ledgerType="OFFLOAD_LEDGER",
                offloadContext={"uidMsb": -1, "uidLsb": 7, "driverName": "aws-s3", "driverMetadata": {"bucket": "b"}},
                properties={"k": "v"},
            )
        )
    )
    assert info.ledger_component is LedgerComponent.MANAGED_CURSOR
    assert info.ledger_type is LedgerType.OFFLOAD_LEDGER
    assert info.cursor_name == "sub"
    assert info.offload_context == OffloadContext(-1, 7, "aws-s3", {"bucket": "b"})
    assert info.properties == {"k": "v"}
    assert info.topic == TopicName.parse("persistent://t/ns/x")
    assert info.dedupe_key == ("OFFLOAD_LEDGER", 42)


@pytest.mark.parametrize(
    "d",
    [
        {},
        {"topicName": "persistent://t/ns/x"},
        raw_record(ledgerComponent="BOGUS"),
        raw_record(ledgerType="BOGUS"),
        raw_record(ledgerId="abc"),
        raw_record(ledgerId=None),
        raw_record(offloadContext={"uidMsb": 1}),
        raw_record(offloadContext={"uidMsb": "x", "uidLsb": 1, "driverName": "s3"}),
        raw_record(topicName=None),
        raw_record(topicName=7),
    ],
)
def test_from_avro_bad_dicts_are_invalid(d: dict[str, object]) -> None:
    with pytest.raises(InvalidMessage):
        PendingDeleteLedgerInfo.from_avro(d)


def test_constructor_validates() -> None:
    with pytest.raises(InvalidMessage):
        PendingDeleteLedgerInfo("persistent://t/ns/..", LedgerComponent.MANAGED_LEDGER, LedgerType.LEDGER, 1)
    with pytest.raises(InvalidMessage):
        PendingDeleteLedgerInfo("persistent://t/ns/x", LedgerComponent.MANAGED_LEDGER, LedgerType.LEDGER, -5)


def test_ledger_id_must_fit_a_java_long() -> None:
    # Anything valid must be encodable as Avro's long; 2**63 is not a Java long.
    PendingDeleteLedgerInfo("persistent://t/ns/x", LedgerComponent.MANAGED_LEDGER, LedgerType.LEDGER, LONG_MAX)
    with pytest.raises(InvalidMessage):
        PendingDeleteLedgerInfo("persistent://t/ns/x", LedgerComponent.MANAGED_LEDGER, LedgerType.LEDGER, 2**63)


def test_schema_field_names_follow_pip_186() -> None:
    names = [f["name"] for f in AVRO_SCHEMA["fields"]]
    assert names == [
        "topicName",
        "ledgerComponent",
        "cursorName",
        "schemaId",
        "ledgerType",
        "ledgerId",
        "offloadContext",
        "properties",
    ]
    oc = AVRO_SCHEMA["fields"][6]["type"][1]
    assert [f["name"] for f in oc["fields"]] == ["uidMsb", "uidLsb", "driverName", "driverMetadata"]


def test_pulsar_schema_wrapper_uses_the_same_codec() -> None:
    info = PendingDeleteLedgerInfo(
        "persistent://t/ns/x", LedgerComponent.SCHEMA_STORAGE, LedgerType.LEDGER, 3, schema_id="t/ns/x"
    )
    s = PendingDeleteSchema()
    assert s.encode(info) == encode(info)
    assert s.decode(encode(info)) == info
    with pytest.raises(InvalidMessage):
        s.decode(b"\xff\xff")


def test_to_json_is_deterministic() -> None:
    info = PendingDeleteLedgerInfo(
        "persistent://t/ns/x", LedgerComponent.MANAGED_LEDGER, LedgerType.LEDGER, 3, properties={"b": "1", "a": "2"}
    )
    assert info.to_json() == info.to_json()
    assert '"ledgerId": 3' in info.to_json()


# ---- offload uuid: Java's UUID(msb, lsb) with signed longs ----------------------------------------------------------


@pytest.mark.parametrize(
    ("msb", "lsb", "text"),
    [
        (0, 0, "00000000-0000-0000-0000-000000000000"),
        (1, -1, "00000000-0000-0001-ffff-ffffffffffff"),
        (-1, 1, "ffffffff-ffff-ffff-0000-000000000001"),
        (LONG_MIN, LONG_MAX, "80000000-0000-0000-7fff-ffffffffffff"),
        # new UUID(0x123e4567e89b12d3L, 0xa456426614174000L) in Java (lsb is negative as a long)
        (0x123E4567E89B12D3, 0xA456426614174000 - 2**64, "123e4567-e89b-12d3-a456-426614174000"),
    ],
)
def test_uuid_from_signed_longs(msb: int, lsb: int, text: str) -> None:
    ctx = OffloadContext(msb, lsb, "aws-s3")
    assert str(ctx.uuid) == text
    back = OffloadContext.from_uuid(uuid.UUID(text), "aws-s3", {})
    assert (back.uid_msb, back.uid_lsb) == (msb, lsb)


@given(st.uuids(), string_maps)
def test_uuid_round_trip_through_signed_longs(u: uuid.UUID, md: dict[str, str]) -> None:
    ctx = OffloadContext.from_uuid(u, "aws-s3", md)
    assert LONG_MIN <= ctx.uid_msb <= LONG_MAX
    assert LONG_MIN <= ctx.uid_lsb <= LONG_MAX
    assert ctx.uuid == u
    assert ctx.driver_metadata == md


@given(st.integers(LONG_MIN, LONG_MAX), st.integers(LONG_MIN, LONG_MAX))
def test_signed_longs_round_trip_through_uuid(msb: int, lsb: int) -> None:
    u = OffloadContext(msb, lsb, "s3").uuid
    back = OffloadContext.from_uuid(u, "s3", {})
    assert (back.uid_msb, back.uid_lsb) == (msb, lsb)


def test_from_uuid_copies_driver_metadata() -> None:
    md = {"bucket": "b"}
    ctx = OffloadContext.from_uuid(uuid.uuid4(), "s3", md)
    md["bucket"] = "other"
    assert ctx.driver_metadata == {"bucket": "b"}


def _raw(**fields: Any) -> bytes:
    rec = {
        "topicName": "persistent://t/ns/x",
        "ledgerComponent": "MANAGED_CURSOR",
        "cursorName": None,
        "schemaId": None,
        "ledgerType": "OFFLOAD_LEDGER",
        "ledgerId": 2**40 + 7,
        "offloadContext": None,
        "properties": {},
        **fields,
    }
    buf = io.BytesIO()
    fastavro.schemaless_writer(buf, fastavro.parse_schema(AVRO_SCHEMA), rec)
    return buf.getvalue()


def test_lenient_decode_reads_what_validation_refuses() -> None:
    data = _raw()  # a cursor without its name, an offloaded copy without its context: invalid twice
    with pytest.raises(InvalidMessage):
        decode(data)
    want = PartialInfo("persistent://t/ns/x", "MANAGED_CURSOR", None, None, "OFFLOAD_LEDGER", 2**40 + 7)
    assert decode_lenient(data) == want
    assert decode_lenient(data + b"trailing") == want
    # Cut after the ledger id (the null offload context and empty properties are one byte each).
    assert decode_lenient(data[:-2]) == want
    # Cut inside the ledger id: everything before it.
    cut = decode_lenient(data[: len(data) - 5])
    assert cut.ledger_type == "OFFLOAD_LEDGER" and cut.ledger_id is None
    assert decode_lenient(_raw(topicName="persistent://t/ns/a/b", ledgerId=-3)).ledger_id == -3


def test_lenient_decode_of_garbage_reads_nothing_plausible() -> None:
    assert decode_lenient(b"") == PartialInfo()
    assert decode_lenient(b"\x00garbage") == PartialInfo()
    assert decode_lenient(b"\x06ab\xff") == PartialInfo()  # not UTF-8
    # An enum index out of range stops the reading: nothing after it is trusted.
    assert decode_lenient(b"\x02x\x7e\x00\x00\x00\x02") == PartialInfo(topic_name="x")


def test_a_topic_name_the_metadata_store_cannot_hold_is_invalid() -> None:
    rec = {
        "topicName": "persistent://t/ns/" + "a" * MAX_MANAGED_LEDGER_PATH_BYTES,
        "ledgerComponent": "MANAGED_LEDGER",
        "cursorName": None,
        "schemaId": None,
        "ledgerType": "LEDGER",
        "ledgerId": 1,
        "offloadContext": None,
        "properties": {},
    }
    buf = io.BytesIO()
    fastavro.schemaless_writer(buf, _PARSED, rec)
    with pytest.raises(InvalidMessage, match="metadata store"):
        decode(buf.getvalue())


def test_a_bucket_message_needs_its_subscription() -> None:
    with pytest.raises(InvalidMessage, match="DELAYED_INDEX_BUCKET needs cursorName"):
        PendingDeleteLedgerInfo(BUCKET_TOPIC, LedgerComponent.DELAYED_INDEX_BUCKET, LedgerType.LEDGER, 31)


# ---- the broker extension's copy of the schema ---------------------------------------------------------------------
# Its Avro schema (a resource of its jar) is the worker's, byte for byte: the Java side publishes what the Python
# worker reads, and the broker sees one schema version, not two.

RESOURCE = (
    REPO
    / "broker-extension"
    / "src"
    / "main"
    / "resources"
    / "org"
    / "ledgerdeletion"
    / "broker"
    / "PendingDeleteLedgerInfo.avsc"
)


def test_extension_schema_is_the_workers_text() -> None:
    # The topology registers json.dumps(AVRO_SCHEMA); the extension registers the resource, stripped.
    assert RESOURCE.read_text().strip() == json.dumps(AVRO_SCHEMA)
