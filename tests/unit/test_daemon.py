"""The daemon's last line of defence: a message whose settle fails is handed back, counted, never parked."""

from __future__ import annotations

import asyncio
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


class BatchSource:
    """Hands out numbered batches; each ``receive_batch`` is recorded with how many messages were then in
    flight."""

    def __init__(self, size: int) -> None:
        self.size = size
        self.next = 0
        self.received_with_inflight: list[int] = []
        self.daemon: Daemon | None = None

    async def receive_batch(self) -> list[str]:
        assert self.daemon is not None
        self.received_with_inflight.append(len(self.daemon._tasks))
        await asyncio.sleep(0)
        batch = [f"m{self.next + i}" for i in range(self.size)]
        self.next += self.size
        return batch


class Blocked:
    """A pipeline whose messages settle only when released."""

    def __init__(self) -> None:
        self.started: list[str] = []
        self.release = asyncio.Event()

    async def handle(self, msg: str) -> None:
        self.started.append(msg)
        await self.release.wait()


async def test_the_next_batch_is_received_ahead_but_dispatched_only_within_max_inflight() -> None:
    s = Settings.model_validate({"worker": {"max_inflight": 4}})
    d = Daemon(s, Metrics())
    source, pipeline = BatchSource(size=2), Blocked()
    source.daemon = d
    loop_task = asyncio.create_task(d._receive_loop(source, pipeline))  # type: ignore[arg-type]
    for _ in range(20):
        await asyncio.sleep(0)
    # Two batches of 2 fill max_inflight=4; a third was received meanwhile (its receive off the messages'
    # path) and waits, undispatched, for room.
    assert pipeline.started == ["m0", "m1", "m2", "m3"]
    assert source.received_with_inflight == [0, 2, 4]
    pipeline.release.set()
    for _ in range(20):
        await asyncio.sleep(0)
    assert {"m4", "m5"} <= set(pipeline.started)
    # Stopping while a received batch waits for room: it is not dispatched (not acknowledged either, so
    # the broker hands it to another consumer once this one closes).
    pipeline.release.clear()
    for _ in range(20):
        await asyncio.sleep(0)
    started = list(pipeline.started)
    d.request_stop()
    await asyncio.wait_for(loop_task, 5)
    assert pipeline.started == started
    pipeline.release.set()
    await asyncio.gather(*d._tasks)
