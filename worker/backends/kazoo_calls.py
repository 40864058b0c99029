"""kazoo's calls, awaited from asyncio with one error mapping.

NoNode, BadVersion, NodeExists and NotEmpty are answers, not failures: they reach the caller as
themselves, who decides what they mean. Everything else (connection loss, session expiry, no answer in
time) becomes :class:`~worker.errors.BackendError`, which the daemon retries and never acks.
"""

from __future__ import annotations

import asyncio
import functools
import time
from collections.abc import Callable
from typing import Any, TypeVar

from kazoo.exceptions import BadVersionError, KazooException, NodeExistsError, NoNodeError, NotEmptyError
from kazoo.handlers.threading import KazooTimeoutError

from worker.backends.loop_handoff import LoopHandoff
from worker.backends.store_latency import StoreLatency, kind_of
from worker.errors import BackendError

T = TypeVar("T")

ANSWERS = (NoNodeError, BadVersionError, NodeExistsError, NotEmptyError)


class KazooCalls:
    """Awaits kazoo's ``*_async`` methods on one client, each bounded by ``timeout_s``.

    No thread per call: kazoo completes its IAsyncResult on its own callback thread, and the answers reach
    the loop through one :class:`LoopHandoff` (one wake-up for a burst of answers). A thread hop per call
    through the default executor, then a wake-up per answer, were the ZooKeeper route's main costs
    (bench/results/LOG.md). The timeout is a timer on the future, not a ``wait_for`` task per call."""

    def __init__(self, timeout_s: float) -> None:
        self.timeout_s = timeout_s
        self._handoff: LoopHandoff | None = None
        # Every answered call's latency, by kind: the pace's signal (``worker.core.pace``).
        self.latency = StoreLatency()

    async def call(self, method: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        loop = asyncio.get_running_loop()
        handoff = self._handoff
        if handoff is None or handoff.loop is not loop:
            handoff = self._handoff = LoopHandoff(loop)
        fut: asyncio.Future[Any] = loop.create_future()

        def settle(result: Any) -> None:  # on the loop
            if fut.done():
                return  # timed out or cancelled already: the answer has nobody to go to
            exc = result.exception
            if exc is not None:
                fut.set_exception(exc)
            else:
                fut.set_result(result.value)

        timer = loop.call_later(self.timeout_s, _expire, fut)
        # The answer's time is taken on kazoo's thread, when it arrives: a busy event loop must not read as
        # a slow store.
        answered: list[float] = []

        def on_answer(result: Any) -> None:  # on kazoo's thread
            answered.append(time.monotonic())
            handoff.call(settle, result)

        started = time.monotonic()
        try:
            method(*args, **kwargs).rawlink(on_answer)
            result = await fut
        except ANSWERS:
            self._took(method, started, answered)
            raise
        except TimeoutError as e:
            self._took(method, started, [started + self.timeout_s])  # at least that slow
            raise BackendError("zookeeper", f"no answer within {self.timeout_s}s") from e
        except (KazooTimeoutError, KazooException) as e:
            raise BackendError("zookeeper", f"{type(e).__name__}: {e}") from e
        finally:
            timer.cancel()
        self._took(method, started, answered)
        return result

    def _took(self, method: Callable[..., Any], started: float, answered: list[float]) -> None:
        if answered:
            self.latency.record(kind_of(getattr(method, "__name__", "")), answered[0] - started)


async def run_blocking(fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """Run a blocking kazoo call in a thread with the same error mapping (for tools and tests)."""
    try:
        return await asyncio.to_thread(functools.partial(fn, *args, **kwargs))
    except ANSWERS:
        raise
    except (KazooTimeoutError, KazooException) as e:
        raise BackendError("zookeeper", f"{type(e).__name__}: {e}") from e


def _expire(fut: asyncio.Future[Any]) -> None:
    if not fut.done():
        fut.set_exception(TimeoutError())
