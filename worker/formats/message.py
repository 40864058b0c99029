"""``PendingDeleteLedgerInfo``: the message of the pending-deletions topic, and its Avro schema.

Field names follow PIP-186 so that a Java producer of the PIP interoperates. The schema is registered on
the topics (producers and consumers declare it), but the worker decodes the raw bytes itself: a payload
that does not decode must become a dead letter with a reason, never an exception in the receive loop.
"""

from __future__ import annotations

import enum
import io
import json
import uuid as uuid_mod
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import fastavro

# Defined with the owner rule (worker.core must not import this module's pulsar client); re-exported here.
from worker.formats.topic_name import InvalidTopicName, TopicName

NAMESPACE = "org.apache.pulsar.broker.service.ledgerdeletion"


class LedgerComponent(enum.StrEnum):
    """What part of a topic a ledger holds (PIP-186's ``LedgerComponent``)."""

    MANAGED_LEDGER = "MANAGED_LEDGER"
    MANAGED_CURSOR = "MANAGED_CURSOR"
    SCHEMA_STORAGE = "SCHEMA_STORAGE"
    COMPACTED_LEDGER = "COMPACTED_LEDGER"
    # Not in PIP-186 either (appended, like COMPACTED_LEDGER: Avro resolves enum symbols by name, so readers
    # of the shorter list still read every older message): a delayed-delivery bucket's snapshot ledger
    # (``BookkeeperBucketSnapshotStorage``), owned by one subscription (``cursorName``, decoded).
    DELAYED_INDEX_BUCKET = "DELAYED_INDEX_BUCKET"


class LedgerType(enum.StrEnum):
    LEDGER = "LEDGER"
    OFFLOAD_LEDGER = "OFFLOAD_LEDGER"


AVRO_SCHEMA: dict[str, Any] = {
    "type": "record",
    "name": "PendingDeleteLedgerInfo",
    "namespace": NAMESPACE,
    "fields": [
        {"name": "topicName", "type": "string"},
        {
            "name": "ledgerComponent",
            "type": {"type": "enum", "name": "LedgerComponent", "symbols": [c.value for c in LedgerComponent]},
        },
        {"name": "cursorName", "type": ["null", "string"], "default": None},
        {"name": "schemaId", "type": ["null", "string"], "default": None},
        {
            "name": "ledgerType",
            "type": {"type": "enum", "name": "LedgerType", "symbols": [t.value for t in LedgerType]},
        },
        {"name": "ledgerId", "type": "long"},
        {
            "name": "offloadContext",
            "type": [
                "null",
                {
                    "type": "record",
                    "name": "OffloadContext",
                    "fields": [
                        {"name": "uidMsb", "type": "long"},
                        {"name": "uidLsb", "type": "long"},
                        {"name": "driverName", "type": "string"},
                        {"name": "driverMetadata", "type": {"type": "map", "values": "string"}, "default": {}},
                    ],
                },
            ],
            "default": None,
        },
        {"name": "properties", "type": {"type": "map", "values": "string"}, "default": {}},
    ],
}
_PARSED = fastavro.parse_schema(AVRO_SCHEMA)


class InvalidMessage(ValueError):
    """The payload cannot be a pending deletion: dead-lettered with reason ``invalid``."""


@dataclass(frozen=True, slots=True)
class OffloadContext:
    uid_msb: int
    uid_lsb: int
    driver_name: str
    driver_metadata: Mapping[str, str] = field(default_factory=dict)

    @property
    def uuid(self) -> uuid_mod.UUID:
        # Java's UUID(msb, lsb) with signed longs: the same 128 bits, two's complement.
        return uuid_mod.UUID(int=((self.uid_msb & (2**64 - 1)) << 64) | (self.uid_lsb & (2**64 - 1)))

    @classmethod
    def from_uuid(cls, u: uuid_mod.UUID, driver_name: str, driver_metadata: Mapping[str, str]) -> OffloadContext:
        def signed(v: int) -> int:
            return v - 2**64 if v >= 2**63 else v

        return cls(signed(u.int >> 64), signed(u.int & (2**64 - 1)), driver_name, dict(driver_metadata))


@dataclass(frozen=True, slots=True)
class PendingDeleteLedgerInfo:
    topic_name: str
    ledger_component: LedgerComponent
    ledger_type: LedgerType
    ledger_id: int
    cursor_name: str | None = None
    schema_id: str | None = None
    offload_context: OffloadContext | None = None
    properties: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        validate(self)

    @property
    def topic(self) -> TopicName:
        return TopicName.parse(self.topic_name)

    @property
    def dedupe_key(self) -> tuple[str, int]:
        return (self.ledger_type.value, self.ledger_id)

    def to_avro(self) -> dict[str, Any]:
        oc = self.offload_context
        return {
            "topicName": self.topic_name,
            "ledgerComponent": self.ledger_component.value,
            "cursorName": self.cursor_name,
            "schemaId": self.schema_id,
            "ledgerType": self.ledger_type.value,
            "ledgerId": self.ledger_id,
            "offloadContext": None
            if oc is None
            else {
                "uidMsb": oc.uid_msb,
                "uidLsb": oc.uid_lsb,
                "driverName": oc.driver_name,
                "driverMetadata": dict(oc.driver_metadata),
            },
            "properties": dict(self.properties),
        }

    def to_json(self) -> str:
        return json.dumps(self.to_avro(), sort_keys=True)

    @classmethod
    def from_avro(cls, d: Mapping[str, Any]) -> PendingDeleteLedgerInfo:
        try:
            oc_raw = d.get("offloadContext")
            oc = (
                None
                if oc_raw is None
                else OffloadContext(
                    int(oc_raw["uidMsb"]),
                    int(oc_raw["uidLsb"]),
                    str(oc_raw["driverName"]),
                    dict(oc_raw.get("driverMetadata") or {}),
                )
            )
            return cls(
                topic_name=d["topicName"],
                ledger_component=LedgerComponent(d["ledgerComponent"]),
                ledger_type=LedgerType(d["ledgerType"]),
                ledger_id=int(d["ledgerId"]),
                cursor_name=d.get("cursorName"),
                schema_id=d.get("schemaId"),
                offload_context=oc,
                properties=dict(d.get("properties") or {}),
            )
        except InvalidMessage:
            raise
        except (KeyError, ValueError, TypeError) as e:
            raise InvalidMessage(f"missing or bad field: {e}") from e


def validate(info: PendingDeleteLedgerInfo) -> None:
    """Rules every message must satisfy, whoever produced it."""
    try:
        TopicName.parse(info.topic_name)
    except InvalidTopicName as e:
        raise InvalidMessage(str(e)) from e
    if not isinstance(info.ledger_id, int) or not 0 <= info.ledger_id <= 2**63 - 1:
        raise InvalidMessage(f"ledgerId must be a non-negative long: {info.ledger_id!r}")
    if info.ledger_component in (LedgerComponent.MANAGED_CURSOR, LedgerComponent.DELAYED_INDEX_BUCKET) and not (
        info.cursor_name
    ):
        raise InvalidMessage(f"{info.ledger_component.value} needs cursorName")
    if info.ledger_component is LedgerComponent.SCHEMA_STORAGE and not info.schema_id:
        raise InvalidMessage("SCHEMA_STORAGE needs schemaId")
    if info.ledger_type is LedgerType.OFFLOAD_LEDGER and info.offload_context is None:
        raise InvalidMessage("OFFLOAD_LEDGER needs offloadContext")


def encode(info: PendingDeleteLedgerInfo) -> bytes:
    buf = io.BytesIO()
    fastavro.schemaless_writer(buf, _PARSED, info.to_avro())
    return buf.getvalue()


def decode(data: bytes) -> PendingDeleteLedgerInfo:
    """Decode and validate; any failure is :class:`InvalidMessage`."""
    buf = io.BytesIO(data)
    try:
        record = fastavro.schemaless_reader(buf, _PARSED, None)
    except Exception as e:  # fastavro raises anything from EOFError to UnicodeDecodeError on garbage
        raise InvalidMessage(f"not a PendingDeleteLedgerInfo Avro record: {type(e).__name__}: {e}") from e
    if buf.tell() != len(data):
        raise InvalidMessage(f"{len(data) - buf.tell()} trailing bytes after the Avro record")
    if not isinstance(record, dict):
        raise InvalidMessage("payload is not a record")
    return PendingDeleteLedgerInfo.from_avro(record)


@dataclass(frozen=True, slots=True)
class PartialInfo:
    """What :func:`decode_lenient` could read of a payload: fields in schema order up to the first one
    that cannot be read. Display only; never a basis for a decision."""

    topic_name: str | None = None
    ledger_component: str | None = None
    cursor_name: str | None = None
    schema_id: str | None = None
    ledger_type: str | None = None
    ledger_id: int | None = None


class _Truncated(Exception):
    pass


class _LenientReader:
    """Avro binary encoding, one primitive at a time (what fastavro does for a whole record, but a
    reader that can stop half-way and keep what it has)."""

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.pos = 0

    def long(self) -> int:
        shift = result = 0
        for _ in range(10):
            if self.pos >= len(self.data):
                raise _Truncated
            b = self.data[self.pos]
            self.pos += 1
            result |= (b & 0x7F) << shift
            if not b & 0x80:
                return (result >> 1) ^ -(result & 1)
            shift += 7
        raise _Truncated  # longer than any long

    def string(self) -> str:
        n = self.long()
        if n < 0 or self.pos + n > len(self.data):
            raise _Truncated
        raw = self.data[self.pos : self.pos + n]
        self.pos += n
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError:
            raise _Truncated from None

    def enum(self, symbols: list[str]) -> str:
        i = self.long()
        if not 0 <= i < len(symbols):
            raise _Truncated  # not this schema's enum: what follows is not this schema's either
        return symbols[i]

    def optional_string(self) -> str | None:
        branch = self.long()
        if branch == 0:
            return None
        if branch == 1:
            return self.string()
        raise _Truncated


def decode_lenient(data: bytes) -> PartialInfo:
    """The leading fields of a ``PendingDeleteLedgerInfo`` payload, read without validation, so an ``invalid``
    dead letter still shows its ledger, type and topic to an operator. Reading stops at the first value that
    cannot belong to the schema; :func:`decode` stays the only way to a :class:`PendingDeleteLedgerInfo`."""
    r = _LenientReader(data)
    got: dict[str, Any] = {}
    steps: list[tuple[str, Any]] = [
        ("topic_name", r.string),
        ("ledger_component", lambda: r.enum([c.value for c in LedgerComponent])),
        ("cursor_name", r.optional_string),
        ("schema_id", r.optional_string),
        ("ledger_type", lambda: r.enum([t.value for t in LedgerType])),
        ("ledger_id", r.long),
    ]
    for name, read in steps:
        try:
            got[name] = read()
        except _Truncated:
            break
    if not got.get("topic_name"):
        got.pop("topic_name", None)
    return PartialInfo(**got)


# Properties of retry and dead-letter copies: the one home of these names (the daemon, the nightly replay
# and the operator commands all use them). The first three are the names Pulsar's own retry/DLQ producers use.
REAL_TOPIC = "REAL_TOPIC"
ORIGIN_MESSAGE_ID = "ORIGIN_MESSAGE_ID"
RECONSUMETIMES = "RECONSUMETIMES"  # attempts so far (a Java int in Pulsar's consumers)
REASON = "reason"  # the outcome (worker.daemon.decider.Outcome value) that sent it to the retry topic or the DLQ
LAST_ERROR = "last_error"
FIRST_SEEN_MS = "first_seen_ms"  # when the first copy was published (epoch milliseconds)
# Only on a bounded dead letter (worker.core.bounded_payload), published when the message could not be
# dead-lettered whole: the original payload's size and SHA-256; "true" when the payload kept is only its
# first KiB; how many properties were cut short or dropped.
PAYLOAD_SIZE = "payload_size"
PAYLOAD_SHA256 = "payload_sha256"
PAYLOAD_TRUNCATED = "payload_truncated"
PROPERTIES_TRUNCATED = "properties_truncated"
# The worker's own properties, in the order a bounded copy keeps them first.
WORKER_PROPERTIES = (
    REASON,
    LAST_ERROR,
    RECONSUMETIMES,
    FIRST_SEEN_MS,
    REAL_TOPIC,
    ORIGIN_MESSAGE_ID,
    PAYLOAD_SIZE,
    PAYLOAD_SHA256,
    PAYLOAD_TRUNCATED,
    PROPERTIES_TRUNCATED,
)
