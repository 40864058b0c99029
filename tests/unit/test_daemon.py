"""The daemon's last line of defence: a message whose settle fails is handed back, counted, never parked."""

from __future__ import annotations

import asyncio
import contextlib
import warnings
from dataclasses import dataclass
from typing import Any

from worker.daemon.daemon import Daemon
from worker.metrics import Metrics
from worker.settings import Settings


@dataclass(frozen=True)
class Env:
    """What the daemon hands a pipeline for one message (``worker.daemon.envelope.Envelope``'s role)."""

    message: str
    record: Any = None
    dispatch: Any = None  # set by the daemon when it dispatches the message


class Reads:
    """A pipeline's first step: each received message read once."""

    def read(self, msgs: list[str]) -> list[Env]:
        return [Env(m) for m in msgs]


class NackRecorder:
    def __init__(self) -> None:
        self.nacked: list[Any] = []

    async def negative_acknowledge(self, msg: Any) -> None:
        self.nacked.append(msg)


class SettleFails(Reads):
    async def handle(self, env: Env) -> None:
        raise TimeoutError("retry producer: send timed out")


async def test_a_message_that_cannot_be_settled_is_negative_acknowledged_and_counted() -> None:
    # Defect: the daemon called the asyncio consumer's negative_acknowledge without awaiting it, so the
    # message was never redelivered while the worker lived and no metric moved.
    metrics = Metrics()
    d = Daemon(Settings(), metrics)
    consumer = NackRecorder()
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # "coroutine ... was never awaited" would be a RuntimeWarning
        await d._process(consumer, SettleFails(), Env("msg-1"))  # type: ignore[arg-type]
    assert consumer.nacked == ["msg-1"]
    assert metrics.failed.labels(stage="settle")._value.get() == 1
    assert metrics.inflight._value.get() == 0


class BatchSource:
    """Hands out numbered batches of ``size`` messages."""

    def __init__(self, size: int) -> None:
        self.size = size
        self.next = 0

    async def receive_batch(self) -> list[str]:
        await asyncio.sleep(0)
        batch = [f"m{self.next + i}" for i in range(self.size)]
        self.next += self.size
        return batch


class Gated(Reads):
    """A pipeline whose messages with a gate settle only once it opens; the others at once. Its sweep
    settles nothing."""

    def __init__(self) -> None:
        self.gates: dict[str, asyncio.Event] = {}
        self.started: list[str] = []

    async def settle_already_gone(self, envs: list[Env]) -> tuple[list[Env], dict[int, Any]]:
        return envs, {}

    async def handle(self, env: Env) -> None:
        self.started.append(env.message)
        gate = self.gates.get(env.message)
        if gate is not None:
            await gate.wait()


async def _spin() -> None:
    for _ in range(50):
        await asyncio.sleep(0)


async def test_the_next_batch_is_received_ahead_and_dispatched_as_room_frees() -> None:
    s = Settings.model_validate({"worker": {"max_inflight": 4}})
    d = Daemon(s, Metrics())
    source, pipeline = BatchSource(size=6), Gated()
    first, slow, rest = asyncio.Event(), asyncio.Event(), asyncio.Event()
    pipeline.gates = {f"m{i}": first for i in range(4)} | {"m4": slow}
    loop_task = asyncio.create_task(d._receive_loop(source, pipeline))  # type: ignore[arg-type]
    await _spin()
    # A batch of six fills max_inflight=4, two of its messages wait for room; the next batch was received
    # meanwhile (its receive off the messages' path) and waits, unswept, for this one to be dispatched.
    assert pipeline.started == ["m0", "m1", "m2", "m3"]
    assert d._busy == 4 and d._in_hand and source.next == 12

    # One slow message (m4) holds back no other: the rest flow past it, never more than 4 at once.
    pipeline.gates |= {f"m{i}": rest for i in range(12, 1000)}
    first.set()
    await _spin()
    assert "m4" in pipeline.started and {f"m{i}" for i in range(5, 12)} <= set(pipeline.started)
    assert d._busy == 4 and pipeline.started[-3:] == ["m12", "m13", "m14"]

    # Stopping while messages wait for room: they are not dispatched (nor acknowledged, so the broker hands
    # them to another consumer once this one closes).
    started = list(pipeline.started)
    d.request_stop()
    await asyncio.wait_for(loop_task, 5)
    slow.set()
    rest.set()
    await asyncio.gather(*d._tasks)
    assert pipeline.started == started and source.next > len(started)
    assert d._busy == 0 and not d._in_hand


class SweepsEven(Reads):
    """A pipeline whose sweep settles the even-numbered messages and leaves the others with a record; the
    ones left wait for a gate."""

    def __init__(self) -> None:
        self.gate = asyncio.Event()
        self.handled: list[tuple[str, Any]] = []
        self.sweeps: list[list[str]] = []

    async def settle_already_gone(self, envs: list[Env]) -> tuple[list[Env], dict[int, Any]]:
        self.sweeps.append([e.message for e in envs])
        return [Env(e.message, f"record of {e.message}") for e in envs if int(e.message[1:]) % 2], {}

    async def handle(self, env: Env) -> None:
        self.handled.append((env.message, env.record))
        await self.gate.wait()


async def test_a_sweep_needs_no_room_and_hands_the_rest_their_records() -> None:
    s = Settings.model_validate({"worker": {"max_inflight": 4}})
    d = Daemon(s, Metrics())
    source, pipeline = BatchSource(size=4), SweepsEven()
    loop_task = asyncio.create_task(d._receive_loop(source, pipeline))  # type: ignore[arg-type]
    await _spin()
    # Each batch is swept whole and its even messages settle there, taking no room: the odd ones of two
    # batches fill it, and a third batch is swept, its odd ones waiting for room.
    assert pipeline.sweeps == [[f"m{i}" for i in range(b, b + 4)] for b in (0, 4, 8)]
    assert pipeline.handled == [(m, f"record of {m}") for m in ("m1", "m3", "m5", "m7")]
    assert d._busy == 4 and d._in_hand
    pipeline.gate.set()
    await _spin()
    assert ("m9", "record of m9") in pipeline.handled and d._busy <= 4
    d.request_stop()
    await asyncio.wait_for(loop_task, 5)
    await asyncio.gather(*d._tasks)
    assert d._busy == 0 and not d._in_hand


class SweepBlocks(Reads):
    async def settle_already_gone(self, envs: list[Env]) -> tuple[list[Env], dict[int, Any]]:
        await asyncio.Event().wait()
        raise AssertionError("unreachable")

    async def handle(self, env: Env) -> None:
        raise AssertionError("a cancelled sweep hands nothing on")


async def test_a_batch_cancelled_in_its_sweep_lets_the_next_one_in() -> None:
    # The drain deadline cancels a batch still being swept: nothing was acknowledged, and it must not stay
    # "in hand" for ever (the loop would never dispatch again) nor leave messages counted in flight.
    s = Settings.model_validate({"worker": {"max_inflight": 4}})
    metrics = Metrics()
    d = Daemon(s, metrics)
    d._in_hand = True  # as the receive loop marks it when it starts the batch
    task = asyncio.create_task(d._process_batch(None, SweepBlocks(), ["m0", "m1", "m2"]))  # type: ignore[arg-type]
    await _spin()
    assert metrics.inflight._value.get() == 3
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task
    assert not d._in_hand and d._busy == 0 and metrics.inflight._value.get() == 0


class SweepRaises(Gated):
    async def settle_already_gone(self, envs: list[Env]) -> tuple[list[Env], dict[int, Any]]:
        raise KeyError("a defect in the sweep")


async def test_a_sweep_that_raises_hands_its_whole_batch_to_the_full_path() -> None:
    # Nothing of the batch may stay parked, unacknowledged, until the consumer closes.
    metrics = Metrics()
    d = Daemon(Settings.model_validate({"worker": {"max_inflight": 4}}), metrics)
    pipeline = SweepRaises()
    d._in_hand = True
    await d._process_batch(NackRecorder(), pipeline, ["m0", "m1", "m2"])  # type: ignore[arg-type]
    assert pipeline.started == ["m0", "m1", "m2"]
    assert metrics.failed.labels(stage="sweep")._value.get() == 1
    assert not d._in_hand and d._busy == 0 and metrics.inflight._value.get() == 0


class ScriptedStore:
    """BookKeeper's metadata store as the pace sees it: each interval's call latencies, from a script."""

    def __init__(self, intervals: list[dict[str, list[float]]]) -> None:
        self.intervals = intervals
        self.done = asyncio.Event()

    async def probe(self) -> None:
        return None

    def drain_latency(self) -> dict[str, list[float]]:
        if not self.intervals:
            self.done.set()
            return {}
        return self.intervals.pop(0)


class LogRecorder:
    def __init__(self) -> None:
        self.lines: list[str] = []

    def info(self, event: str, **kw: Any) -> None:
        self.lines.append(event)


CALM = {"read": [0.002] * 10}
SLOW = {"read": [0.05] * 10}  # 25x the idle level


async def _run_pace(
    monkeypatch: Any, intervals: list[dict[str, list[float]]], *, deleting: bool
) -> tuple[Metrics, list[str]]:
    from worker.daemon import daemon as daemon_module
    from worker.daemon.rate_limit import TokenBucket

    logged = LogRecorder()
    monkeypatch.setattr(daemon_module, "log", logged)
    metrics = Metrics()
    settings = Settings.model_validate({"worker": {"pace_interval_s": 0.005, "deletes_per_second": 100}})
    store = ScriptedStore(intervals)

    @dataclass
    class Decider:
        limiter: TokenBucket
        bookkeeper: ScriptedStore

    decider = Decider(TokenBucket(100, 1), store)

    async def deletes() -> None:  # a backlog: always a delete waiting for its token
        while True:
            await decider.limiter.acquire()

    tasks = [asyncio.create_task(Daemon(settings, metrics)._pace(decider))]  # type: ignore[arg-type]
    if deleting:
        tasks.append(asyncio.create_task(deletes()))
    await asyncio.wait_for(store.done.wait(), timeout=30)
    for t in tasks:
        t.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await t
    return metrics, [line for line in logged.lines if "pace" in line or "rate" in line]


async def test_an_idle_worker_holds_its_pace_counts_nothing_and_logs_nothing(monkeypatch: Any) -> None:
    # Defect: with nothing queued, a store warming up (latency ratio 2 to 3) halved the pace eight times in
    # 40 s, each with a "metadata store slow" line an operator reads as an alarm.
    metrics, lines = await _run_pace(monkeypatch, [CALM] * 8 + [SLOW] * 8, deleting=False)
    assert metrics.pace_decreases._value.get() == 0
    assert metrics.pace_rate._value.get() == 10  # where it started: a tenth of the ceiling
    assert metrics.pace_latency_ratio._value.get() == 25  # the store was slow, and measured so
    assert lines == []


async def test_a_paced_backlog_logs_one_line_when_slowed_and_one_when_recovered(monkeypatch: Any) -> None:
    metrics, lines = await _run_pace(monkeypatch, [CALM] * 20 + [SLOW] * 4 + [CALM] * 25, deleting=True)
    assert metrics.pace_decreases._value.get() == 4  # every halving counted
    assert metrics.pace_rate._value.get() == 100
    assert lines == [
        "metadata store slow: delete pace slowed",
        "metadata store recovered: delete pace back at its ceiling",
    ]
