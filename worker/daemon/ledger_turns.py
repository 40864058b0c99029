"""One decision at a time per ledger: duplicates of a pending deletion wait their turn, so exactly one of
them deletes the ledger and the others find it already gone.

A dict of queues rather than an ``asyncio.Lock`` per ledger behind a context manager: almost every ledger
is asked about once, and then a turn costs one dict insert and one delete instead of a lock, its
bookkeeping and a context manager on the hot path.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
from collections.abc import Hashable


class LedgerTurns:
    def __init__(self) -> None:
        # key -> the turns waiting after the current holder's (an entry exists while someone holds it).
        self._queues: dict[Hashable, collections.deque[asyncio.Future[None]]] = {}

    def __len__(self) -> int:
        """Ledgers someone holds a turn on."""
        return len(self._queues)

    async def take(self, key: Hashable) -> None:
        """Wait for the ledger's turn (at once when nobody holds it). Hand it back with :meth:`done`."""
        waiting = self._queues.get(key)
        if waiting is None:
            self._queues[key] = collections.deque()
            return
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        waiting.append(fut)
        try:
            await fut
        except asyncio.CancelledError:
            if fut.done() and not fut.cancelled():
                self.done(key)  # handed the turn, then cancelled before using it: hand it on
            else:
                with contextlib.suppress(ValueError):  # already skipped by a done() that saw it cancelled
                    waiting.remove(fut)
            raise

    def done(self, key: Hashable) -> None:
        """End the current turn: the next waiter's begins (cancelled ones are skipped)."""
        waiting = self._queues[key]
        while waiting:
            nxt = waiting.popleft()
            if not nxt.done():
                nxt.set_result(None)
                return
        del self._queues[key]
