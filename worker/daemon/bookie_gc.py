"""Opt-in: ask the bookies for a garbage collection once a drain has deleted enough
(``bookkeeper.gc_trigger_bytes``, ``bookkeeper.gc_min_interval_s``; the rule: ``worker.core.bookie_gc_due``;
docs/operations.md, "Getting the disk back"). Every configured bookie is asked once, in a task of its own so
no message waits on it; an answer other than 200 is logged and counted, never retried.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping

from worker.backends.bookie_http import BookieClient
from worker.backends.http import new_session
from worker.core.bookie_gc_due import GcAccount
from worker.formats.message import LedgerType
from worker.logs import get_logger
from worker.metrics import Metrics
from worker.settings import BookKeeperSettings

log = get_logger()


class BookieGc:
    def __init__(
        self,
        trigger: Callable[[], Awaitable[Mapping[str, str]]],
        account: GcAccount,
        metrics: Metrics,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._trigger = trigger
        self.account = account
        self.metrics = metrics
        self._clock = clock
        self._task: asyncio.Task[None] | None = None

    def freed(self, ledger_type: LedgerType, freed_bytes: int) -> None:
        """One deletion's bytes (the pipeline's ``Result.freed_bytes``). Offloaded copies free object
        storage, not a bookie's disk: only BookKeeper ledgers count."""
        if ledger_type is not LedgerType.LEDGER:
            return
        due = self.account.add(freed_bytes, self._clock())
        self.metrics.bookie_gc_pending_bytes.set(self.account.pending_bytes)
        # A request still running when the next one is due (a bookie slow to answer): skipped, not queued.
        if due and (self._task is None or self._task.done()):
            self._task = asyncio.get_running_loop().create_task(self._request())

    async def _request(self) -> None:
        try:
            outcomes = await self._trigger()
        except Exception as e:  # any failure is counted and logged; the drain goes on
            self.metrics.bookie_gc_requests.labels(bookie="all", outcome="error").inc()
            log.warning("bookie garbage collection request failed", error=f"{type(e).__name__}: {e}")
            return
        for bookie, outcome in outcomes.items():
            self.metrics.bookie_gc_requests.labels(bookie=bookie, outcome=outcome).inc()
        failed = {b: o for b, o in outcomes.items() if o != "200"}
        if failed:
            log.warning("bookie garbage collection not started everywhere", outcomes=failed)
        else:
            log.info("bookie garbage collection requested", bookies=sorted(outcomes))

    async def idle(self) -> None:
        """Wait for a request in flight (at shutdown, and in tests)."""
        if self._task is not None:
            with contextlib.suppress(asyncio.CancelledError):
                await self._task


@contextlib.asynccontextmanager
async def open_bookie_gc(
    settings: BookKeeperSettings,
    registered_bookies: Callable[[], Awaitable[frozenset[str]]],
    metrics: Metrics,
) -> AsyncIterator[BookieGc | None]:
    """The trigger when ``bookkeeper.gc_trigger_bytes`` turns it on (else None), with a bookie client of its
    own over every configured endpoint, each proven a bookie of our cluster (``registered_bookies``) before
    it is asked."""
    if not settings.gc_trigger_bytes:
        yield None
        return
    async with new_session(settings.request_timeout_s) as session:
        bookies = BookieClient(
            settings.endpoints, session, down_s=settings.bookie_down_s, registered_bookies=registered_bookies
        )
        gc = BookieGc(bookies.trigger_gc, GcAccount(settings.gc_trigger_bytes, settings.gc_min_interval_s), metrics)
        try:
            yield gc
        finally:
            await gc.idle()
