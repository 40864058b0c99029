"""A received message, read once.

Everything the pipeline, the settle step, the logs and the metrics need of a message is read from it here,
when it is received, and kept in one frozen value: its bytes, where it came from, its properties (untrusted:
every number read from them is clamped, ``worker.core.message_properties``), this delivery's attempt, when
its first copy was published, whether the brokers marked it (``worker.core.broker_marks``), and its decoded
record or why there is none. Nothing reads the message again, so no two steps can disagree about it.
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from worker.core.broker_marks import marked_by_broker
from worker.core.dispatch import Dispatch
from worker.core.message_properties import MAX_ATTEMPT_COUNT, attempts_so_far, first_seen_ms
from worker.formats.message import InvalidMessage, PendingDeleteLedgerInfo, decode


@dataclass(frozen=True, slots=True)
class Envelope:
    message: Any  # the client's message: what is acknowledged (or negatively acknowledged)
    data: bytes
    topic: str  # the topic (partition) it was received on
    message_id: str
    properties: Mapping[str, str]
    # This delivery's attempt, from 1: the retry chain's count plus the broker's redeliveries of this very
    # message (a worker that died or could not settle it). Every failure counts, so nothing loops forever.
    attempt: int
    publish_ms: int
    first_seen_ms: int  # when the first copy of this deletion was published (clamped to receipt)
    broker_mark: bool  # signed by the brokers' extension
    record: PendingDeleteLedgerInfo | None
    invalid: str | None = None  # why there is no record (undecodable, oversize); None when there is one
    # When the daemon dispatched it, and what its batch already read (``worker.core.dispatch``); None before.
    dispatch: Dispatch | None = None

    @classmethod
    def read(cls, msg: Any, *, max_payload_bytes: int, mark_key: bytes | None, now_ms: int) -> Envelope:
        """Read ``msg`` once. Never raises: whatever cannot be read is absent (no properties, no publish
        time) or makes the message invalid (no record), and is settled as such."""
        data = bytes(msg.data())
        properties = _properties(msg)
        publish_ms = _int_of(msg, "publish_timestamp")
        redelivered = min(MAX_ATTEMPT_COUNT, max(0, _int_of(msg, "redelivery_count")))
        record: PendingDeleteLedgerInfo | None = None
        invalid: str | None = None
        if len(data) > max_payload_bytes:
            # Not even decoded: no genuine pending deletion comes near the limit, and its retry or DLQ copy
            # (the payload plus properties) could not be published under the broker's maxMessageSize.
            invalid = f"payload of {len(data)} bytes is over worker.max_payload_bytes ({max_payload_bytes})"
        else:
            try:
                record = decode(data)
            except InvalidMessage as e:
                invalid = str(e)
        return cls(
            message=msg,
            data=data,
            topic=str(msg.topic_name()),
            message_id=str(msg.message_id()),
            properties=MappingProxyType(properties),
            attempt=min(MAX_ATTEMPT_COUNT, attempts_so_far(properties) + redelivered + 1),
            publish_ms=publish_ms,
            first_seen_ms=first_seen_ms(properties, publish_ms=publish_ms, now_ms=now_ms),
            broker_mark=marked_by_broker(data, properties, mark_key),
            record=record,
            invalid=invalid,
        )


def _properties(msg: Any) -> dict[str, str]:
    """The message's properties; none when they cannot be read (bytes that are not UTF-8 raise)."""
    with contextlib.suppress(Exception):
        return {str(k): str(v) for k, v in dict(msg.properties()).items()}
    return {}


def _int_of(msg: Any, method: str) -> int:
    with contextlib.suppress(AttributeError, TypeError, ValueError, OverflowError):
        return int(getattr(msg, method)() or 0)
    return 0
