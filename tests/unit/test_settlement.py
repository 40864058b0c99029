"""``worker.daemon.settlement``: step 6's I/O. Successor properties, and the order send-then-ack: nothing is
acknowledged before its successor is durable. (Which action a message gets: ``test_settle_choice.py``.)"""

from __future__ import annotations

import hashlib
from typing import Any

import pytest

from tests.unit.conftest import MakeEnvelope
from worker.daemon.settlement import DeadLetterRefused, Settler, successor_properties
from worker.formats import message as m
from worker.metrics import Metrics


def test_successor_properties_first_failure(make_envelope: MakeEnvelope) -> None:
    p = successor_properties(make_envelope({"custom": "kept"}), reason="in_use", error="referenced")
    assert p == {
        "custom": "kept",
        m.REAL_TOPIC: "persistent://pulsar/system/__ledger_deletion-partition-1",
        m.ORIGIN_MESSAGE_ID: "(5,6,1,-1)",
        m.FIRST_SEEN_MS: "1000",
        m.RECONSUMETIMES: "1",
        m.REASON: "in_use",
        m.LAST_ERROR: "referenced",
    }


def test_successor_properties_keep_the_origin_of_a_retry_copy(make_envelope: MakeEnvelope) -> None:
    original = {
        m.REAL_TOPIC: "persistent://pulsar/system/__ledger_deletion-partition-0",
        m.ORIGIN_MESSAGE_ID: "(1,2,0,-1)",
        m.FIRST_SEEN_MS: "500",
        m.RECONSUMETIMES: "3",
        m.REASON: "in_use",
        m.LAST_ERROR: "old",
    }
    env = make_envelope(dict(original), publish_ts=2_000)
    p = successor_properties(env, reason="transient", error="bookie down")
    assert p[m.REAL_TOPIC] == original[m.REAL_TOPIC]
    assert p[m.ORIGIN_MESSAGE_ID] == "(1,2,0,-1)"
    assert p[m.FIRST_SEEN_MS] == "500"
    assert p[m.RECONSUMETIMES] == "4"
    assert p[m.REASON] == "transient"
    assert p[m.LAST_ERROR] == "bookie down"
    assert dict(env.properties) == original  # the received message is not modified


def test_successor_properties_without_publish_time_use_receipt(make_envelope: MakeEnvelope) -> None:
    p = successor_properties(make_envelope(publish_ts=0), reason="r", error="e")
    assert p[m.FIRST_SEEN_MS] == "9999"


def test_successor_properties_truncate_the_error(make_envelope: MakeEnvelope) -> None:
    p = successor_properties(make_envelope(), reason="r", error="x" * 5000)
    assert p[m.LAST_ERROR] == "x" * 1000


def test_successor_properties_are_all_strings(make_envelope: MakeEnvelope) -> None:
    p = successor_properties(make_envelope(), reason="r", error="e")
    assert all(isinstance(k, str) and isinstance(v, str) for k, v in p.items())


# ---- nothing is acknowledged before its successor is durable ---------------------------------------------------


class Log:
    def __init__(self) -> None:
        self.events: list[tuple[str, Any, Any]] = []


class FakeConsumer:
    def __init__(self, log: Log) -> None:
        self.log = log

    async def acknowledge(self, msg: Any) -> None:
        self.log.events.append(("ack", msg, None))

    async def acknowledge_many(self, msgs: list[Any]) -> list[BaseException | None]:
        for msg in msgs:
            await self.acknowledge(msg)
        return [None] * len(msgs)


class FakeProducer:
    def __init__(self, name: str, log: Log, fail: bool = False) -> None:
        self.name = name
        self.log = log
        self.fail = fail

    async def send(self, content: Any, properties: dict[str, str] | None = None, **kw: Any) -> Any:
        if self.fail:
            raise RuntimeError("send failed")
        self.log.events.append((self.name, content, (properties, kw)))


class SizeLimitedProducer(FakeProducer):
    """Refuses a message whose payload and properties exceed ``limit`` bytes, as the client does against the
    broker's maxMessageSize (pulsar.MessageTooBig)."""

    def __init__(self, name: str, log: Log, limit: int) -> None:
        super().__init__(name, log)
        self.limit = limit
        self.refused = 0

    async def send(self, content: Any, properties: dict[str, str] | None = None, **kw: Any) -> Any:
        size = len(content) + sum(len(k.encode()) + len(v.encode()) for k, v in (properties or {}).items())
        if size > self.limit:
            self.refused += 1
            raise RuntimeError(f"Pulsar error: MessageTooBig ({size} > {self.limit})")
        return await super().send(content, properties, **kw)


def settler(
    log: Log, *, fail: bool = False, dlq: FakeProducer | None = None, max_payload_bytes: int = 65_536
) -> Settler:
    return Settler(
        FakeConsumer(log),
        FakeProducer("retry", log, fail),
        dlq or FakeProducer("dlq", log, fail),
        Metrics(),
        max_payload_bytes=max_payload_bytes,
    )


async def test_retry_sends_then_acks(make_envelope: MakeEnvelope) -> None:
    log = Log()
    env = make_envelope({m.RECONSUMETIMES: "2"})
    await settler(log).retry(env, reason="in_use", error="e", delay_s=30)
    assert [e[0] for e in log.events] == ["retry", "ack"]
    _, content, (props, kw) = log.events[0]
    assert content == b"payload"
    assert props[m.RECONSUMETIMES] == "3"
    assert kw["deliver_after"].total_seconds() == 30
    assert log.events[1][1] is env.message


async def test_nothing_is_acked_when_the_successor_send_fails(make_envelope: MakeEnvelope) -> None:
    log = Log()
    s = settler(log, fail=True)
    with pytest.raises(RuntimeError):
        await s.retry(make_envelope(), reason="r", error="e", delay_s=1)
    with pytest.raises(DeadLetterRefused):
        await s.dead_letter(make_envelope(), reason="invalid", error="e")
    assert log.events == []


async def test_a_dead_letter_too_big_to_publish_whole_is_published_bounded(make_envelope: MakeEnvelope) -> None:
    # The payload is fine, but a 200 kB property makes the DLQ copy too big for the broker.
    log = Log()
    dlq = SizeLimitedProducer("dlq", log, limit=100_000)
    payload = b"p" * 5_000
    env = make_envelope({"huge": "h" * 200_000, "small": "kept"}, data=payload)
    await settler(log, dlq=dlq).dead_letter(env, reason="invalid", error="bad")
    assert dlq.refused == 1
    assert [e[0] for e in log.events] == ["dlq", "ack"]
    _, content, (props, _) = log.events[0]
    assert content == payload  # within max_payload_bytes: kept whole, the ledger can still be decided
    assert props[m.PAYLOAD_TRUNCATED] == "false"
    assert props[m.PAYLOAD_SIZE] == "5000"
    assert props[m.PAYLOAD_SHA256] == hashlib.sha256(payload).hexdigest()
    assert props[m.PROPERTIES_TRUNCATED] == "1"
    assert props["small"] == "kept" and len(props["huge"]) == 1024
    assert props[m.REASON] == "invalid" and props[m.LAST_ERROR] == "bad"


async def test_a_payload_over_the_limit_is_dead_lettered_as_size_digest_and_head(make_envelope: MakeEnvelope) -> None:
    log = Log()
    dlq = SizeLimitedProducer("dlq", log, limit=5_242_880)
    payload = bytes(range(256)) * 40  # 10 240 bytes
    env = make_envelope(data=payload, max_payload_bytes=2048)
    await settler(log, dlq=dlq, max_payload_bytes=2048).dead_letter(env, reason="invalid", error="too big")
    assert dlq.refused == 0  # never tried whole
    _, content, (props, _) = log.events[0]
    assert content == payload[:1024]
    assert props[m.PAYLOAD_TRUNCATED] == "true"
    assert props[m.PAYLOAD_SIZE] == "10240"
    assert props[m.PAYLOAD_SHA256] == hashlib.sha256(payload).hexdigest()
    assert [e[0] for e in log.events] == ["dlq", "ack"]


async def test_a_dlq_that_refuses_even_the_bounded_copy_leaves_the_message_unacknowledged(
    make_envelope: MakeEnvelope,
) -> None:
    log = Log()
    s = settler(log, dlq=SizeLimitedProducer("dlq", log, limit=10))
    with pytest.raises(DeadLetterRefused):
        await s.dead_letter(make_envelope(data=b"x" * 100), reason="invalid", error="e")
    assert log.events == []


async def test_ack_many_acknowledges_each_and_counts(make_envelope: MakeEnvelope) -> None:
    log = Log()
    envs = [make_envelope(message_id=f"({i},0,-1,-1)") for i in range(3)]
    assert await settler(log).ack_many(envs) == [None, None, None]
    assert [e[1] for e in log.events] == [env.message for env in envs]
