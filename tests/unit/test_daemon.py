"""The daemon's last line of defence: a message whose settle fails is handed back, counted, never parked."""

from __future__ import annotations

import warnings
from typing import Any

from worker.daemon.daemon import Daemon
from worker.metrics import Metrics
from worker.settings import Settings


class NackRecorder:
    def __init__(self) -> None:
        self.nacked: list[Any] = []

    async def negative_acknowledge(self, msg: Any) -> None:
        self.nacked.append(msg)


class SettleFails:
    async def handle(self, msg: Any) -> None:
        raise TimeoutError("retry producer: send timed out")


async def test_a_message_that_cannot_be_settled_is_negative_acknowledged_and_counted() -> None:
    # Defect: the daemon called the asyncio consumer's negative_acknowledge without awaiting it, so the
    # message was never redelivered while the worker lived and no metric moved.
    metrics = Metrics()
    d = Daemon(Settings(), metrics)
    consumer = NackRecorder()
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # "coroutine ... was never awaited" would be a RuntimeWarning
        await d._process(consumer, SettleFails(), "msg-1")  # type: ignore[arg-type]
    assert consumer.nacked == ["msg-1"]
    assert metrics.failed.labels(stage="settle")._value.get() == 1
    assert metrics.inflight._value.get() == 0
