"""Reads shared by the messages of one batch, never older than what each message needs.

The worker receives messages in batches and dispatches them as room frees; every message dispatched
together was received before their instant (``worker.core.dispatch``, taken at the dispatch and passed with
the message). A read of the metadata store that *started* at or after that instant is as fresh as a read each
message would have made for itself at the same moment, so concurrent identical reads (the same gone topic's
managed-ledger znode, asked by every message of the batch) are made once and shared. A read that started before
a message's instant is never given to it: that message reads again.

Outside the daemon (scan, replay, purge, tests) there is no such instant, and every read is its own.
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Hashable
from typing import Generic, TypeVar

V = TypeVar("V")


class SingleFlightReads(Generic[V]):
    """Single-flight reads keyed by what they read, shared only with askers received before they started."""

    def __init__(self, max_entries: int = 4096) -> None:
        self.max_entries = max_entries
        self._reads: OrderedDict[Hashable, tuple[float, asyncio.Future[V]]] = OrderedDict()
        self.shared = 0  # reads answered by another message's read (for the bench and tests)

    async def read(self, key: Hashable, load: Callable[[], Awaitable[V]], since: float | None = None) -> V:
        """``load()``'s answer for ``key``; one that started at or after ``since`` (the asking message's dispatch)
        is shared, with ``since`` None none is."""
        loop = asyncio.get_running_loop()
        hit = self._reads.get(key)
        if since is not None and hit is not None and hit[0] >= since:
            self.shared += 1
            return await asyncio.shield(hit[1])
        started = loop.time()
        fut = asyncio.ensure_future(load())
        entry = (started, fut)
        self._reads[key] = entry
        self._reads.move_to_end(key)
        while len(self._reads) > self.max_entries:
            self._reads.popitem(last=False)
        fut.add_done_callback(lambda f: self._forget_failure(key, entry))
        return await asyncio.shield(fut)

    def _forget_failure(self, key: Hashable, entry: tuple[float, asyncio.Future[V]]) -> None:
        # A failed read is shared with whoever waited for it, never with a later asker.
        fut = entry[1]
        if (fut.cancelled() or fut.exception() is not None) and self._reads.get(key) is entry:
            del self._reads[key]
