"""Phase 1 (mark), the library other Python services import: queue a pending deletion, then update metadata.

Ordering is the whole protocol: a ledger id may leave a topic's metadata only after the message announcing
its deletion is durable, else a crash between the two orphans it for good; the reverse failure is harmless
(the worker finds the ledger in use and retries). Messages are delivered ``worker.send_delay_s`` after
sending, so the worker does not see one before the caller's metadata write lands. Usage and
:meth:`PendingDeleteSender.send_batch`'s contract: docs/cli.md, "The phase-1 library".
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from types import TracebackType
from typing import Any

import pulsar
from prometheus_client import REGISTRY, CollectorRegistry, Counter

from worker.broker.admin import PulsarAdmin, open_admin
from worker.broker.client import PendingDeleteSchema, Producer, blocking_client, close_client
from worker.broker.topology import ensure_topology
from worker.formats.message import PendingDeleteLedgerInfo
from worker.logs import get_logger
from worker.metrics import Metrics
from worker.settings import Settings

log = get_logger(component="phase1")

SENT_METRIC = "ledger_deletion_sent"

# Sends in flight at once per sender. The producer queues at most max_pending_messages (1000 by default)
# and fails a send beyond that at once, so an unbounded batch of a large ledger list would fail sends
# (kept ledgers, not lost ones) and hold one coroutine per ledger; 64 keeps the pipe full without that.
DEFAULT_MAX_OUTSTANDING_SENDS = 64

# The metadata-update callback: receives the ledger list minus the ids whose message is durable.
MetadataUpdate = Callable[[list[int]], Awaitable[None] | None]


def sent_counter(registry: CollectorRegistry = REGISTRY) -> Counter:
    """``ledger_deletion_sent_total`` in ``registry`` (the process-global one by default), defined once: looked
    up first, so a second sender or import path does not register the name twice (prometheus_client raises)."""
    # prometheus_client has no public lookup by name; this mapping is what its duplicate check uses.
    existing = registry._names_to_collectors.get(f"{SENT_METRIC}_total")
    if isinstance(existing, Counter):
        return existing
    return Counter(SENT_METRIC, "Pending deletions sent by phase 1 in this process", registry=registry)


class SendFailed(Exception):
    """A pending deletion could not be made durable; the ledger must stay in its topic's metadata."""

    def __init__(self, info: PendingDeleteLedgerInfo, cause: BaseException) -> None:
        super().__init__(f"send of {info.ledger_type.value} {info.ledger_id} ({info.topic_name}) failed: {cause}")
        self.info = info
        self.cause = cause


@dataclass(frozen=True, slots=True)
class BatchResult:
    """What :meth:`PendingDeleteSender.send_batch` did: ``removed``, the ids whose messages are all durable;
    ``kept``, ids with a failed send, which stay in the metadata; ``remaining``, the list handed to the callback."""

    sent: tuple[PendingDeleteLedgerInfo, ...]
    failed: tuple[SendFailed, ...]
    removed: tuple[int, ...]
    kept: tuple[int, ...]
    remaining: tuple[int, ...]
    metadata_updated: bool
    message_ids: dict[tuple[str, int], str] = field(default_factory=dict)

    def summary(self) -> dict[str, Any]:
        return {
            "sent": [i.ledger_id for i in self.sent],
            "failed": {f.info.ledger_id: str(f.cause) for f in self.failed},
            "removed": list(self.removed),
            "kept": list(self.kept),
            "remaining": list(self.remaining),
            "metadata_updated": self.metadata_updated,
        }


class MetadataUpdateFailed(Exception):
    """The sends went through but the caller's metadata write raised: nothing is lost (the worker finds the
    ledgers still referenced); the caller may redo its write with ``result.remaining``."""

    def __init__(self, result: BatchResult, cause: BaseException) -> None:
        super().__init__(f"metadata update failed after {len(result.sent)} sends: {cause}")
        self.result = result
        self.cause = cause


class PendingDeleteSender:
    """One long-lived producer on the pending topic (batching off, delayed delivery); ``start`` first makes the
    topology exist, since a topic without a subscription may drop a message to retention before any worker reads it."""

    def __init__(
        self,
        settings: Settings,
        *,
        client: pulsar.Client | None = None,
        admin: PulsarAdmin | None = None,
        metrics: Metrics | None = None,
        source: str = "phase1",
        max_outstanding_sends: int = DEFAULT_MAX_OUTSTANDING_SENDS,
    ) -> None:
        if max_outstanding_sends < 1:
            raise ValueError(f"max_outstanding_sends must be >= 1, got {max_outstanding_sends}")
        self.settings = settings
        self.max_outstanding_sends = max_outstanding_sends
        # Shared by send_batch and concurrent send_pending_delete calls: one bound per producer.
        self._outstanding = asyncio.Semaphore(max_outstanding_sends)
        self._client = client
        self._own_client = client is None
        self._admin = admin
        self._sent = metrics.sent if metrics is not None else sent_counter()
        self.source = source
        self._producer: Producer | None = None
        self._start_lock = asyncio.Lock()

    @property
    def send_delay(self) -> timedelta | None:
        s = self.settings.worker.send_delay_s
        return timedelta(seconds=s) if s > 0 else None

    async def start(self) -> None:
        async with self._start_lock:
            if self._producer is not None:
                return
            await self._ensure_topology()
            if self._client is None:
                self._client = blocking_client(self.settings.pulsar)
            self._producer = await Producer.create(
                self._client,
                self.settings.topics.pending,
                schema=PendingDeleteSchema(),
                # One message per entry: a batch would make one failure fail several ledgers, and
                # deliver_after is per message anyway.
                batching_enabled=False,
                send_timeout_millis=int(max(1.0, self.settings.pulsar.request_timeout_s) * 3000),
            )

    async def _ensure_topology(self) -> None:
        if self._admin is not None:
            await ensure_topology(self._admin, self.settings.topics)
            return
        async with open_admin(self.settings.pulsar) as admin:
            await ensure_topology(admin, self.settings.topics)

    async def close(self) -> None:
        producer, self._producer = self._producer, None
        if producer is not None:
            with contextlib.suppress(Exception):
                await producer.flush()
            with contextlib.suppress(Exception):
                await producer.close()
        if self._own_client and self._client is not None:
            client, self._client = self._client, None
            with contextlib.suppress(Exception):
                await close_client(client)

    async def __aenter__(self) -> PendingDeleteSender:
        await self.start()
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()

    async def send_pending_delete(self, info: PendingDeleteLedgerInfo) -> str:
        """Queue one pending deletion; returns once it is durable on the pending topic. Raises SendFailed."""
        if self._producer is None:
            await self.start()
        assert self._producer is not None
        try:
            async with self._outstanding:
                msg_id = await self._producer.send(info, deliver_after=self.send_delay)
        except Exception as e:
            log.warning(
                "pending deletion not sent",
                topic=info.topic_name,
                ledger_id=info.ledger_id,
                ledger_type=info.ledger_type.value,
                error=f"{type(e).__name__}: {e}",
            )
            raise SendFailed(info, e) from e
        self._sent.inc()
        log.info(
            "pending deletion sent",
            source=self.source,
            topic=info.topic_name,
            ledger_id=info.ledger_id,
            ledger_type=info.ledger_type.value,
            ledger_component=info.ledger_component.value,
            message_id=str(msg_id),
        )
        return msg_id

    async def send_batch(
        self,
        ledger_ids: Sequence[int],
        infos: Sequence[PendingDeleteLedgerInfo],
        update_metadata: MetadataUpdate,
    ) -> BatchResult:
        """PIP-186's batch: send one message per ledger, drop from ``ledger_ids`` exactly the ids whose
        messages are all durable, and call ``update_metadata`` once with what remains (not at all when no send
        succeeded); :class:`MetadataUpdateFailed` carries the result if it raises. At most
        ``max_outstanding_sends`` sends are in flight (a fixed set of tasks takes the messages in order).
        docs/cli.md, "The phase-1 library"."""
        outcomes: list[str | SendFailed | None] = [None] * len(infos)
        todo = iter(enumerate(infos))

        async def drain() -> None:
            # Tasks share one iterator: next() never yields, so each message is taken exactly once.
            for idx, info in todo:
                outcomes[idx] = await self._send_one(info)

        await asyncio.gather(*(drain() for _ in range(min(self.max_outstanding_sends, len(infos)))))
        sent: list[PendingDeleteLedgerInfo] = []
        failed: list[SendFailed] = []
        message_ids: dict[tuple[str, int], str] = {}
        for info, outcome in zip(infos, outcomes, strict=True):
            if isinstance(outcome, SendFailed):
                failed.append(outcome)
            else:
                sent.append(info)
                message_ids[info.dedupe_key] = str(outcome)
        failed_ids = {f.info.ledger_id for f in failed}
        removed_set = {i.ledger_id for i in sent} - failed_ids
        remaining = tuple(lid for lid in ledger_ids if lid not in removed_set)
        removed = tuple(lid for lid in ledger_ids if lid in removed_set)
        kept = tuple(lid for lid in ledger_ids if lid in failed_ids)
        result = BatchResult(tuple(sent), tuple(failed), removed, kept, remaining, False, message_ids)
        if not removed_set:
            return result
        try:
            ret = update_metadata(list(remaining))
            if inspect.isawaitable(ret):
                await ret
        except Exception as e:
            log.error("metadata update failed after sends", error=f"{type(e).__name__}: {e}", **result.summary())
            raise MetadataUpdateFailed(result, e) from e
        done = BatchResult(tuple(sent), tuple(failed), removed, kept, remaining, True, message_ids)
        log.info("pending deletion batch done", **done.summary())
        return done

    async def _send_one(self, info: PendingDeleteLedgerInfo) -> str | SendFailed:
        try:
            return await self.send_pending_delete(info)
        except SendFailed as e:
            return e


async def send_pending_delete(settings: Settings, info: PendingDeleteLedgerInfo) -> str:
    """One-shot convenience (opens and closes a producer): for scripts and operators, not hot paths."""
    async with PendingDeleteSender(settings, source="send") as sender:
        return await sender.send_pending_delete(info)
