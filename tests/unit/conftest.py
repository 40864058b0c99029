"""The unit tests' fakes, one of each: a received message as the Pulsar client hands it over, and the
envelope the daemon reads it into (``worker.daemon.envelope``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from worker.daemon.envelope import Envelope

TOPIC = "persistent://pulsar/system/__ledger_deletion-partition-1"


class FakeMessage:
    """What the daemon reads of a ``pulsar.Message``. ``properties=None``: properties that cannot be read
    (a C++ producer's bytes that are not UTF-8 make the Python client raise)."""

    def __init__(
        self,
        properties: dict[str, str] | None = None,
        *,
        data: bytes = b"payload",
        publish_ts: int = 1_000,
        redeliveries: int = 0,
        topic: str = TOPIC,
        message_id: str = "(5,6,1,-1)",
    ) -> None:
        self._props = properties
        self._data = data
        self._ts = publish_ts
        self._redeliveries = redeliveries
        self._topic = topic
        self._id = message_id

    def properties(self) -> dict[str, str]:
        if self._props is None:
            raise UnicodeDecodeError("utf-8", b"\xff", 0, 1, "invalid start byte")
        return self._props

    def data(self) -> bytes:
        return self._data

    def topic_name(self) -> str:
        return self._topic

    def message_id(self) -> str:
        return self._id

    def publish_timestamp(self) -> int:
        return self._ts

    def redelivery_count(self) -> int:
        return self._redeliveries


MakeMessage = Callable[..., FakeMessage]
MakeEnvelope = Callable[..., Envelope]


@pytest.fixture
def make_message() -> MakeMessage:
    return FakeMessage


@pytest.fixture
def make_envelope() -> MakeEnvelope:
    """``make_envelope(properties, *, key=None, now_ms=9_999, max_payload_bytes=65_536, **message)``: a
    :class:`FakeMessage` read as the daemon reads it."""

    def make(
        properties: dict[str, str] | None = None,
        *,
        key: bytes | None = None,
        now_ms: int = 9_999,
        max_payload_bytes: int = 65_536,
        **message: Any,
    ) -> Envelope:
        msg = FakeMessage({} if properties is None else properties, **message)
        return Envelope.read(msg, max_payload_bytes=max_payload_bytes, mark_key=key, now_ms=now_ms)

    return make
