"""Step 6: attempt counting, successor properties, and the order send-then-ack."""

from __future__ import annotations

import hashlib
from typing import Any

import pytest

from worker.core.message_properties import MAX_ATTEMPT_COUNT, attempts_so_far, first_seen_ms
from worker.daemon.settlement import DeadLetterRefused, Settler, attempts_of, successor_properties
from worker.formats import message as m
from worker.metrics import Metrics


@pytest.mark.parametrize(
    ("props", "expected"),
    [
        ({}, 0),
        ({m.RECONSUMETIMES: "0"}, 0),
        ({m.RECONSUMETIMES: "3"}, 3),
        ({m.RECONSUMETIMES: " 4 "}, 4),
        ({m.RECONSUMETIMES: "-2"}, 0),
        ({m.RECONSUMETIMES: ""}, 0),
        ({m.RECONSUMETIMES: "abc"}, 0),
        ({m.RECONSUMETIMES: "1.5"}, 0),
        ({m.RECONSUMETIMES: "0x10"}, 0),
        ({m.RECONSUMETIMES: "100000"}, 100_000),
        # A count beyond a Java int (beyond int()'s digit limit, too) is a huge count, not garbage: clamped,
        # so the message is exhausted and dead-lettered instead of starting its retries over.
        ({m.RECONSUMETIMES: "9" * 5000}, MAX_ATTEMPT_COUNT),
        ({m.RECONSUMETIMES: "99999999999"}, MAX_ATTEMPT_COUNT),
        ({m.RECONSUMETIMES: "0" * 10_000 + "7"}, 7),
        ({m.RECONSUMETIMES: "-" + "9" * 5000}, 0),
        ({m.RECONSUMETIMES: "\u0663"}, 0),  # a non-ASCII digit is not a count
        ({m.RECONSUMETIMES: "\x00"}, 0),
        ({"reconsumetimes": "5"}, 0),  # the property name is exact
        ({"other": "7"}, 0),
    ],
)
def test_attempts_so_far(props: dict[str, str], expected: int) -> None:
    assert attempts_so_far(props) == expected


class FakeMessage:
    def __init__(self, props: dict[str, str], *, publish_ts: int = 1_000, data: bytes = b"payload") -> None:
        self._props = props
        self._ts = publish_ts
        self._data = data

    def properties(self) -> dict[str, str]:
        return self._props

    def topic_name(self) -> str:
        return "persistent://pulsar/system/__ledger_deletion-partition-1"

    def message_id(self) -> str:
        return "(5,6,1,-1)"

    def publish_timestamp(self) -> int:
        return self._ts

    def data(self) -> bytes:
        return self._data


def test_successor_properties_first_failure() -> None:
    msg = FakeMessage({"custom": "kept"})
    p = successor_properties(msg, reason="in_use", error="referenced", attempts=1, now_ms=9_999)  # type: ignore[arg-type]
    assert p == {
        "custom": "kept",
        m.REAL_TOPIC: "persistent://pulsar/system/__ledger_deletion-partition-1",
        m.ORIGIN_MESSAGE_ID: "(5,6,1,-1)",
        m.FIRST_SEEN_MS: "1000",
        m.RECONSUMETIMES: "1",
        m.REASON: "in_use",
        m.LAST_ERROR: "referenced",
    }


def test_successor_properties_keep_the_origin_of_a_retry_copy() -> None:
    original = {
        m.REAL_TOPIC: "persistent://pulsar/system/__ledger_deletion-partition-0",
        m.ORIGIN_MESSAGE_ID: "(1,2,0,-1)",
        m.FIRST_SEEN_MS: "500",
        m.RECONSUMETIMES: "3",
        m.REASON: "in_use",
        m.LAST_ERROR: "old",
    }
    msg = FakeMessage(dict(original), publish_ts=2_000)
    p = successor_properties(msg, reason="transient", error="bookie down", attempts=4, now_ms=9_999)  # type: ignore[arg-type]
    assert p[m.REAL_TOPIC] == original[m.REAL_TOPIC]
    assert p[m.ORIGIN_MESSAGE_ID] == "(1,2,0,-1)"
    assert p[m.FIRST_SEEN_MS] == "500"
    assert p[m.RECONSUMETIMES] == "4"
    assert p[m.REASON] == "transient"
    assert p[m.LAST_ERROR] == "bookie down"
    assert msg.properties() == original  # the received message is not modified


def test_successor_properties_without_publish_time_use_now() -> None:
    msg = FakeMessage({}, publish_ts=0)
    p = successor_properties(msg, reason="r", error="e", attempts=1, now_ms=9_999)  # type: ignore[arg-type]
    assert p[m.FIRST_SEEN_MS] == "9999"


def test_successor_properties_truncate_the_error() -> None:
    p = successor_properties(FakeMessage({}), reason="r", error="x" * 5000, attempts=1, now_ms=1)  # type: ignore[arg-type]
    assert p[m.LAST_ERROR] == "x" * 1000


def test_successor_properties_are_all_strings() -> None:
    p = successor_properties(FakeMessage({}), reason="r", error="e", attempts=2, now_ms=1)  # type: ignore[arg-type]
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


class FakeProducer:
    def __init__(self, name: str, log: Log, fail: bool = False) -> None:
        self.name = name
        self.log = log
        self.fail = fail

    async def send(self, content: Any, properties: dict[str, str] | None = None, **kw: Any) -> Any:
        if self.fail:
            raise RuntimeError("send failed")
        self.log.events.append((self.name, content, (properties, kw)))


def settler(log: Log, *, max_attempts: int = 10, fail: bool = False) -> Settler:
    return Settler(
        FakeConsumer(log),
        FakeProducer("retry", log, fail),
        FakeProducer("dlq", log, fail),
        Metrics(),
        max_attempts=max_attempts,
    )


async def test_retry_sends_then_acks() -> None:
    log = Log()
    msg = FakeMessage({m.RECONSUMETIMES: "2"})
    assert await settler(log).retry(msg, reason="in_use", error="e", delay_after=lambda _: 30) == "retry"  # type: ignore[arg-type]
    assert [e[0] for e in log.events] == ["retry", "ack"]
    _, content, (props, kw) = log.events[0]
    assert content == b"payload"
    assert props[m.RECONSUMETIMES] == "3"
    assert kw["deliver_after"].total_seconds() == 30


async def test_retry_dead_letters_when_attempts_are_exhausted() -> None:
    log = Log()
    msg = FakeMessage({m.RECONSUMETIMES: "9"})
    where = await settler(log, max_attempts=10).retry(msg, reason="transient", error="e", delay_after=lambda _: 1)  # type: ignore[arg-type]
    assert where == "dlq"
    assert [e[0] for e in log.events] == ["dlq", "ack"]
    props = log.events[0][2][0]
    assert props[m.REASON] == "transient"
    assert "attempts exhausted (10)" in props[m.LAST_ERROR]


async def test_nothing_is_acked_when_the_successor_send_fails() -> None:
    log = Log()
    s = settler(log, fail=True)
    with pytest.raises(RuntimeError):
        await s.retry(FakeMessage({}), reason="r", error="e", delay_after=lambda _: 1)  # type: ignore[arg-type]
    with pytest.raises(DeadLetterRefused):
        await s.dead_letter(FakeMessage({}), reason="invalid", error="e")  # type: ignore[arg-type]
    assert log.events == []


async def test_garbage_attempt_count_still_progresses() -> None:
    log = Log()
    await settler(log).retry(FakeMessage({m.RECONSUMETIMES: "junk"}), reason="r", error="e", delay_after=lambda _: 1)  # type: ignore[arg-type]
    assert log.events[0][2][0][m.RECONSUMETIMES] == "1"


# ---- poison messages: every number read from a property is clamped, every message reaches an end ---------------


class RedeliveredMessage(FakeMessage):
    def __init__(self, props: dict[str, str], redeliveries: int, **kw: Any) -> None:
        super().__init__(props, **kw)
        self._redeliveries = redeliveries

    def redelivery_count(self) -> int:
        return self._redeliveries


def test_attempts_of_adds_redeliveries_and_stays_clamped() -> None:
    assert attempts_of(RedeliveredMessage({m.RECONSUMETIMES: "3"}, 2)) == 5  # type: ignore[arg-type]
    assert attempts_of(RedeliveredMessage({m.RECONSUMETIMES: "9" * 50}, 2**31 - 1)) == MAX_ATTEMPT_COUNT  # type: ignore[arg-type]


class UnreadableProperties(FakeMessage):
    def properties(self) -> dict[str, str]:
        raise UnicodeDecodeError("utf-8", b"\xff", 0, 1, "invalid start byte")


def test_unreadable_properties_count_as_none() -> None:
    # A C++ producer can send property bytes that are not UTF-8; the Python client raises reading them.
    assert attempts_of(UnreadableProperties({})) == 0  # type: ignore[arg-type]


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
def test_first_seen_is_clamped(value: str | None, expected: int) -> None:
    props = {} if value is None else {m.FIRST_SEEN_MS: value}
    assert first_seen_ms(props, publish_ms=1_000, now_ms=9_999) == expected
    p = successor_properties(FakeMessage(props), reason="r", error="e", attempts=1, now_ms=9_999)  # type: ignore[arg-type]
    assert p[m.FIRST_SEEN_MS] == str(expected)


def test_first_seen_without_publish_time_is_now() -> None:
    assert first_seen_ms({m.FIRST_SEEN_MS: "junk"}, publish_ms=0, now_ms=9_999) == 9_999


async def test_exhaustion_is_decided_before_the_delay_is_asked_for() -> None:
    log = Log()

    def no_delay(attempts: int) -> float:
        raise AssertionError(f"delay asked for an exhausted message (attempt {attempts})")

    msg = FakeMessage({m.RECONSUMETIMES: "100000"})
    assert await settler(log).retry(msg, reason="transient", error="e", delay_after=no_delay) == "dlq"  # type: ignore[arg-type]
    assert [e[0] for e in log.events] == ["dlq", "ack"]
    assert log.events[0][2][0][m.RECONSUMETIMES] == "100001"


async def test_the_delay_is_asked_for_with_the_attempt_number() -> None:
    log = Log()
    asked: list[int] = []
    await settler(log).retry(
        FakeMessage({m.RECONSUMETIMES: "4"}),  # type: ignore[arg-type]
        reason="transient",
        error="e",
        delay_after=lambda a: asked.append(a) or 2.5,
    )
    assert asked == [5]
    assert log.events[0][2][1]["deliver_after"].total_seconds() == 2.5


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


def bounded_settler(log: Log, dlq: FakeProducer, *, max_payload_bytes: int = 65_536) -> Settler:
    return Settler(
        FakeConsumer(log),
        FakeProducer("retry", log),
        dlq,
        Metrics(),
        max_attempts=10,
        max_payload_bytes=max_payload_bytes,
    )


async def test_a_dead_letter_too_big_to_publish_whole_is_published_bounded() -> None:
    # The payload is fine, but a 200 kB property makes the DLQ copy too big for the broker.
    log = Log()
    dlq = SizeLimitedProducer("dlq", log, limit=100_000)
    payload = b"p" * 5_000
    msg = FakeMessage({"huge": "h" * 200_000, "small": "kept"}, data=payload)
    await bounded_settler(log, dlq).dead_letter(msg, reason="invalid", error="bad")  # type: ignore[arg-type]
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


async def test_a_payload_over_the_limit_is_dead_lettered_as_size_digest_and_head() -> None:
    log = Log()
    dlq = SizeLimitedProducer("dlq", log, limit=5_242_880)
    payload = bytes(range(256)) * 40  # 10 240 bytes
    msg = FakeMessage({}, data=payload)
    await bounded_settler(log, dlq, max_payload_bytes=2048).dead_letter(msg, reason="invalid", error="too big")  # type: ignore[arg-type]
    assert dlq.refused == 0  # never tried whole
    _, content, (props, _) = log.events[0]
    assert content == payload[:1024]
    assert props[m.PAYLOAD_TRUNCATED] == "true"
    assert props[m.PAYLOAD_SIZE] == "10240"
    assert props[m.PAYLOAD_SHA256] == hashlib.sha256(payload).hexdigest()
    assert [e[0] for e in log.events] == ["dlq", "ack"]


async def test_a_dlq_that_refuses_even_the_bounded_copy_leaves_the_message_unacknowledged() -> None:
    log = Log()
    s = bounded_settler(log, SizeLimitedProducer("dlq", log, limit=10))
    with pytest.raises(DeadLetterRefused):
        await s.dead_letter(FakeMessage({}, data=b"x" * 100), reason="invalid", error="e")  # type: ignore[arg-type]
    assert log.events == []


@pytest.mark.parametrize(
    ("props", "in_use", "where", "events"),
    [
        # The broker extension's message whose ledger is still listed: acknowledged, no dead letter.
        ({m.RECONSUMETIMES: "9", "source": "broker-extension"}, True, "released", ["ack"]),
        # Anything else at exhaustion is a dead letter: another outcome, or a message from anyone else.
        ({m.RECONSUMETIMES: "9", "source": "broker-extension"}, False, "dlq", ["dlq", "ack"]),
        ({m.RECONSUMETIMES: "9", "source": "scanner"}, True, "dlq", ["dlq", "ack"]),
        ({m.RECONSUMETIMES: "9"}, True, "dlq", ["dlq", "ack"]),
        # Before exhaustion a broker message is retried like any other.
        ({m.RECONSUMETIMES: "2", "source": "broker-extension"}, True, "retry", ["retry", "ack"]),
    ],
)
async def test_a_broker_queued_ledger_still_listed_is_released_not_dead_lettered(
    props: dict[str, str], in_use: bool, where: str, events: list[str]
) -> None:
    from worker.core.broker_marks import released_when_exhausted

    log = Log()
    got = await settler(log).retry(
        FakeMessage(props),  # type: ignore[arg-type]
        reason="in_use",
        error="referenced by its topic",
        delay_after=lambda a: 1.0,
        release_when_exhausted=released_when_exhausted(props, in_use=in_use),
    )
    assert got == where
    assert [e[0] for e in log.events] == events
