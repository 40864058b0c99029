"""Results computed on another thread reach the event loop in bursts: one wake-up per burst, not per result.

kazoo completes every request on its own callback thread. ``loop.call_soon_threadsafe`` per result costs a
write to the loop's self-pipe, a wake-up and a read for each one; under load the answers of a whole batch of
requests arrive together, so they are queued here and the loop is woken once for all of them.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from typing import Any


class LoopHandoff:
    """Call ``fn(arg)`` on ``loop`` from any thread; calls made before the loop gets to them run together,
    in the order they were made."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self._lock = threading.Lock()
        self._pending: list[tuple[Callable[[Any], None], Any]] = []
        self._scheduled = False

    def call(self, fn: Callable[[Any], None], arg: Any) -> None:
        with self._lock:
            self._pending.append((fn, arg))
            if self._scheduled:
                return
            self._scheduled = True
        try:
            self.loop.call_soon_threadsafe(self._run)
        except RuntimeError:  # the loop closed while the call was in flight: nobody waits for the answer
            with self._lock:
                self._pending.clear()
                self._scheduled = False

    def _run(self) -> None:
        with self._lock:
            batch, self._pending = self._pending, []
            self._scheduled = False
        for fn, arg in batch:
            fn(arg)
