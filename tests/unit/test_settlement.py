"""Step 6: attempt counting, successor properties, and the order send-then-ack."""

from __future__ import annotations

from typing import Any

import pytest

from worker import message as m
from worker.metrics import Metrics
from worker.settlement import Settler, attempts_so_far, successor_properties


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
        ({m.RECONSUMETIMES: "9" * 5000}, 0),  # beyond int()'s digit limit: garbage, not a crash
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
    assert await settler(log).retry(msg, reason="in_use", error="e", delay_s=30) == "retry"  # type: ignore[arg-type]
    assert [e[0] for e in log.events] == ["retry", "ack"]
    _, content, (props, kw) = log.events[0]
    assert content == b"payload"
    assert props[m.RECONSUMETIMES] == "3"
    assert kw["deliver_after"].total_seconds() == 30


async def test_retry_dead_letters_when_attempts_are_exhausted() -> None:
    log = Log()
    msg = FakeMessage({m.RECONSUMETIMES: "9"})
    assert await settler(log, max_attempts=10).retry(msg, reason="transient", error="e", delay_s=1) == "dlq"  # type: ignore[arg-type]
    assert [e[0] for e in log.events] == ["dlq", "ack"]
    props = log.events[0][2][0]
    assert props[m.REASON] == "transient"
    assert "attempts exhausted (10)" in props[m.LAST_ERROR]


async def test_nothing_is_acked_when_the_successor_send_fails() -> None:
    log = Log()
    s = settler(log, fail=True)
    with pytest.raises(RuntimeError):
        await s.retry(FakeMessage({}), reason="r", error="e", delay_s=1)  # type: ignore[arg-type]
    with pytest.raises(RuntimeError):
        await s.dead_letter(FakeMessage({}), reason="invalid", error="e")  # type: ignore[arg-type]
    assert log.events == []


async def test_garbage_attempt_count_still_progresses() -> None:
    log = Log()
    await settler(log).retry(FakeMessage({m.RECONSUMETIMES: "junk"}), reason="r", error="e", delay_s=1)  # type: ignore[arg-type]
    assert log.events[0][2][0][m.RECONSUMETIMES] == "1"
