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


class Gated:
    """A pipeline whose messages with a gate settle only once it opens; the others at once."""

    def __init__(self) -> None:
        self.gates: dict[str, asyncio.Event] = {}
        self.started: list[str] = []

    async def handle(self, msg: str) -> None:
        self.started.append(msg)
        gate = self.gates.get(msg)
        if gate is not None:
            await gate.wait()


async def _spin() -> None:
    for _ in range(50):
        await asyncio.sleep(0)


async def test_the_next_batch_is_received_ahead_and_dispatched_as_room_frees() -> None:
    s = Settings.model_validate({"worker": {"max_inflight": 4}})
    d = Daemon(s, Metrics())
    source, pipeline = BatchSource(size=2), Gated()
    source.daemon = d
    first, slow, rest = asyncio.Event(), asyncio.Event(), asyncio.Event()
    pipeline.gates = {f"m{i}": first for i in range(4)} | {"m4": slow}
    loop_task = asyncio.create_task(d._receive_loop(source, pipeline))  # type: ignore[arg-type]
    await _spin()
    # Two batches fill max_inflight=4; a third was received meanwhile (its receive off the messages' path)
    # and waits, undispatched, for room.
    assert pipeline.started == ["m0", "m1", "m2", "m3"]
    assert source.received_with_inflight == [0, 2, 4]

    # One slow message (m4) holds back no other: the rest flow past it, never more than 4 at once.
    pipeline.gates |= {f"m{i}": rest for i in range(12, 1000)}
    first.set()
    await _spin()
    assert "m4" in pipeline.started and {f"m{i}" for i in range(5, 12)} <= set(pipeline.started)
    assert len(d._tasks) == 4 and pipeline.started[-1] == "m14"

    # Stopping while a received batch waits for room: it is not dispatched (nor acknowledged, so the broker
    # hands it to another consumer once this one closes).
    started = list(pipeline.started)
    d.request_stop()
    await asyncio.wait_for(loop_task, 5)
    assert pipeline.started == started and source.next > len(started)
    slow.set()
    rest.set()
    await asyncio.gather(*d._tasks)
