"""Group commit: concurrent single requests to one backend go out as batch requests.

The first request goes out at once, alone; every request made while a batch is in flight waits for it and
then goes out with the others in the next batch (up to ``max_batch``). No timer: an idle worker adds no
latency, a busy one sends one ZooKeeper multi or one S3 ``DeleteObjects`` for many messages.

The decision of each message stays its own (the epoch check right before its delete, per item); only the
storage call is shared, and a request waits at most one batch round trip more than it did alone.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Hashable
from typing import Generic, TypeVar

I = TypeVar("I")  # noqa: E741  # one request
R = TypeVar("R")  # its answer

# Answers in request order: a value, or the exception that request failed with.
Commit = Callable[[list[I]], Awaitable[list[R | BaseException]]]


class GroupCommit(Generic[I, R]):
    def __init__(self, commit: Commit[I, R], *, max_batch: int) -> None:
        if max_batch < 1:
            raise ValueError("max_batch must be at least 1")
        self._commit = commit
        self.max_batch = max_batch
        self._queue: list[tuple[I, asyncio.Future[R]]] = []
        self._runner: asyncio.Task[None] | None = None
        self.batches = 0  # batches sent (for the bench and tests)

    async def submit(self, item: I) -> R:
        fut: asyncio.Future[R] = asyncio.get_running_loop().create_future()
        self._queue.append((item, fut))
        if self._runner is None:
            self._runner = asyncio.create_task(self._run())
        return await fut

    async def _run(self) -> None:
        try:
            while self._queue:
                batch = self._queue[: self.max_batch]
                del self._queue[: self.max_batch]
                self.batches += 1
                try:
                    answers = await self._commit([item for item, _ in batch])
                    if len(answers) != len(batch):
                        raise RuntimeError(f"{len(answers)} answers for {len(batch)} requests")
                except asyncio.CancelledError:
                    for _, fut in batch:
                        fut.cancel()
                    raise
                except Exception as e:
                    answers = [e] * len(batch)
                _settle(batch, answers)
        finally:
            self._runner = None
            # Cancelled (the worker is closing): nobody will send what is still queued.
            for _, fut in self._queue:
                fut.cancel()
            self._queue.clear()


def _settle(batch: list[tuple[I, asyncio.Future[R]]], answers: list[R | BaseException]) -> None:
    for (_, fut), answer in zip(batch, answers, strict=True):
        if fut.done():  # its caller gave up (timed out, cancelled); the request was still made
            continue
        if isinstance(answer, BaseException):
            fut.set_exception(answer)
        else:
            fut.set_result(answer)


class GroupCommits(Generic[I, R]):
    """One :class:`GroupCommit` per key (an S3 bucket, a ZooKeeper ensemble)."""

    def __init__(self, commit: Callable[[Hashable], Commit[I, R]], *, max_batch: int) -> None:
        self._make = commit
        self.max_batch = max_batch
        self._groups: dict[Hashable, GroupCommit[I, R]] = {}

    def __getitem__(self, key: Hashable) -> GroupCommit[I, R]:
        g = self._groups.get(key)
        if g is None:
            g = self._groups[key] = GroupCommit(self._make(key), max_batch=self.max_batch)
        return g
