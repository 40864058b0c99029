"""The daemon's consumer: pulsar-client's asyncio consumer, with its answers reaching the loop in bursts.

pulsar-client completes each ``acknowledge_async`` on its own threads and wakes the
event loop once per answer (``call_soon_threadsafe``). Under load hundreds of answers arrive together, so
they go through one :class:`~worker.backends.loop_handoff.LoopHandoff`: one wake-up per burst. The C++
client groups the acknowledgements themselves on the wire (its ack grouping, 100 ms by default).

This uses the asyncio consumer's underlying ``_consumer`` and wraps its messages as ``pulsar.asyncio``
does: pulsar-client is pinned to one minor version in pyproject.toml for this reason, and
``tests/unit/test_group_commit.py`` checks those internals are still there.
"""

from __future__ import annotations

import asyncio
from typing import Any

import _pulsar
import pulsar
import pulsar.asyncio as pulsar_asyncio

from worker.backends.loop_handoff import LoopHandoff


class BurstWakeConsumer:
    def __init__(self, consumer: pulsar_asyncio.Consumer) -> None:
        self.consumer = consumer
        self._raw: Any = consumer._consumer
        self._schema = consumer._schema
        self._handoff: LoopHandoff | None = None

    def _loop_handoff(self) -> LoopHandoff:
        loop = asyncio.get_running_loop()
        if self._handoff is None or self._handoff.loop is not loop:
            self._handoff = LoopHandoff(loop)
        return self._handoff

    async def receive_batch(self) -> list[pulsar.Message]:
        """What has arrived, up to the subscription's batch-receive policy (its size, or what came within
        its timeout; possibly nothing). pulsar-client's batch receive blocks, without the GIL, in a thread:
        one thread hop per batch."""
        raw = await asyncio.to_thread(self._raw.batch_receive)
        out = []
        for r in raw:
            msg = pulsar.Message()
            msg._message = r
            msg._schema = self._schema
            out.append(msg)
        return out

    async def acknowledge(self, msg: pulsar.Message) -> None:
        handoff = self._loop_handoff()
        fut: asyncio.Future[Any] = handoff.loop.create_future()
        self._raw.acknowledge_async(msg._message, lambda result: handoff.call(_settle(fut), (result, None)))
        await fut

    async def acknowledge_many(self, msgs: list[pulsar.Message]) -> list[BaseException | None]:
        """Acknowledge every message, awaiting all the answers at once: in order, None for each one the
        client took, the failure for each one it refused."""
        handoff = self._loop_handoff()
        fut: asyncio.Future[None] = handoff.loop.create_future()
        answers: list[BaseException | None] = [None] * len(msgs)
        waiting = len(msgs)

        def answered(answer: tuple[int, BaseException | None]) -> None:  # on the loop
            nonlocal waiting
            i, failure = answer
            answers[i] = failure
            waiting -= 1
            if waiting == 0 and not fut.done():
                fut.set_result(None)

        def on_ack(i: int) -> Any:  # on the client's thread
            return lambda result: handoff.call(
                answered, (i, None if result == _pulsar.Result.Ok else pulsar_asyncio.PulsarException(result))
            )

        for i, msg in enumerate(msgs):
            try:
                self._raw.acknowledge_async(msg._message, on_ack(i))
            except Exception as e:  # refused outright (a closed consumer): no callback will come for it
                answered((i, e))
        if waiting:
            await fut
        return answers

    async def negative_acknowledge(self, msg: pulsar.Message) -> None:
        await self.consumer.negative_acknowledge(msg)

    async def close(self) -> None:
        await self.consumer.close()


def _settle(fut: asyncio.Future[Any]) -> Any:
    def complete(answer: tuple[Any, Any]) -> None:  # on the loop
        result, value = answer
        if fut.done():
            return
        if result == _pulsar.Result.Ok:
            fut.set_result(value)
        else:
            fut.set_exception(pulsar_asyncio.PulsarException(result))

    return complete
