"""Token bucket for storage deletes: a burst of ``burst``, then ``rate`` per second on average.

Deleting is cheap for us and expensive for a bookie (it opens a BookKeeper client per HTTP delete) or
for an object store's request quota; the bucket keeps a drained backlog from becoming a storm.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable


class TokenBucket:
    def __init__(self, rate: float, burst: int, clock: Callable[[], float] = time.monotonic) -> None:
        if rate <= 0 or burst < 1:
            raise ValueError("rate must be > 0 and burst >= 1")
        self.rate = rate
        self.burst = float(burst)
        self._clock = clock
        self._tokens = float(burst)
        self._last = clock()
        self._lock = asyncio.Lock()
        # What the pace reads to know whether there is anything to pace (``worker.core.pace``): tokens taken
        # since the start, and callers of ``acquire`` not yet served.
        self.taken = 0
        self.waiting = 0

    def _refill(self) -> None:
        now = self._clock()
        self._tokens = min(self.burst, self._tokens + (now - self._last) * self.rate)
        self._last = now

    def set_rate(self, rate: float) -> None:
        """A new rate from now on (the tokens gathered so far at the old one are kept)."""
        if rate <= 0:
            raise ValueError("rate must be > 0")
        self._refill()
        self.rate = rate

    def try_acquire(self) -> float:
        """Take a token if one is there (returns 0.0), else return the wait until one will be."""
        self._refill()
        if self._tokens >= 1.0:
            self._tokens -= 1.0
            self.taken += 1
            return 0.0
        return (1.0 - self._tokens) / self.rate

    async def acquire(self) -> None:
        self.waiting += 1
        try:
            # The lock makes waiters queue in order instead of all waking for the same token.
            async with self._lock:
                while (wait := self.try_acquire()) > 0:  # noqa: ASYNC110 - waiting on time, not on an event
                    await asyncio.sleep(wait)
        finally:
            self.waiting -= 1
