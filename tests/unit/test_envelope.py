"""``worker.daemon.envelope``: a received message read once; every number from its properties clamped,
nothing that cannot be read a reason to fail."""

from __future__ import annotations

import pytest

from tests.unit.conftest import MakeEnvelope, MakeMessage
from worker.core.broker_marks import MARK_PROPERTY, signature
from worker.core.message_properties import MAX_ATTEMPT_COUNT
from worker.daemon.envelope import Envelope
from worker.formats import message as m
from worker.formats.message import LedgerComponent, LedgerType, PendingDeleteLedgerInfo, encode

INFO = PendingDeleteLedgerInfo("persistent://t/ns/topic", LedgerComponent.MANAGED_LEDGER, LedgerType.LEDGER, 7)


def test_a_message_is_read_once_into_every_field(make_envelope: MakeEnvelope) -> None:
    raw = encode(INFO)
    env = make_envelope({m.RECONSUMETIMES: "3", m.FIRST_SEEN_MS: "500"}, data=raw, redeliveries=2)
    assert env.data == raw and env.record == INFO and env.invalid is None
    assert env.topic.endswith("-partition-1") and env.message_id == "(5,6,1,-1)"
    assert env.attempt == 6  # three retries, two redeliveries of this copy, and this delivery
    assert env.first_seen_ms == 500 and env.publish_ms == 1_000
    assert not env.broker_mark
    with pytest.raises(TypeError):
        env.properties["x"] = "y"  # type: ignore[index]


def test_the_attempt_count_stays_clamped(make_envelope: MakeEnvelope) -> None:
    env = make_envelope({m.RECONSUMETIMES: "9" * 50}, redeliveries=2**31 - 1)
    assert env.attempt == MAX_ATTEMPT_COUNT
    assert make_envelope({m.RECONSUMETIMES: "junk"}).attempt == 1


def test_unreadable_properties_count_as_none(make_message: MakeMessage) -> None:
    env = Envelope.read(make_message(None), max_payload_bytes=65_536, mark_key=None, now_ms=9_999)
    assert env.properties == {} and env.attempt == 1 and env.first_seen_ms == 1_000


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (None, 1_000),  # absent: the publish time
        ("500", 500),
        ("9" * 400, 9_999),  # in the future (and beyond a float): now
        ("9" * 5000, 9_999),
        ("-5", 1_000),  # not a time: the publish time
        ("0", 1_000),
        ("soon", 1_000),
    ],
)
def test_first_seen_is_clamped(make_envelope: MakeEnvelope, value: str | None, expected: int) -> None:
    assert make_envelope({} if value is None else {m.FIRST_SEEN_MS: value}).first_seen_ms == expected


def test_first_seen_without_publish_time_is_now(make_envelope: MakeEnvelope) -> None:
    assert make_envelope({m.FIRST_SEEN_MS: "junk"}, publish_ts=0).first_seen_ms == 9_999


def test_an_oversize_payload_is_not_even_decoded(make_envelope: MakeEnvelope) -> None:
    env = make_envelope(data=encode(INFO) + b"\x00" * 3000, max_payload_bytes=2048)
    assert env.record is None and env.invalid is not None and "max_payload_bytes (2048)" in env.invalid


def test_undecodable_bytes_are_invalid_with_the_reason(make_envelope: MakeEnvelope) -> None:
    env = make_envelope(data=b"\xff\xfe not avro")
    assert env.record is None and env.invalid


@pytest.mark.parametrize(
    ("mark", "key", "marked"),
    [
        (signature(b"k", b"payload"), b"k", True),
        (signature(b"k", b"payload"), None, False),  # no key configured: nothing is the broker's
        (signature(b"other", b"payload"), b"k", False),  # signed under another key
        (signature(b"k", b"another payload"), b"k", False),  # a payload changed since it was signed
        ("hmac-sha256:", b"k", False),
        (None, b"k", False),
    ],
)
def test_the_brokers_mark_is_verified_against_the_payload(
    make_envelope: MakeEnvelope, mark: str | None, key: bytes | None, marked: bool
) -> None:
    props = {"source": "broker-extension"} | ({MARK_PROPERTY: mark} if mark is not None else {})
    assert make_envelope(props, key=key, data=b"payload").broker_mark is marked
